"""Fakes of the outside institutions, in the real ones' shape: a card provider in Stripe's
(``stripe-fake``, :mod:`hiwallet.fakes.stripe`) and our bank (``bank-fake``,
:mod:`hiwallet.fakes.bank`), sharing only their webhook delivery (:mod:`hiwallet.fakes.delivery`).

They share nothing of HiWallet but the HTTP basics (an import-linter contract): in production only
their address, secrets and keys change, by configuration. docs/fakes.md describes them.
"""

from __future__ import annotations

# Nothing here: `hiwallet run stripe-fake|bank-fake` imports the module it serves, and only it.
__all__: list[str] = []
