"""A candidate measured and not adopted (bench/server_cost.py, docs/performance.md): uvicorn's
httptools protocol writing an answer's head and body in one socket write. It halves the writes
(strace: 1,000 instead of 2,000 for 1,000 answers) but did not lower the server's CPU a request
(the same at 1 client, 5-7 µs more at 8, on a plain endpoint; within the noise through the front).

uvicorn writes the status line and headers when the app sends ``http.response.start`` and the
body when it sends ``http.response.body``: two ``send`` system calls, two TCP segments, and on
this machine's loopback the receiver woken twice, for every answer. A py-spy profile of
wallet-api at 32 clients put 17 % of its CPU in those two writes (issue 26). Here the head is
held until the body's first write and both go in one write; what the peer receives, byte for
byte and in order, is the same.

What must not wait is not held: a write outside an answer in progress (``100 Continue``, which
the client waits for before it sends the body the app waits for) goes at once, and anything the
cycle does besides writing (closing the connection when an app ends without its body, asking
whether it is closing) sends the held head first, as uvicorn would have, and so does the answer's
end (a HEAD answer has no body write). An answer whose app
sends its head and then waits (a stream's first chunk later) holds the head that long: the
client could not use it without the body anyway.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

__all__ = ["OneWriteHttpToolsProtocol"]

# A body up to this size is joined to the head (a copy is cheaper than a vectored write's setup).
_JOIN_MAX_BYTES = 64 * 1024


class _OneWriteTransport:
    """The connection's transport as one answer's cycle sees it: its head held for the body."""

    __slots__ = ("_cycle", "_held", "_transport")

    def __init__(self, transport: asyncio.Transport, cycle: RequestResponseCycle) -> None:
        self._transport = transport
        self._cycle = cycle
        self._held: bytes | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        held = self._held
        if held is not None:
            self._held = None
            if len(data) <= _JOIN_MAX_BYTES:
                self._transport.write(held + bytes(data))
            else:  # a large body is not copied: one writev of both
                self._transport.writelines([held, data])
        elif self._cycle.response_started and not self._cycle.response_complete and data:
            # The head (uvicorn sets response_started before writing it, and response_complete
            # after the body's last write): held for the body's first write.
            self._held = bytes(data)
        else:
            self._transport.write(data)

    def flush(self) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = None  # an abort drops what is buffered anyway
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        # Anything else (is_closing, get_extra_info, writelines, …): the head first, then the
        # transport's own.
        self.flush()
        return getattr(self._transport, name)


class OneWriteHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol whose answers are each one write (head and body together)."""

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is None or isinstance(cycle.transport, _OneWriteTransport):
            return
        transport = _OneWriteTransport(self.transport, cycle)
        cycle.transport = cast(asyncio.Transport, transport)
        answered = cycle.on_response

        def complete() -> None:
            # An answer may end with no body write at all (HEAD): its head goes now.
            transport.flush()
            answered()

        cycle.on_response = complete
