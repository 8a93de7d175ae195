"""A node agent's sightings into the store."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from raysight.signals.node_sightings.parse import NODE_EVIDENCE
from raysight.signals.ray_events.reconcile import reconcile
from raysight.store.tx import Tx

if TYPE_CHECKING:
    from raysight.store.store import Store

KEEP = f"""INSERT INTO {NODE_EVIDENCE.name}
    SELECT session, $1, process, node_id, pid, alive, ns, last_alive_ns FROM staged_sightings
    ON CONFLICT DO UPDATE SET pid = excluded.pid, alive = excluded.alive, ns = excluded.ns,
        last_alive_ns = excluded.last_alive_ns
    WHERE excluded.ns > {NODE_EVIDENCE.name}.ns
    RETURNING session"""


def record(tx: Tx, host: str, sightings: pa.Table) -> int:
    """Keep what ``host``'s agent saw of its Ray processes (one row a process, each newer than what is kept, or left
    out), and re-derive the sessions it concerns; returns the sightings that changed what was kept."""
    with tx.registered("staged_sightings", sightings):
        changed = tx.run(KEEP, [host]).fetchall()
    reconcile(tx.run, sorted({row[0] for row in changed}))
    return len(changed)


def write(store: Store, sent: tuple[str, pa.Table]) -> int:
    """``record`` of a batch (its host, its sightings) in a transaction of its own (the sightings' intake)."""
    return store.write(lambda tx: record(tx, *sent))
