"""identity's served OpenAPI document is exact (tests/contract.py: Schemathesis, every check,
positive, negative and coverage cases; hiwallet.identity.document writes it), with the customer
realm's admin service account's token (onboarding's client: manage-users) on every case. Half
the positive cases are pointed at a real user and at the client's own credentials, so that
generation reaches the use cases, not only "not found" and "invalid client"."""

from __future__ import annotations

from typing import Any

from tests import contract
from tests.identity.conftest import SECRETS, IdentityServer


def test_the_service_matches_its_document(customer_idp: IdentityServer) -> None:
    admin = customer_idp.admin("onboarding")
    user_id = customer_idp.create_user("contract-user")
    token = admin.connection.token["access_token"]

    def steer(case: Any) -> None:
        if contract.digest(case)[0] % 2:
            return
        if "user_id" in (case.path_parameters or {}):
            case.path_parameters["user_id"] = user_id
        if case.operation.path.endswith("/token") and isinstance(case.body, dict):
            case.body.update(
                grant_type="client_credentials", client_id="onboarding", client_secret=SECRETS["onboarding"]
            )
            case.body.pop("scope", None)

    # 400 is how OAuth (RFC 6749 §5.2) and Keycloak's pages refuse a well-formed request by design
    # (an unknown client, a code not valid, an expired login flow): a refusal, not "malformed".
    seen = contract.check_document(
        customer_idp.base_url, token=lambda: token, steer=steer, examples=10, accepted=("400", "422")
    )
    for reached in (
        "GET /realms/{realm_name}/.well-known/openid-configuration 200",
        "GET /realms/{realm_name}/protocol/openid-connect/certs 200",
        "POST /realms/{realm_name}/protocol/openid-connect/token 200",
        "POST /admin/realms/{realm_name}/users 201",
        "GET /admin/realms/{realm_name}/users 200",
        "GET /admin/realms/{realm_name}/users/{user_id} 200",
        "PUT /admin/realms/{realm_name}/users/{user_id} 204",
    ):
        assert seen[reached], (reached, seen)
