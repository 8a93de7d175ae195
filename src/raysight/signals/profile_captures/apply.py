"""On-demand profiles into the store, each change a small transaction of its own on the writer's fold thread (made at
once by ``server/capture_routes.py``, not journalled), and what a server that stopped left undone."""

from __future__ import annotations

import time
from typing import Any

import orjson

from raysight.signals.profile_captures.parse import (
    PROFILE_CAPTURE_FILES,
    PROFILE_CAPTURES,
    SERVE_CLIENT,
    Result,
    ServeShipped,
)
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


def serve_shipped(
    tx: Tx, shipped: ServeShipped, read: dict[str, Any] | None, error: str | None, keep: bool, address: str
) -> None:
    """A Serve capture as its agent last shipped it, in place of any earlier shipping: what memray read of it
    (``read``: :func:`memray_read.read_capture`'s), or why there is nothing (``error``); its file kept where ``keep``.
    A shipping with nothing to show after one that had keeps the earlier, with the later one's error beside it. Its
    actor is the session's actor that ran with the capture's pid (on its node, where the agent knew it)."""
    now = time.time_ns()
    if read is None and not keep:
        kept = tx.run(
            f"UPDATE {PROFILE_CAPTURES.name} SET error = ?, finished_ns = ? WHERE capture_id = ? AND status = 'done' "
            "RETURNING capture_id",
            [f"a later shipping failed ({error}); this is the capture as shipped before", now, shipped.capture_id],
        ).fetchall()
        if kept:
            return
    pid = read and read["pid"]
    row = {
        "capture_id": shipped.capture_id,
        "session": shipped.session,
        "kind": "memory",
        "node_id": shipped.node_id,
        "pid": pid,
        "duration_s": read and max(0.0, (read["end_ns"] - read["start_ns"]) / 1e9),
        "native": True,
        "leaks": False,
        "client": SERVE_CLIENT,
        "address": address,
        "requested_ns": read["start_ns"] if read else shipped.modified_ns,
        "finished_ns": now,
        "status": "failed" if error else "done",
        "error": error,
        "unit": None if error else "bytes",
        "stacks": None if read is None else orjson.dumps(read["stacks"]).decode(),
        "file": shipped.file,
        "file_bytes": shipped.file_bytes,
        "modified_ns": shipped.modified_ns,
    }
    names = list(row)
    tx.run(f"DELETE FROM {PROFILE_CAPTURES.name} WHERE capture_id = ?", [shipped.capture_id])
    tx.run(
        f"INSERT INTO {PROFILE_CAPTURES.name} ({', '.join(names)}, actor_id) VALUES ({', '.join('?' for _ in names)}, "
        "(SELECT actor_id FROM actors WHERE session = ? AND list_contains(list_transform(history, lambda h: h.pid), ?) "
        "AND (? IS NULL OR node_id = ?) ORDER BY start_ns DESC NULLS LAST LIMIT 1))",
        [*row.values(), shipped.session, pid, shipped.node_id, shipped.node_id],
    )
    tx.run(f"DELETE FROM {PROFILE_CAPTURE_FILES.name} WHERE capture_id = ?", [shipped.capture_id])
    if keep and shipped.gz is not None:
        tx.run(
            f"INSERT INTO {PROFILE_CAPTURE_FILES.name} VALUES (?, ?, ?)",
            [shipped.capture_id, shipped.session, shipped.gz],
        )
