"""An httpx transport over aiohttp: the httpx API (clients, tests' transports, exceptions)
with aiohttp's connection pool underneath.

Why: httpx's own pool (httpcore 1.0) walks every pooled connection, polling its socket, on
each request's start and end, and its anyio streams add more; measured on this machine, an
httpx AsyncClient spent 0.57-1.23 ms of CPU a request (2 and 16 at once), the same client over
this transport about 0.3 ms, aiohttp alone about 0.1 ms. bank-adapter's call to the bank is
one such request in every withdrawal, where the whole saga has about 10 ms of CPU to spend.

What it keeps of httpx's contract: the request's method, URL, headers and body as httpx built
them; the timeouts httpx passes (connect, read, write, pool; their sum also bounds the whole
exchange, so a server that trickles bytes cannot hold a request forever); aiohttp's errors
as httpx's (``httpx.ConnectError``, ``ConnectTimeout``, ``ReadTimeout``,
``RemoteProtocolError``, ``ReadError``), so a caller's ``except httpx.HTTPError`` still holds;
no redirects followed and no cookies kept here (httpx does both itself); the body read whole,
at most ``max_response_bytes`` (a larger answer is a protocol error, never a memory spike).
"""

from __future__ import annotations

from collections.abc import Callable

import aiohttp
import httpx
from aiohttp.abc import AbstractResolver

__all__ = ["AiohttpTransport"]

_BROKEN = (aiohttp.ServerDisconnectedError, aiohttp.ClientResponseError, aiohttp.ClientPayloadError)
# Headers aiohttp writes itself from the request (the URL's host, the body's length).
_OWN_HEADERS = frozenset({b"host", b"content-length", b"transfer-encoding"})


class AiohttpTransport(httpx.AsyncBaseTransport):
    """``httpx.AsyncClient(transport=AiohttpTransport(max_connections=N))``. Its session is made
    on the first request, inside the running event loop, and closed with the client."""

    def __init__(
        self,
        *,
        max_connections: int = 100,
        keepalive_expiry_s: float = 5.0,
        max_response_bytes: int = 1 << 20,
        resolver: Callable[[], AbstractResolver] | None = None,
    ) -> None:
        """``resolver``: makes the connector's resolver (in the event loop), e.g. one that
        refuses names resolving to private addresses (core.egress.PublicResolver)."""
        if max_connections < 1 or keepalive_expiry_s <= 0 or max_response_bytes < 1:
            raise ValueError("max_connections, keepalive_expiry_s and max_response_bytes must be positive")
        self._max_connections = max_connections
        self._keepalive_expiry_s = keepalive_expiry_s
        self._max_response_bytes = max_response_bytes
        self._resolver = resolver
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=self._max_connections,
                    keepalive_timeout=self._keepalive_expiry_s,
                    resolver=self._resolver() if self._resolver is not None else None,
                ),
                cookie_jar=aiohttp.DummyCookieJar(),
                auto_decompress=False,  # httpx decodes the body by its Content-Encoding
                skip_auto_headers=("Accept", "Accept-Encoding", "User-Agent", "Content-Type"),
                trust_env=False,
            )
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeouts = request.extensions.get("timeout", {})
        parts = [timeouts.get(k) for k in ("connect", "read", "write", "pool")]
        bounded = all(p is not None for p in parts)
        timeout = aiohttp.ClientTimeout(
            total=sum(p for p in parts if p is not None) if bounded else None,
            connect=(timeouts["connect"] + timeouts["pool"]) if bounded else None,
            sock_connect=timeouts.get("connect"),
            sock_read=timeouts.get("read"),
        )
        headers = [
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in request.headers.raw
            if name.lower() not in _OWN_HEADERS
        ]
        body = await request.aread()
        try:
            async with self._open().request(
                request.method,
                str(request.url),
                data=body or None,
                headers=headers,
                allow_redirects=False,
                timeout=timeout,
            ) as answer:
                if (answer.content_length or 0) > self._max_response_bytes:
                    raise httpx.RemoteProtocolError("the answer is larger than allowed", request=request)
                chunks: list[bytes] = []
                size = 0
                async for chunk in answer.content.iter_any():
                    size += len(chunk)
                    if size > self._max_response_bytes:
                        raise httpx.RemoteProtocolError("the answer is larger than allowed", request=request)
                    chunks.append(chunk)
                content = b"".join(chunks)
                return httpx.Response(
                    answer.status,
                    headers=list(answer.raw_headers),
                    content=content,
                    request=request,
                    extensions={"http_version": b"HTTP/1.1"},
                )
        except httpx.HTTPError:
            raise
        except aiohttp.ConnectionTimeoutError as exc:
            raise httpx.ConnectTimeout(str(exc) or "connect timeout", request=request) from exc
        except TimeoutError as exc:  # aiohttp's socket-read and total timeouts
            raise httpx.ReadTimeout(str(exc) or "read timeout", request=request) from exc
        except aiohttp.ClientConnectorError as exc:
            raise httpx.ConnectError(str(exc), request=request) from exc
        except _BROKEN as exc:  # the server hung up, or answered what is not HTTP
            raise httpx.RemoteProtocolError(str(exc) or type(exc).__name__, request=request) from exc
        except aiohttp.ClientError as exc:
            raise httpx.ReadError(str(exc) or type(exc).__name__, request=request) from exc

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
