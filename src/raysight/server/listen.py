"""Serving the app with uvicorn, as ``uvicorn.run`` does, but saying where it listens only once it does: its store
open (the app's startup) and its port bound. A server that fails to start says nothing of listening."""

from __future__ import annotations

import contextlib
import socket
import sys

import uvicorn
from starlette.types import ASGIApp
from uvicorn.config import STARTUP_FAILURE

from raysight.server.http_protocol import protocol_with
from raysight.settings import Limits

KEEP_ALIVE_S = 30


class _Announcing(uvicorn.Server):
    """A uvicorn server that prints ``banner`` once it has started."""

    def __init__(self, config: uvicorn.Config, banner: str) -> None:
        super().__init__(config)
        self.banner = banner

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)  # exits when the app's startup or the bind fails
        if self.started:
            print(self.banner, flush=True)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """Answer the long polls first (agents asking for on-demand profiles), then stop as uvicorn does: it waits
        for every response under way."""
        state = getattr(getattr(self.config.app, "state", None), "raysight", None)
        if state is not None:
            await state.captures.close()
        await super().shutdown(sockets=sockets)


def listen(app: ASGIApp, host: str, port: int, limits: Limits, banner: str) -> None:
    """Serve ``app`` on ``host``:``port`` until a signal ends it, printing ``banner`` once it serves; exit as
    ``uvicorn.run`` does when it could not start."""
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        http=protocol_with(limits),
        log_level="warning",
        timeout_graceful_shutdown=5,
        # Workers export spans and samples every 5 s: a connection kept no longer than that is closed as they send on
        # it (a failed send, a reconnect, and a SIGPIPE that stops a debugger or memray attached to the worker)
        timeout_keep_alive=KEEP_ALIVE_S,
    )
    server = _Announcing(config, banner)
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: uvicorn raises the signal again once it has stopped
        server.run()
    if not server.started:
        sys.exit(STARTUP_FAILURE)
