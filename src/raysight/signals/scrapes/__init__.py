"""Prometheus scrapes of Ray's and raysight's own metrics (``parse.py``): each series once, its samples, each target's
scrapes, metadata and what a session's series limit refused. Written at once, not journalled (the writer keeps the
scrapes that wait together: ``apply.record_scrapes``). The store's side (``apply.py``, the retention of
``metric_retention.py`` and the downsampling of ``metric_downsample.py``, the read models ``metrics_query.py`` and
``top_query.py``) is loaded when first used, so that a client reading the parser loads no database."""

from __future__ import annotations

from typing import TYPE_CHECKING

from raysight import wire
from raysight.signals.scrapes import parse
from raysight.signals.signal import Signal, Upkeep, WrittenIntake

if TYPE_CHECKING:
    from raysight.settings import WriterSettings
    from raysight.store.store import Store
    from raysight.store.tx import Tx


def recorded(store: Store, scrapes: list[parse.Scrape]) -> list[int]:
    from raysight.signals.scrapes.apply import record_scrapes

    return record_scrapes(store, scrapes)


def forgotten(store: Store, tx: Tx, session: str) -> None:
    from raysight.signals.scrapes.apply import forget

    forget(store, tx, session)


def pruned(store: Store, settings: WriterSettings) -> str | None:
    from raysight.signals.scrapes.metric_retention import upkeep

    return upkeep(store, settings)


def downsampled(store: Store, settings: WriterSettings) -> str | None:
    from raysight.signals.scrapes.metric_downsample import upkeep

    return upkeep(store, settings)


SIGNAL = Signal(
    "scrapes",
    tuple(parse.METRIC_TABLES),
    forget=forgotten,
    upkeep=(Upkeep("metrics retention", pruned), Upkeep("metrics downsampling", downsampled)),
    # parsed and checked against the bounds on a thread (a page of 50,000 lines takes ~0.1 s), refused with 400 (a
    # line past them) or 413 (too many lines) before the writer sees it
    intake=WrittenIntake(
        wire.AGENT_METRICS,
        parse.MAX_BODY,
        parse.parse,
        recorded,
        "scrape",
        "the scrape",
        answer="samples",
        rejected="bad_scrape",
        together=True,
    ),
)
