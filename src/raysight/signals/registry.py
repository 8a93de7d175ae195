"""Every signal, declared once: the store makes their tables and deletes a session's rows of each, and the writer
applies each kind of journalled group with its signal's ``apply``. A new signal is a package and one entry here."""

from __future__ import annotations

from raysight.signals import (
    debug_pauses,
    log_lines,
    node_sightings,
    polls,
    profile_captures,
    ray_events,
    ray_metrics,
    run_exits,
    scrapes,
    spans,
    task_profiles,
)
from raysight.signals.signal import Signal
from raysight.store import schema
from raysight.tables import FoldedTable, Table

SIGNALS: dict[str, Signal] = {
    s.name: s
    for s in (
        ray_events.SIGNAL,
        run_exits.SIGNAL,
        ray_metrics.SIGNAL,
        polls.SIGNAL,
        scrapes.SIGNAL,
        spans.SIGNAL,
        node_sightings.SIGNAL,
        log_lines.SIGNAL,
        debug_pauses.SIGNAL,
        profile_captures.SIGNAL,
        task_profiles.SIGNAL,
    )
}


def register(signal: Signal) -> Signal:
    """Add a signal (one of another package: a plugin, a test's); its tables are made when a store next opens."""
    if signal.name in SIGNALS:
        raise ValueError(f"a signal named {signal.name!r} is registered already")
    SIGNALS[signal.name] = signal
    return signal


def unregister(name: str) -> None:
    del SIGNALS[name]


def every_table() -> list[Table | FoldedTable]:
    """The store's own tables, then each signal's registered now: what a store makes when it opens."""
    return [*schema.OWN_TABLES, *(table for signal in SIGNALS.values() for table in signal.tables)]
