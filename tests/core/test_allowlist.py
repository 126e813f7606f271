"""core.http's client allow-list: the guarded paths answer only the listed networks (the peer
as an IPv4-mapped IPv6 address counts as its IPv4 one; no peer is refused), the others pass,
an empty list restricts nothing, the hot lane is behind it too."""

from __future__ import annotations

import httpx
import pytest
from fastapi import APIRouter, Request
from fastapi.responses import Response

from hiwallet.core.http import ClientNetworks, LeanRoute, create_app
from hiwallet.core.http.allowlist import ClientAllowlist, allowlisted

router = APIRouter(prefix="/in", route_class=LeanRoute)


@router.post("/hook")
async def hook(request: Request) -> Response:
    return Response(status_code=202)


def app_with(networks: list[str]) -> object:
    app = create_app(
        "allowlist-test",
        hot_routes=[r for r in router.routes if isinstance(r, LeanRoute)],
        client_networks=ClientNetworks.of(networks, ("/in/",)),
    )
    app.include_router(router)
    return app


async def status(app: object, address: str, path: str = "/in/hook") -> int:
    transport = httpx.ASGITransport(app=app, client=(address, 1234))  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        return (await client.post(path) if path.startswith("/in") else await client.get(path)).status_code


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("10.1.2.3", 202),
        ("::ffff:10.1.2.3", 202),
        ("2001:db8::1", 202),
        ("10.2.0.1", 403),
        ("::1", 403),
        ("not-an-address", 403),
    ],
)
async def test_the_guarded_paths_answer_only_the_listed_networks(address: str, expected: int) -> None:
    assert await status(app_with(["10.1.0.0/16", "2001:db8::/32"]), address) == expected


async def test_other_paths_pass_and_an_empty_list_restricts_nothing() -> None:
    assert await status(app_with(["10.1.0.0/16"]), "192.0.2.1", "/health") == 200
    assert await status(app_with([]), "192.0.2.1") == 202


def test_no_list_leaves_the_app_unchanged_and_a_bad_declaration_is_refused() -> None:
    inner = create_app("allowlist-test")
    assert allowlisted(inner, None, "x") is inner
    assert allowlisted(inner, ClientNetworks.of([], ("/",)), "x") is inner
    assert isinstance(allowlisted(inner, ClientNetworks.of(["10.0.0.0/8"], ("/",)), "x"), ClientAllowlist)
    with pytest.raises(ValueError):
        ClientNetworks.of(["10.0.0.1/8"], ("/",))  # host bits set: a typo, not a network
    with pytest.raises(ValueError):
        ClientNetworks.of(["10.0.0.0/8"], ())


async def test_no_peer_is_refused() -> None:
    allowed = ClientNetworks.of(["10.0.0.0/8"], ("/",))
    assert not allowed.allows(None)
