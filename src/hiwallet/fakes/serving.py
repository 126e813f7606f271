"""How every fake is served as a process: one place for the uvicorn settings they share."""

from __future__ import annotations

from typing import Any

import uvicorn

__all__ = ["serve"]

# Long enough for a webhook delivery in flight to finish, short enough for `hiwallet up`'s stop.
GRACEFUL_SHUTDOWN_S = 5


def serve(app: Any, host: str, port: int) -> None:
    """Serve ``app`` until SIGTERM; the caller has set up logging (JSON, no access log: the
    fakes stand for outside institutions, whose traffic is not ours to log)."""
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )
