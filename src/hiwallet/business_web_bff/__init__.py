"""business-web-bff: the merchant panel's BFF. For now its health endpoints only (the seed's
state for it: "business-web-bff is up with its health endpoints"); its pages come later."""

from hiwallet.business_web_bff.app import SERVICE, create_business_web_bff_app, run_business_web_bff

__all__ = ["SERVICE", "create_business_web_bff_app", "run_business_web_bff"]
