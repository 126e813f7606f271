"""personal-web-bff: the customers' web app (server-rendered pages in Turkish and English, no
script), a BFF over wallet-api, the withdrawal orchestrator and onboarding."""

from hiwallet.personal_web_bff.app import SERVICE, create_personal_web_bff_app, run_personal_web_bff

__all__ = ["SERVICE", "create_personal_web_bff_app", "run_personal_web_bff"]
