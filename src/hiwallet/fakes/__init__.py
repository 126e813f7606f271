"""Fakes of the outside institutions, in the real ones' shape: a card provider in Stripe's
(``stripe-fake``, :mod:`hiwallet.fakes.stripe`) and our bank (``bank-fake``,
:mod:`hiwallet.fakes.bank`), sharing only their webhook delivery (:mod:`hiwallet.fakes.delivery`);
for onboarding, a mail catcher in mailpit's (``mail-catcher``, :mod:`hiwallet.fakes.mail`), an SMS
provider (``sms-fake``, :mod:`hiwallet.fakes.sms`) and the population registry's KPS identity
check (``nvi-fake``, :mod:`hiwallet.fakes.nvi`).

They share nothing of HiWallet but the HTTP basics (an import-linter contract): in production only
their address, secrets and keys change, by configuration. docs/fakes.md describes them.
"""

from __future__ import annotations

# Nothing here: `hiwallet run NAME` imports the module it serves, and only it.
__all__: list[str] = []
