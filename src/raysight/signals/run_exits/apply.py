"""A run exit into the store, and what deleting a session deletes of them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from raysight.signals.ray_events.reconcile import reconcile
from raysight.signals.run_exits.parse import RUN_EXITS, RunExit
from raysight.store.tx import Tx

if TYPE_CHECKING:
    from raysight.store.store import Store

# The driver exits `raysight run` saw in a session (joined, or started under the run's ID) that no other session shares
FORGET = f"""
    DELETE FROM {RUN_EXITS.name} r
    WHERE (r.session = $1 OR r.run_id IN (SELECT run_id FROM sessions WHERE session = $1))
      AND NOT (r.session IS NOT NULL AND r.session <> $1)
      AND r.run_id NOT IN (SELECT run_id FROM sessions WHERE session <> $1 AND run_id IS NOT NULL)"""


def record(tx: Tx, exit_: RunExit) -> None:
    """Keep what `raysight run` saw of its driver's end (in its session, when it joined one it did not start), and
    re-derive the sessions it started."""
    run_id, session = exit_[0], exit_[-1]
    tx.run(f"INSERT OR REPLACE INTO {RUN_EXITS.name} VALUES (?, ?, ?, ?, ?)", list(exit_))
    started = tx.run("SELECT session FROM sessions WHERE run_id = ?", [run_id]).fetchall()
    reconcile(tx.run, sorted({r[0] for r in started} | ({session} if session else set())))


def write(store: Store, exit_: RunExit) -> None:
    """``record`` in a transaction of its own (the run exit's intake)."""
    store.write(lambda tx: record(tx, exit_))


def forget(store: Store, tx: Tx, session: str) -> None:
    tx.run(FORGET, [session])
