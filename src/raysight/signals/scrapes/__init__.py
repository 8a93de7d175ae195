"""Prometheus scrapes of Ray's and raysight's own metrics (``ingest/prom_text.py``): each series once, its samples,
each target's scrapes, metadata and what a session's series limit refused. Written at once, not journalled."""

from __future__ import annotations

from typing import TYPE_CHECKING

from raysight.ingest.prom_text import METRIC_SAMPLES, METRIC_SERIES, METRIC_TABLES
from raysight.signals.signal import Signal, Upkeep, forget_by_session

if TYPE_CHECKING:
    from raysight.settings import WriterSettings
    from raysight.store.store import Store
    from raysight.store.tx import Tx


def forget(store: Store, tx: Tx, session: str) -> None:
    tx.run(  # (keyed by series, not by session)
        f"DELETE FROM {METRIC_SAMPLES.name} WHERE series_no IN "
        f"(SELECT series_no FROM {METRIC_SERIES.name} WHERE session = ?)",
        [session],
    )
    forget_by_session(METRIC_TABLES)(store, tx, session)
    store.forget_targets(session)


def prune(store: Store, settings: WriterSettings) -> str | None:
    retention = settings.metrics_retention
    if retention and (dropped := store.prune_metrics(retention)):
        return f"dropped {dropped} ({retention.why('metrics')})"
    return None


def downsample(store: Store, settings: WriterSettings) -> str | None:
    if settings.metrics_downsampling and (thinned := store.downsample_metrics(settings.metrics_downsampling)):
        return f"{thinned} samples thinned away"
    return None


SIGNAL = Signal(
    "scrapes",
    tuple(METRIC_TABLES),
    forget=forget,
    upkeep=(Upkeep("metrics retention", prune), Upkeep("metrics downsampling", downsample)),
)
