"""Calls to addresses a customer gave us (a merchant's webhook URL): server-side request forgery
refused. Only http(s), no user information in the URL, and every address the host names (a
literal, or each address its name resolves to) public: no private, loopback, link-local,
multicast, reserved, shared (CGNAT) or unspecified address, IPv4 inside IPv6 included. A name
that resolves to one such address among public ones is refused (DNS rebinding answers both).

Checked when the URL is given (the caller hears why at once) and again before every call, as
names may resolve elsewhere tomorrow; and the connection itself resolves through
:class:`PublicResolver`, which refuses a private address whatever the name answers at that
moment (a name that rebinds between the check and the connection gets nowhere).

``allow_private`` (a development setting, refused in production) lets everything through but
the scheme and user-information checks: tests and ``hiwallet up`` deliver to 127.0.0.1."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

from aiohttp.abc import ResolveResult
from aiohttp.resolver import ThreadedResolver

from hiwallet.core.timeouts import within

__all__ = ["ForbiddenTarget", "PublicResolver", "Target", "check_url", "is_public", "resolve_public"]

MAX_URL_CHARS = 2048
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class ForbiddenTarget(Exception):
    """The URL may not be called; ``reason`` is a stable word for the answer and the log."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


@dataclass(frozen=True)
class Target:
    """A URL that passed the form checks: its parts, the host (IDNA, brackets removed)."""

    url: str
    parts: SplitResult
    host: str
    port: int
    literal: IPAddress | None


def is_public(address: IPAddress) -> bool:
    """Whether ``address`` is one a merchant's endpoint may have."""
    if isinstance(address, ipaddress.IPv6Address):
        mapped = address.ipv4_mapped or address.sixtofour
        if mapped is not None:
            return is_public(mapped)
    return address.is_global and not (
        address.is_multicast or address.is_reserved or address.is_loopback or address.is_link_local
    )


def check_url(url: str) -> Target:
    """The form of ``url``: http(s), a host, no user information, a valid port."""
    if len(url) > MAX_URL_CHARS:
        raise ForbiddenTarget("too-long", f"a URL has at most {MAX_URL_CHARS} characters")
    if any(ord(c) <= 0x20 or ord(c) == 0x7F for c in url):
        raise ForbiddenTarget("malformed", "a URL has no spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ForbiddenTarget("malformed", "the URL cannot be read") from exc
    if parts.scheme not in ("http", "https"):
        raise ForbiddenTarget("scheme", "only http and https URLs")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise ForbiddenTarget("userinfo", "a URL with user information is refused")
    host = parts.hostname
    if not host:
        raise ForbiddenTarget("malformed", "the URL names no host")
    try:
        literal: IPAddress | None = ipaddress.ip_address(host)
    except ValueError:
        literal = None
        try:
            host.encode("idna")
        except UnicodeError as exc:
            raise ForbiddenTarget("malformed", "the host is not a valid name") from exc
    if port == 0:
        raise ForbiddenTarget("malformed", "port 0")
    return Target(url, parts, host, port or (443 if parts.scheme == "https" else 80), literal)


async def resolve_public(target: Target, *, allow_private: bool, timeout_s: float) -> list[IPAddress]:
    """The addresses ``target``'s host names, each checked; ForbiddenTarget when one is not
    public (unless ``allow_private``) or the name does not resolve."""
    if target.literal is not None:
        addresses = [target.literal]
    else:
        try:
            infos = await within(
                asyncio.get_running_loop().getaddrinfo(
                    target.host, target.port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
                ),
                timeout_s,
            )
        except (OSError, TimeoutError, UnicodeError) as exc:
            raise ForbiddenTarget("unresolvable", "the host name does not resolve") from exc
        addresses = list(dict.fromkeys(ipaddress.ip_address(info[4][0]) for info in infos))
        if not addresses:
            raise ForbiddenTarget("unresolvable", "the host name does not resolve")
    if not allow_private:
        for address in addresses:
            if not is_public(address):
                raise ForbiddenTarget(
                    "private-address", "the URL's host is or resolves to an address that is not public"
                )
    return addresses


class PublicResolver(ThreadedResolver):
    """aiohttp's resolver (core.http.AiohttpTransport's ``resolver``) that refuses a name
    resolving to any address that is not public: the connection goes only to addresses checked
    at that very resolution. (A literal address in a URL is not resolved: check it first.)"""

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await super().resolve(host, port, family)
        for result in results:
            if not is_public(ipaddress.ip_address(result["host"])):
                raise OSError(f"{host} resolves to an address that is not public")
        return results
