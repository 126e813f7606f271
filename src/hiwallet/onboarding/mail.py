"""The e-mails onboarding sends (over SMTP; the mail catcher locally): a registration code, or
"you already have an account" to an address that has one. Both answer the same to the caller;
only the mailbox's owner sees which."""

from __future__ import annotations

from hiwallet.core.mail import MAIL_ERRORS, send_mail
from hiwallet.onboarding.clients import DependencyUnavailable
from hiwallet.onboarding.settings import OnboardingSettings


class Mailer:
    def __init__(self, settings: OnboardingSettings) -> None:
        self._settings = settings

    async def send_code(self, to: str, code: str) -> None:
        minutes = max(1, self._settings.code_ttl_s // 60)
        await self._send(
            to,
            f"Your HiWallet code: {code}",
            f"Your code to register with HiWallet is {code}.\n\n"
            f"It is valid for {minutes} minutes. If you did not ask for it, ignore this e-mail.\n",
        )

    async def send_already_registered(self, to: str) -> None:
        await self._send(
            to,
            "Your HiWallet registration",
            "Someone (perhaps you) asked to register this address with HiWallet, but it has an "
            "account already: log in instead, or reset your password on the login page.\n\n"
            "If it was not you, ignore this e-mail; nothing has changed.\n",
        )

    async def _send(self, to: str, subject: str, body: str) -> None:
        s = self._settings
        try:
            await send_mail(s, to=to, subject=subject, body=body)
        except MAIL_ERRORS as exc:
            raise DependencyUnavailable("mail", type(exc).__name__) from exc
