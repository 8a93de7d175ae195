"""Prometheus scrapes of Ray's and raysight's own metrics (``ingest/prom_text.py``): each series once, its samples,
each target's scrapes, metadata and what a session's series limit refused. Written at once, not journalled."""

from __future__ import annotations

from typing import TYPE_CHECKING

from raysight.ingest.prom_text import METRIC_SAMPLES, METRIC_SERIES, METRIC_TABLES
from raysight.signals.signal import Signal, forget_by_session

if TYPE_CHECKING:
    from raysight.store.tx import Tx


def forget(tx: Tx, session: str) -> None:
    tx.run(  # (keyed by series, not by session)
        f"DELETE FROM {METRIC_SAMPLES.name} WHERE series_no IN "
        f"(SELECT series_no FROM {METRIC_SERIES.name} WHERE session = ?)",
        [session],
    )
    forget_by_session(METRIC_TABLES)(tx, session)


SIGNAL = Signal("scrapes", tuple(METRIC_TABLES), forget=forget)
