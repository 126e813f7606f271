"""staff-admin: employees, roles (named sets of the fixed permissions of
hiwallet.contracts.staff), invitations into the staff realm, and the append-only audit log; and
``GET /v1/me``, which every service asks on every staff request. docs/staff.md."""

from hiwallet.staff_admin.service import ADMINISTRATOR, PERMISSIONS, StaffAdmin
from hiwallet.staff_admin.settings import StaffAdminSettings, get_staff_admin_settings

__all__ = ["ADMINISTRATOR", "PERMISSIONS", "StaffAdmin", "StaffAdminSettings", "get_staff_admin_settings"]
