"""Sending one plain-text e-mail over SMTP (the mail catcher locally), for a service that mails
its users. smtplib blocks, so the exchange runs in a worker thread; every socket operation of it
is bounded by ``timeout_s``. What a failure means is the caller's to decide (a mail kept for a
resend, a 503): it is raised as smtplib and the socket raise it (:data:`MAIL_ERRORS`)."""

from __future__ import annotations

import asyncio
import smtplib
from email.message import EmailMessage
from typing import Protocol

__all__ = ["MAIL_ERRORS", "MailSettings", "send_mail"]

# What a failed delivery raises: the network's errors and the SMTP server's refusals.
MAIL_ERRORS = (OSError, smtplib.SMTPException)


class MailSettings(Protocol):
    """What a service's settings say of its mail (identity's and onboarding's have these)."""

    @property
    def smtp_host(self) -> str: ...
    @property
    def smtp_port(self) -> int: ...
    @property
    def smtp_timeout_s(self) -> float: ...
    @property
    def mail_from(self) -> str: ...


async def send_mail(settings: MailSettings, *, to: str, subject: str, body: str) -> None:
    """Send ``body`` to ``to`` from ``settings.mail_from``; one of :data:`MAIL_ERRORS` if it was
    not sent."""
    host, port, timeout_s = settings.smtp_host, settings.smtp_port, settings.smtp_timeout_s
    if not 0 < timeout_s <= 300:  # never unbounded: a hung server would hold the thread
        raise ValueError("an SMTP timeout is over 0 and at most 300 s")
    message = EmailMessage()
    message["From"] = settings.mail_from
    message["To"] = to
    message["Subject"] = subject
    message.set_content(body)

    def send() -> None:
        with smtplib.SMTP(host, port, timeout=timeout_s) as smtp:
            smtp.send_message(message)

    await asyncio.to_thread(send)
