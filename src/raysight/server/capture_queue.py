"""On-demand profiles waiting for the agent of their node, or being run by it: in memory (a server that stops fails
them, ``profile_captures.apply.server_stopped``). Agents reach the server, never the reverse: each long-polls for the
requests of its nodes (:meth:`CaptureQueue.take`). A request no agent takes within :data:`TAKE_WITHIN_S`, or whose
agent sends nothing back within its duration and :data:`RUN_GRACE_S`, has :meth:`CaptureQueue.expired` say why."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
from dataclasses import dataclass

from raysight import wire
from raysight.errors import Unavailable

TAKE_WITHIN_S = 30.0
RUN_GRACE_S = 180.0  # beyond a request's duration: py-spy and gdb attaching (memray's tries), its capture, the upload
MAX_WAITING = 64  # requests queued or running at once


@dataclass
class Waiting:
    order: wire.CaptureOrder
    node_id: str
    deadline: float  # (monotonic) taken by then, else it fails; once taken, sent back by then


class CaptureQueue:
    def __init__(self) -> None:
        self.queued: dict[str, Waiting] = {}
        self.running: dict[str, Waiting] = {}
        self._changed = asyncio.Condition()
        self._closed = False

    def check_room(self) -> None:
        """Unavailable while :data:`MAX_WAITING` requests are queued or running (checked before one is recorded)."""
        if len(self.queued) + len(self.running) >= MAX_WAITING:
            raise Unavailable(f"{MAX_WAITING} on-demand profiles are under way: ask again once some are done")

    async def put(self, node_id: str, order: wire.CaptureOrder) -> None:
        """Queue ``order`` for the agent of ``node_id``."""
        self.queued[order["capture_id"]] = Waiting(order, node_id, time.monotonic() + TAKE_WITHIN_S)
        async with self._changed:
            self._changed.notify_all()

    async def take(self, nodes: Iterable[str], wait_s: float) -> list[wire.CaptureOrder]:
        """The requests queued for ``nodes``, as soon as there are any within ``wait_s`` (else none), now running."""
        nodes, until = set(nodes), time.monotonic() + wait_s
        async with self._changed:
            while not (mine := [w for w in self.queued.values() if w.node_id in nodes]) and not self._closed:
                left = until - time.monotonic()
                if left <= 0:
                    break
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), left)
        now = time.monotonic()
        for waiting in mine:
            del self.queued[waiting.order["capture_id"]]
            waiting.deadline = now + waiting.order["duration_s"] + RUN_GRACE_S
            self.running[waiting.order["capture_id"]] = waiting
        return [waiting.order for waiting in mine]

    def give_back(self, orders: list[wire.CaptureOrder]) -> None:
        """Queue again what was taken for an agent gone before it was told (its long poll's connection lost)."""
        for order in orders:
            if (waiting := self.running.pop(order["capture_id"], None)) is not None:
                waiting.deadline = time.monotonic() + TAKE_WITHIN_S
                self.queued[order["capture_id"]] = waiting

    def finish(self, capture_id: str) -> bool:
        """Whether ``capture_id`` was running (its agent's answer then taken), no longer."""
        return self.running.pop(capture_id, None) is not None

    def expired(self) -> list[tuple[str, str]]:
        """The requests past their deadline, each with why it failed, no longer waiting."""
        now, gone = time.monotonic(), []
        for capture_id, waiting in list(self.queued.items()):
            if waiting.deadline < now:
                del self.queued[capture_id]
                gone.append(
                    (
                        capture_id,
                        f"no raysight agent of node {waiting.node_id} asked for it within {TAKE_WITHIN_S:g} s: run "
                        "`raysight agent` on that node (or `raysight agent --on-ray`), as a user that may trace its "
                        "Ray workers",
                    )
                )
        for capture_id, waiting in list(self.running.items()):
            if waiting.deadline < now:
                del self.running[capture_id]
                gone.append((capture_id, f"the agent of node {waiting.node_id} took it but sent nothing back"))
        return gone

    async def close(self) -> None:
        """Answer every long poll now (the server stopping)."""
        self._closed = True
        async with self._changed:
            self._changed.notify_all()
