"""onboarding: registration (an e-mail code, a password, the user in the customers'
realm, the personal account in wallet-api), basic verification (phone, identity against the
population registry, consents) and the tier it sets; the only service holding a customer's
personal data, sealed field by field in its own database. docs/onboarding.md."""

from hiwallet.onboarding.clients import DependencyUnavailable, PersonalAccount, ServiceToken, WalletApi
from hiwallet.onboarding.crypto import Hasher, KeyRing
from hiwallet.onboarding.settings import OnboardingSettings, get_onboarding_settings
from hiwallet.onboarding.store import TIERS, customer_by_wallet, database_spec, record_tier

__all__ = [
    "TIERS",
    "DependencyUnavailable",
    "Hasher",
    "KeyRing",
    "OnboardingSettings",
    "PersonalAccount",
    "ServiceToken",
    "WalletApi",
    "customer_by_wallet",
    "database_spec",
    "get_onboarding_settings",
    "record_tier",
]
