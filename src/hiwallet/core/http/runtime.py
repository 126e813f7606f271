"""Process-level tuning and serving: the garbage collector's heap freeze, and uvicorn as every
service runs it. Called by each service's process entry point, where it can be seen:

    configure_logging("wallet-api")
    serve(settle_heap_once_started(create_wallet_api_app(settings)), host=host, port=port)
"""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import socket
import stat
import sys
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from fastapi import FastAPI

# uvicorn's exit status when a server does not start.
STARTUP_FAILURE = 3

# The youngest generation's threshold (CPython's default: 700 allocations). A request allocates
# a few thousand objects that nearly all die with it; at 700 the collector ran several times per
# request (bench/: 7 % of wallet-api's CPU under load).
GC_YOUNG_THRESHOLD = 20_000


def settle_heap() -> None:
    """Once a service has started: what it built (modules, routes, schemas, pools) lives as long
    as the process, so the cyclic collector stops traversing it (``gc.freeze``), and young
    collections run less often. Cycles made later are still collected."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


def settle_heap_once_started(app: FastAPI) -> FastAPI:
    """``app``, made to :func:`settle_heap` right after its startup (its lifespan has built the
    pools and caches that live as long as the process), before it serves a request. For a
    process entry point: one app per process."""
    lifespan = app.router.lifespan_context

    @asynccontextmanager
    async def settled(app: FastAPI) -> AsyncIterator[Any]:
        context: AbstractAsyncContextManager[Any] = lifespan(app)
        async with context as state:
            settle_heap()
            yield state

    app.router.lifespan_context = settled
    return app


def serve(
    app: Any,
    *,
    host: str,
    port: int,
    workers: int = 1,
    factory: bool = False,
    proxy_headers: bool = False,
    uds: str | None = None,
    http: str = "uvicorn",
) -> None:
    """uvicorn as every service runs: its lifespan required (a startup failure, e.g. a misused
    lean route, stops the process rather than serving without it), its logging left to ours
    (core/logging.py; its access line has raw paths, ours route templates, and the level is
    the root logger's), and no proxy-header middleware unless asked (a layer on every request;
    only a service that reads the clients' addresses needs it).

    ``uds``: also listen on a Unix domain socket at that path, beside ``host:port``, for callers
    on the same host (a front API's hop to it costs the kernel less than loopback TCP,
    docs/performance.md "Front doors"). The socket is the owner's only (mode 0600: anything
    that can connect to it is an internal caller); a stale file a stopped process left is
    replaced, one a live server answers on stops this one.

    ``http``: ``"uvicorn"`` (its httptools protocol) or ``"lean"`` (core/http/protocol.py: the
    same server, lifespan and draining stop, with a leaner protocol and bounds on heads, bodies
    and idle connections; the front doors' default, docs/performance.md "Front doors")."""
    import uvicorn

    options: dict[str, Any] = {
        "host": host,
        "port": port,
        "workers": workers,
        "factory": factory,
        "lifespan": "on",
        "log_config": None,
        "log_level": None,
        "access_log": False,
        "proxy_headers": proxy_headers,
    }
    if http != "uvicorn":
        options["http"] = http_protocol(http)
    if uds is None:
        uvicorn.run(app, **options)
        return
    _serve_also_on(uvicorn.Config(app, **options), uds)


def http_protocol(name: str) -> Any:
    """uvicorn's ``http`` setting for ``serve(http=name)``: ``"lean"`` core/http/protocol.py's
    LeanHttpProtocol, ``"uvicorn"`` its own httptools protocol."""
    if name == "lean":
        from hiwallet.core.http.protocol import LeanHttpProtocol

        return LeanHttpProtocol
    if name == "uvicorn":
        return "httptools"
    raise ValueError(f"http is 'uvicorn' or 'lean', not {name!r}")


def _serve_also_on(config: Any, uds: str) -> None:
    """What ``uvicorn.run`` does for one socket, for the TCP socket and the Unix one."""
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    if config.workers > 1 and not isinstance(config.app, str):
        raise ValueError("workers need the app as an import string, as uvicorn.run does")
    unix = bind_unix_socket(uds)
    try:
        sockets = [config.bind_socket(), unix]
        if config.workers > 1:
            Multiprocess(config, sockets=sockets).run()
            return
        config.load_app()
        server = uvicorn.Server(config=config)
        with contextlib.suppress(KeyboardInterrupt):
            server.run(sockets=sockets)
        if not server.started:
            sys.exit(STARTUP_FAILURE)
    finally:
        unix.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(uds)


def bind_unix_socket(path: str) -> socket.socket:
    """A listening-ready Unix stream socket at ``path``, mode 0600. A file already there is
    removed if it is a socket nobody answers on (a crashed process's); a live one, or anything
    that is not a socket, is an error (OSError): two servers on one path, or a path mistyped
    onto another file, must not start."""
    if not os.path.isabs(path):
        raise ValueError(f"a Unix socket's path is absolute, not {path!r}")
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISSOCK(mode):
            raise OSError(errno.EEXIST, f"{path} exists and is not a socket")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(path)
            except (ConnectionRefusedError, FileNotFoundError):
                os.unlink(path)  # stale
            else:
                raise OSError(errno.EADDRINUSE, f"a server already answers on {path}")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        # Made with no permission for others from the start (no window before a chmod).
        previous = os.umask(0o177)
        try:
            sock.bind(path)
        finally:
            os.umask(previous)
        sock.set_inheritable(True)  # the workers' processes serve it too
    except BaseException:
        sock.close()
        raise
    return sock
