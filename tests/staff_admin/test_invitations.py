"""Invitations end to end: an administrator invites by e-mail, staff-admin creates the user in
the staff realm with its service account, the identity service mails the link (the mail
catcher receives it), the employee sets a password and TOTP on the identity pages (driven over
HTTP), and the first login completes the invitation; expired, revoked and reused ones are
refused."""

from __future__ import annotations

import httpx

from hiwallet.core.http import problem_type
from tests.identity.conftest import IdentityServer
from tests.staff_admin.conftest import Catcher, Employee, StaffAdminServer, start_staff_admin


def invite(server: StaffAdminServer, admin: Employee, email: str, *role_ids: str) -> dict[str, object]:
    answer = server.call(
        "POST", "/v1/invitations", admin, {"email": email, "name": "Deniz Kaya", "role_ids": role_ids}
    )
    assert answer.status_code == 201, answer.text
    body: dict[str, object] = answer.json()
    return body


def test_invite_mail_set_password_and_totp_first_login_completes(
    staff_admin: StaffAdminServer, catcher: Catcher
) -> None:
    admin = staff_admin.admin()
    role = staff_admin.role("reviewers", "withdrawal.review", "customer.view")
    invitation = invite(staff_admin, admin, "deniz@hiwallet.dev", role)
    assert invitation["state"] == "pending"
    user = staff_admin.idp.admin().get_user(invitation["subject"])
    assert set(user["requiredActions"]) == {"UPDATE_PASSWORD", "CONFIGURE_TOTP"}

    link = catcher.link_for("deniz@hiwallet.dev")
    secret = staff_admin.accept(link)
    # The link was for one use.
    assert httpx.get(link).status_code == 400
    token, _ = staff_admin.login("deniz@hiwallet.dev", secret)
    deniz = Employee(str(invitation["subject"]), "deniz@hiwallet.dev", token, secret)

    # Before the first login nobody is an employee; the first GET /v1/me makes one.
    assert (
        staff_admin.sql("SELECT count(*) FROM staff.employees WHERE subject = $1", deniz.subject)[0][0] == 0
    )
    me = staff_admin.get("/v1/me", deniz)
    assert me.status_code == 200, me.text
    assert me.json()["roles"] == [{"id": role, "name": "reviewers"}]
    assert me.json()["permissions"] == ["customer.view", "withdrawal.review"]
    assert me.json()["name"] == "Deniz Kaya"
    assert staff_admin.get("/v1/me", deniz).status_code == 200  # and again: completed once
    done = staff_admin.get(f"/v1/invitations/{invitation['id']}", admin).json()
    assert done["state"] == "completed"
    actions = [(r["actor"], r["action"]) for r in staff_admin.audit_rows()]
    assert actions == [
        (f"staff:{admin.subject}", "invitation.created"),
        (f"staff:{deniz.subject}", "invitation.completed"),
    ]
    # Single use: the address is an employee's now.
    again = staff_admin.call(
        "POST", "/v1/invitations", admin, {"email": "deniz@hiwallet.dev", "role_ids": []}
    )
    assert again.status_code == 409
    assert again.json()["type"] == problem_type("already-employee")


def test_an_expired_invitation_is_refused_at_first_login(
    staff_admin: StaffAdminServer, catcher: Catcher
) -> None:
    admin = staff_admin.admin()
    invitation = invite(staff_admin, admin, "emre@hiwallet.dev")
    secret = staff_admin.accept(catcher.link_for("emre@hiwallet.dev"))
    token, _ = staff_admin.login("emre@hiwallet.dev", secret)
    staff_admin.sql(
        "UPDATE staff.invitations SET expires_at = now() - interval '1 second' WHERE id = $1",
        invitation["id"],
    )
    emre = Employee(str(invitation["subject"]), "emre@hiwallet.dev", token, secret)
    refused = staff_admin.get("/v1/me", emre)
    assert refused.status_code == 403
    assert refused.json()["type"] == problem_type("staff-not-allowed")
    assert staff_admin.get(f"/v1/invitations/{invitation['id']}", admin).json()["state"] == "expired"
    # A new invitation to the address replaces the expired one (the same staff-realm user).
    renewed = invite(staff_admin, admin, "emre@hiwallet.dev")
    assert renewed["subject"] == invitation["subject"]
    assert staff_admin.get(f"/v1/invitations/{invitation['id']}", admin).json()["state"] == "revoked"


def test_a_revoked_invitation_is_refused_even_if_the_user_logs_in(
    staff_admin: StaffAdminServer, catcher: Catcher
) -> None:
    admin = staff_admin.admin()
    invitation = invite(staff_admin, admin, "ece@hiwallet.dev")
    revoked = staff_admin.call("POST", f"/v1/invitations/{invitation['id']}/revoke", admin)
    assert revoked.status_code == 200 and revoked.json()["state"] == "revoked"
    # staff-admin disabled the user in the realm...
    kc = staff_admin.idp.admin()
    assert kc.get_user(invitation["subject"])["enabled"] is False
    # ...and if that had failed (enabled again here), the first login still grants nothing.
    kc.update_user(invitation["subject"], {"enabled": True})
    secret = staff_admin.accept(catcher.link_for("ece@hiwallet.dev"))
    token, _ = staff_admin.login("ece@hiwallet.dev", secret)
    refused = staff_admin.get(
        "/v1/me", Employee(str(invitation["subject"]), "ece@hiwallet.dev", token, secret)
    )
    assert refused.status_code == 403
    assert staff_admin.call("POST", f"/v1/invitations/{invitation['id']}/revoke", admin).status_code == 409
    assert [r["action"] for r in staff_admin.audit_rows()] == ["invitation.created", "invitation.revoked"]


def test_a_second_pending_invitation_to_one_address_is_refused(staff_admin: StaffAdminServer) -> None:
    admin = staff_admin.admin()
    invite(staff_admin, admin, "ali@hiwallet.dev")
    again = staff_admin.call("POST", "/v1/invitations", admin, {"email": "ALI@hiwallet.dev", "role_ids": []})
    assert again.status_code == 409
    assert again.json()["type"] == problem_type("invitation-pending")
    unknown = staff_admin.call(
        "POST", "/v1/invitations", admin, {"email": "x@hiwallet.dev", "role_ids": ["nope"]}
    )
    assert unknown.status_code == 422
    assert unknown.json()["type"] == problem_type("unknown-role")


def test_a_mail_that_cannot_be_sent_leaves_no_invitation_and_no_audit_row(
    staff_idp: IdentityServer, staff_admin_db: str, catcher: Catcher
) -> None:
    # The identity service refuses the e-mail (a redirect URI its client does not have) after
    # the user was made: the invitation and its audit row, written before, are rolled back.
    server = start_staff_admin(
        staff_idp, staff_admin_db, invitation_redirect_uri="http://127.0.0.1:1/elsewhere"
    )
    try:
        admin = server.admin()
        body = {"email": "fail@hiwallet.dev", "role_ids": []}
        refused = server.call("POST", "/v1/invitations", admin, body)
        assert refused.status_code == 503, refused.text
        assert refused.json()["type"] == problem_type("identity-unavailable")
        assert server.sql("SELECT count(*) FROM staff.invitations")[0][0] == 0
        assert server.audit_rows() == []
        assert catcher.messages_to("fail@hiwallet.dev") == []
    finally:
        server.stop()
