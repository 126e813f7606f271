"""Operating the service: the staff realm's network restriction and the rotate-keys command."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from hiwallet.cli import app as cli
from hiwallet.contracts.databases import DATABASES
from hiwallet.core.http import ClientNetworks, create_app
from hiwallet.identity.app import create_identity_app
from hiwallet.identity.settings import IdentitySettings
from tests.identity.conftest import IdentityServer
from tests.waiting import until_sync

KEY_GAUGE = "hiwallet_identity_signing_key_active_since_timestamp_seconds"


async def _ok() -> dict[str, str]:
    return {"status": "ok"}


@pytest.mark.parametrize(
    ("client_ip", "status"),
    [("127.0.0.1", 200), ("10.1.2.3", 200), ("192.168.7.1", 200), ("203.0.113.9", 403), ("2001:db8::1", 403)],
)
async def test_staff_realm_answers_only_the_internal_network(client_ip: str, status: int) -> None:
    networks = ["127.0.0.0/8", "10.0.0.0/8", "192.168.0.0/16"]
    inner = create_app("net-test", client_networks=ClientNetworks.of(networks, ("/",)))
    transport = httpx.ASGITransport(app=inner, client=(client_ip, 5555))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        response = await client.get("/health")
    assert response.status_code == status
    if status == 403:
        assert response.json()["type"] == "https://hiwallet.dev/problems/forbidden"


@pytest.mark.parametrize(("realm", "status"), [("hiwallet-staff", 403), ("hiwallet", 200)])
async def test_the_staff_realms_app_is_behind_its_networks(realm: str, status: int) -> None:
    """The app identity serves (no lifespan: /health needs none), asked from outside."""
    app = create_identity_app(realm, IdentitySettings(staff_allowed_networks=["10.0.0.0/8"]))
    transport = httpx.ASGITransport(app=app, client=("203.0.113.9", 5555))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        assert (await client.get("/health")).status_code == status


def test_staff_server_is_restricted_by_default(staff_idp: IdentityServer) -> None:
    # The test server listens on 127.0.0.1, inside the default internal networks.
    assert "127.0.0.0/8" in staff_idp.settings.staff_allowed_networks
    assert httpx.get(staff_idp.issuer + "/.well-known/openid-configuration").status_code == 200


def test_rotate_keys_command(customer_idp: IdentityServer, monkeypatch: pytest.MonkeyPatch) -> None:
    # Point the command at this test's database instead of hiwallet_identity.
    monkeypatch.setitem(DATABASES, "identity", customer_idp.database)
    before = {
        k["kid"] for k in httpx.get(customer_idp.issuer + "/protocol/openid-connect/certs").json()["keys"]
    }
    [active_before] = customer_idp.sql("SELECT kid FROM signing_keys WHERE status = 'active'")

    result = CliRunner().invoke(cli, ["identity", "rotate-keys", "--realm", "hiwallet"])
    assert result.exit_code == 0, result.output

    [active_after] = customer_idp.sql("SELECT kid FROM signing_keys WHERE status = 'active'")
    assert active_after["kid"] != active_before["kid"]
    assert active_after["kid"] in result.output
    after = {
        k["kid"] for k in httpx.get(customer_idp.issuer + "/protocol/openid-connect/certs").json()["keys"]
    }
    # The promoted key was already published; the old one stays until its tokens expire.
    assert after == before


def _key_gauge(server: IdentityServer) -> float | None:
    text = httpx.get(server.base_url + "/metrics").text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == KEY_GAUGE:
                return float(sample.value)
    return None


def test_the_key_gauge_follows_a_rotation(
    customer_idp: IdentityServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The alert's signal (docs/operations.md): when the key in use became active, read again
    after a rotation by another process."""
    monkeypatch.setitem(DATABASES, "identity", customer_idp.database)
    since = "SELECT extract(epoch FROM activated_at)::float8 AS t FROM signing_keys WHERE status = 'active'"
    [before] = customer_idp.sql(since)
    until_sync(lambda: _key_gauge(customer_idp) == before["t"], 10, "the gauge of the active key")

    result = CliRunner().invoke(cli, ["identity", "rotate-keys", "--realm", "hiwallet"])
    assert result.exit_code == 0, result.output
    [after] = customer_idp.sql(since)
    assert after["t"] > before["t"]
    until_sync(lambda: _key_gauge(customer_idp) == after["t"], 10, "the gauge of the promoted key")
