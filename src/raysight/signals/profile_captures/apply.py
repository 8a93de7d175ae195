"""On-demand profiles into the store, each change a small transaction of its own on the writer's fold thread (made at
once by ``server/capture_routes.py``, not journalled), and what a server that stopped left undone."""

from __future__ import annotations

import time
from typing import Any

from raysight.signals.profile_captures.parse import PROFILE_CAPTURES, Result
from raysight.store.tx import Tx

_ASKED = (
    "capture_id",
    "session",
    "kind",
    "task_id",
    "attempt",
    "actor_id",
    "node_id",
    "pid",
    "duration_s",
    "native",
    "leaks",
    "client",
    "address",
    "requested_ns",
)


def asked(tx: Tx, row: dict[str, Any]) -> None:
    """A request recorded, queued for its node's agent."""
    tx.run(
        f"INSERT INTO {PROFILE_CAPTURES.name} ({', '.join(_ASKED)}, status) "
        f"VALUES ({', '.join('?' for _ in _ASKED)}, 'queued')",
        [row[name] for name in _ASKED],
    )


def taken(tx: Tx, capture_ids: list[str], taken_ns: int) -> None:
    """Requests an agent took, to run now."""
    tx.run(
        f"UPDATE {PROFILE_CAPTURES.name} SET status = 'running', taken_ns = ? "
        "WHERE capture_id IN (SELECT unnest(?::VARCHAR[])) AND status = 'queued'",
        [taken_ns, capture_ids],
    )


def finished(tx: Tx, capture_id: str, result: Result, finished_ns: int) -> None:
    """A request's end: what the agent found, or why there is nothing (its error, or the server's)."""
    tx.run(
        f"UPDATE {PROFILE_CAPTURES.name} SET status = ?, finished_ns = ?, error = ?, unit = ?, stacks = ?, text = ? "
        "WHERE capture_id = ? AND status IN ('queued', 'running')",
        [
            "failed" if result.error else "done",
            finished_ns,
            result.error,
            result.unit,
            result.stacks,
            result.text,
            capture_id,
        ],
    )


def server_stopped(tx: Tx) -> None:
    """The requests a server that stopped left undone (the store opening again): their queue is gone with it."""
    tx.run(
        f"UPDATE {PROFILE_CAPTURES.name} SET status = 'failed', finished_ns = ?, "
        "error = 'the raysight server stopped before its agent sent it back: ask again' "
        "WHERE status IN ('queued', 'running')",
        [time.time_ns()],
    )
