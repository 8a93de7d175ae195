"""OTLP spans (``parse.py``), their resources kept once, and how each task attempt they are of ended
(``attempt_ends``), also where the server keeps no span. A group lingers longer than others: an SDK exports each
batch as it fills, and a trace's spans arrive over a few seconds. The store's side (``apply.py``, the tail sampling
of ``trace_sampling.py``, the read model ``traces_query.py``) is loaded when first used, so that a client reading the
parser or ``sdk_json.py`` loads no database."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from raysight.signals.signal import Signal, Upkeep
from raysight.signals.spans.parse import ATTEMPT_ENDS, SPAN_RESOURCES, SPANS

if TYPE_CHECKING:
    from raysight.settings import WriterSettings
    from raysight.store.journal import Record
    from raysight.store.store import Store
    from raysight.store.tx import Tx


def applied(store: Store, records: Sequence[Record], parsed: None, folded: int) -> None:
    from raysight.signals.spans.apply import apply_spans

    apply_spans(store, [record.body for record in records], journal_seq=folded)


def linger(settings: WriterSettings) -> float:
    return settings.spans_linger_s


def forgotten(store: Store, tx: Tx, session: str) -> None:
    from raysight.signals.spans.apply import forget

    forget(store, tx, session)


def sampled(store: Store, settings: WriterSettings) -> str | None:
    from raysight.signals.spans.trace_sampling import upkeep

    return upkeep(store, settings)


SIGNAL = Signal(
    "spans",
    (SPANS, SPAN_RESOURCES, ATTEMPT_ENDS),
    apply=applied,
    linger=linger,
    forget=forgotten,
    upkeep=(Upkeep("trace sampling", sampled),),
)
