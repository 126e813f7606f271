"""core.egress: the SSRF rule for calls to addresses customers give (merchants' webhooks)."""

from __future__ import annotations

import ipaddress

import aiohttp
import pytest

from hiwallet.core.egress import ForbiddenTarget, PublicResolver, check_url, is_public, resolve_public


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("93.184.216.34", True),
        ("8.8.8.8", True),
        ("2606:4700:4700::1111", True),
        ("127.0.0.1", False),
        ("10.0.0.1", False),
        ("172.31.255.255", False),
        ("192.168.0.1", False),
        ("169.254.169.254", False),
        ("100.64.0.1", False),
        ("0.0.0.0", False),
        ("255.255.255.255", False),
        ("224.0.0.251", False),
        ("240.0.0.1", False),
        ("::", False),
        ("::1", False),
        ("fe80::1", False),
        ("fc00::1", False),
        ("ff02::1", False),
        ("::ffff:10.0.0.1", False),
        ("::ffff:93.184.216.34", True),
        ("2002:7f00:0001::", False),  # 6to4 of 127.0.0.1
    ],
)
def test_is_public(address: str, public: bool) -> None:
    assert is_public(ipaddress.ip_address(address)) is public


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("ftp://example.com/", "scheme"),
        ("javascript:alert(1)", "scheme"),
        ("http://a:b@example.com/", "userinfo"),
        ("http://@example.com/", "userinfo"),
        ("http://exa mple.com/", "malformed"),
        ("http://example.com:99999/", "malformed"),
        ("http://example.com:0/", "malformed"),
        ("https://" + "a" * 2050 + ".com/", "too-long"),
    ],
)
def test_urls_of_the_wrong_form_are_refused(url: str, reason: str) -> None:
    with pytest.raises(ForbiddenTarget) as refused:
        check_url(url)
    assert refused.value.reason == reason


async def test_a_name_resolving_to_loopback_is_refused_unless_development_allows_it() -> None:
    target = check_url("http://localhost:8080/hook")
    with pytest.raises(ForbiddenTarget) as refused:
        await resolve_public(target, allow_private=False, timeout_s=2)
    assert refused.value.reason == "private-address"
    assert await resolve_public(target, allow_private=True, timeout_s=2)


async def test_the_connections_resolver_refuses_a_private_answer() -> None:
    """What the connection itself resolves (after the check) is checked again: a name that
    rebinds to a private address between the check and the connection gets nowhere."""
    resolver = PublicResolver()
    try:
        with pytest.raises(OSError, match="not public"):
            await resolver.resolve("localhost", 80)
    finally:
        await resolver.close()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(resolver=PublicResolver())) as session:
        with pytest.raises(aiohttp.ClientConnectorError):
            await session.get("http://localhost:1/")
