"""uvicorn's HTTP protocol (httptools) with what it lacks against slow clients: a deadline for a request's headers,
one for its body, and a connection limit that turns connections away at once rather than holding their sockets.

Without them a client sending a byte a second, or nothing, holds a connection forever, and a few hundred such
clients hold the server's sockets.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from raysight.settings import Limits


def _closing_response(status: bytes, message: bytes, *headers: bytes) -> bytes:
    head = [b"HTTP/1.1 " + status, b"content-type: text/plain; charset=utf-8", b"connection: close", *headers]
    return b"\r\n".join([*head, b"content-length: %d" % len(message), b"", message])


BUSY = _closing_response(b"503 Service Unavailable", b"too many connections; retry later\n", b"retry-after: 1")
TOO_SLOW = _closing_response(b"408 Request Timeout", b"request headers not received in time\n")


class LimitedProtocol(HttpToolsProtocol):
    """Each connection is on one clock at a time: its next request's headers (from connect, or from the request's
    first byte after a response), then that request's body; none while the app answers or between requests, where
    uvicorn's keep-alive timeout rules."""

    limits = Limits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None

    def _start_clock(self, seconds: float, what: str) -> None:
        self._stop_clock()
        self._deadline = self.loop.call_later(seconds, self._too_slow, what, seconds)

    def _stop_clock(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self, what: str, seconds: float) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        # info, not warning: a flood of slow clients must not flood the log
        self.logger.info("%s: closed a connection whose request %s took over %g s", self.client, what, seconds)
        if what == "headers":  # no request is running yet: tell the client why
            self.transport.write(TOO_SLOW)
        self.transport.close()  # mid-body the app sees a disconnect

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            transport.write(BUSY)
            transport.close()
            return
        self._start_clock(self.limits.header_timeout_s, "headers")

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_clock()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._deadline is None:  # a request on a kept-alive connection
            self._start_clock(self.limits.header_timeout_s, "headers")

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        self._start_clock(self.limits.body_timeout_s, "body")

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._stop_clock()

    def handle_websocket_upgrade(self) -> None:
        self._stop_clock()
        super().handle_websocket_upgrade()


def protocol_with(limits: Limits) -> type[LimitedProtocol]:
    """The protocol class to give uvicorn (``http=``), which builds it itself."""
    return type("LimitedProtocol", (LimitedProtocol,), {"limits": limits})
