"""backoffice-bff: the backoffice panel's BFF (port 8005, internal). Employees sign in on the
staff realm (password and TOTP, identity's pages); the menu and every button come from
staff-admin's ``GET /v1/me``; pages for customers, the withdrawal review queue, employees,
invitations and the audit log. docs/architecture.md, "The BFFs"."""

from hiwallet.backoffice_bff.app import SERVICE, create_backoffice_bff_app, run_backoffice_bff

__all__ = ["SERVICE", "create_backoffice_bff_app", "run_backoffice_bff"]
