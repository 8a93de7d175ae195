"""OTLP spans (``ingest/otlp.py``), their resources kept once, and how each task attempt they are of ended
(``attempt_ends``), also where the server keeps no span. A group lingers longer than others: an SDK exports each
batch as it fills, and a trace's spans arrive over a few seconds."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from raysight.signals.signal import Signal, Upkeep, forget_by_session
from raysight.signals.spans.parse import ATTEMPT_ENDS, SPAN_RESOURCES, SPANS

if TYPE_CHECKING:
    from raysight.settings import WriterSettings
    from raysight.store.journal import Record
    from raysight.store.store import Store
    from raysight.store.tx import Tx


def apply(store: Store, records: Sequence[Record], parsed: None) -> None:
    store.apply_spans([record.body for record in records], journal_seq=records[-1].seq)


def linger(settings: WriterSettings) -> float:
    return settings.spans_linger_s


def forget(store: Store, tx: Tx, session: str) -> None:
    forget_by_session((SPANS, ATTEMPT_ENDS))(store, tx, session)
    tx.run(  # the resources no span names any more
        "DELETE FROM span_resources WHERE resource_id NOT IN "
        "(SELECT DISTINCT resource_id FROM spans WHERE resource_id IS NOT NULL)"
    )


def sample(store: Store, settings: WriterSettings) -> str | None:
    sampling = settings.trace_sampling
    if sampling.active and (dropped := store.sample_traces(sampling)):
        return f"{dropped} spans of traces neither failed nor slow dropped"
    return None


SIGNAL = Signal(
    "spans",
    (SPANS, SPAN_RESOURCES, ATTEMPT_ENDS),
    apply=apply,
    linger=linger,
    forget=forget,
    upkeep=(Upkeep("trace sampling", sample),),
)
