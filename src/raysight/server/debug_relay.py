"""The debugger's live pauses, each joining a paused worker's socket to the client that drives it (at most one at a
time): what ``debug_routes.py`` relays through."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.websockets import WebSocket

from raysight import wire

TRANSCRIPT = 64 * 1024  # characters of a pause's debugger output kept for the next client to attach


@dataclass
class LivePause:
    """A pause whose worker is connected: its row, its worker's socket, the debugger's output so far (its tail), and
    the client that drives it, if any."""

    pause_id: str
    row: dict[str, Any]
    worker: WebSocket
    transcript: str = ""
    waiting: bool = False  # the debugger waits for a line
    over: bool = False  # the pause has ended (being recorded so)
    client: WebSocket | None = None
    holder: str | None = None  # who drives it: the client as it names itself, from its address, since when
    dap: bool = False  # the client is a DAP client's tunnel (`raysight debug attach --dap`): its bytes go to debugpy
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one send to the client at a time, in order

    async def output(self, text: str) -> None:
        """The debugger wrote ``text``: kept, and passed to the client."""
        async with self.lock:
            self.transcript = (self.transcript + text)[-TRANSCRIPT:]
            await self._to_client({wire.OUTPUT: text})

    async def ready(self) -> None:
        """The debugger waits for a line: the client told."""
        async with self.lock:
            self.waiting = True
            await self._to_client({wire.READY: True})

    async def type(self, text: str) -> None:
        """The client typed ``text``: passed to the debugger."""
        self.waiting = False
        await self._to_worker({wire.INPUT: text})

    async def to_debugpy(self, data: bytes) -> None:
        """A DAP client's bytes, for the worker's debugpy."""
        if self.dap:
            with contextlib.suppress(Exception):  # the worker gone: its own handler sees it and ends the pause
                await self.worker.send_bytes(data)

    async def from_debugpy(self, data: bytes) -> None:
        """The worker's debugpy's bytes, for the DAP client."""
        async with self.lock:
            if self.client is not None and self.dap:
                with contextlib.suppress(Exception):
                    await self.client.send_bytes(data)

    async def attach(self, client: WebSocket, holder: str, dap: bool = False) -> bool:
        """Let ``client`` drive the pause, sending it what the debugger wrote so far (and whether it waits for a
        line), and telling the worker when it is a DAP client; False while another drives it."""
        async with self.lock:
            if self.client is not None or self.over:
                return False
            self.client, self.holder, self.dap = client, holder, dap
            await self._to_client({wire.OUTPUT: self.transcript})
            if self.waiting:
                await self._to_client({wire.READY: True})
            if dap:
                await self._to_worker({wire.DAP: wire.DAP_OPEN})
            return True

    async def detach(self, client: WebSocket) -> bool:
        """``client`` let go (whether it still held the pause); a DAP client's tunnel closed."""
        async with self.lock:
            held = self.client is client
            if held:
                if self.dap and not self.over:
                    await self._to_worker({wire.DAP: wire.DAP_CLOSED})
                self.client = self.holder = None
                self.dap = False
            return held

    async def end(self, how: str) -> None:
        """The pause is over: the client told how, and let go."""
        async with self.lock:
            await self._to_client({wire.ENDED: how})
            if self.client is not None:
                with contextlib.suppress(Exception):
                    await self.client.close()
            self.client = self.holder = None

    async def _to_client(self, message: dict[str, Any]) -> None:
        if self.client is not None:
            with contextlib.suppress(Exception):  # a client gone: its own handler sees it and detaches
                await self.client.send_text(orjson.dumps(message).decode())

    async def _to_worker(self, message: dict[str, Any]) -> None:
        with contextlib.suppress(Exception):  # the worker gone: its own handler sees it and ends the pause
            await self.worker.send_text(orjson.dumps(message).decode())


@dataclass
class Relay:
    """This server's live pauses, by ID."""

    live: dict[str, LivePause] = field(default_factory=dict)

    def holder(self, pause_id: str) -> str | None:
        found = self.live.get(pause_id)
        return found.holder if found else None
