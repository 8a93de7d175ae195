"""Pauses and attaches into the store, each a small transaction of its own on the writer's fold thread, and what
deleting a session deletes of them."""

from __future__ import annotations

import time
from typing import Any

from raysight.signals.debug_pauses.parse import DEBUG_ATTACHES, DEBUG_PAUSES
from raysight.store.tx import Tx

_PAUSE_COLUMNS = [c.name for c in DEBUG_PAUSES.columns if c.name not in ("ended_ns", "ended")]


def paused(tx: Tx, pause_id: str, row: dict[str, Any]) -> None:
    """A pause begun: its report's row (``parse.parse_pause``) under ``pause_id``."""
    values = {"pause_id": pause_id, **row}
    tx.run(
        f"INSERT INTO {DEBUG_PAUSES.name} ({', '.join(_PAUSE_COLUMNS)}) "
        f"VALUES ({', '.join('?' for _ in _PAUSE_COLUMNS)})",
        [values[name] for name in _PAUSE_COLUMNS],
    )
    # a session known by its pauses alone (its events yet to come) is still listed
    tx.run("INSERT INTO sessions (session) VALUES (?) ON CONFLICT DO NOTHING", [row["session"]])


def ended(tx: Tx, pause_id: str, how: str, ended_ns: int) -> None:
    """A pause over (``how``: continued, quit, timed out, worker gone, server stopped), and its client detached."""
    tx.run(f"UPDATE {DEBUG_PAUSES.name} SET ended_ns = ?, ended = ? WHERE pause_id = ?", [ended_ns, how, pause_id])
    detached(tx, pause_id, ended_ns)


def attached(tx: Tx, pause_id: str, session: str, client: str, address: str, attached_ns: int) -> None:
    tx.run(
        f"INSERT INTO {DEBUG_ATTACHES.name} VALUES (?, ?, ?, ?, ?, NULL)",
        [pause_id, session, client, address, attached_ns],
    )


def detached(tx: Tx, pause_id: str, detached_ns: int) -> None:
    tx.run(
        f"UPDATE {DEBUG_ATTACHES.name} SET detached_ns = ? WHERE pause_id = ? AND detached_ns IS NULL",
        [detached_ns, pause_id],
    )


def server_stopped(tx: Tx) -> None:
    """The pauses a server that stopped left open (the store opening again): over for raysight, their workers having
    lost the connection (though a worker may be paused still)."""
    ended_ns = time.time_ns()
    tx.run(
        f"UPDATE {DEBUG_ATTACHES.name} SET detached_ns = ? WHERE detached_ns IS NULL",
        [ended_ns],
    )
    tx.run(
        f"UPDATE {DEBUG_PAUSES.name} SET ended_ns = ?, ended = 'server stopped' WHERE ended_ns IS NULL",
        [ended_ns],
    )
