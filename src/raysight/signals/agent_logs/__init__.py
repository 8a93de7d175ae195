"""Log lines: a node agent's batches of the lines of its Ray files, and OTLP log records made into such batches
(``ingest/agent_logs.py``, ``ingest/otlp_logs.py``), each line once, indexed by trigram blocks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from raysight import wire
from raysight.ingest import agent_logs
from raysight.ingest.agent_logs import LOG_TABLES, MAX_LOG_LINES
from raysight.signals.signal import Accepted, Intake, Signal, Upkeep

if TYPE_CHECKING:
    from raysight.settings import WriterSettings
    from raysight.store.journal import Record
    from raysight.store.store import Store


def apply(store: Store, records: Sequence[Record], parsed: None) -> None:
    store.apply_logs([record.body for record in records], journal_seq=records[-1].seq)


def accept(body: bytes) -> Accepted:
    """A node agent's batch (``POST /ingest/agent/logs``: JSON, gzipped or not), journalled as it came."""
    lines = agent_logs.parse(body, MAX_LOG_LINES).line_count
    return Accepted(body, lines, {"lines": lines})


def prune(store: Store, settings: WriterSettings) -> str | None:
    retention = settings.log_retention
    if retention and (dropped := store.prune_logs(retention)):
        return f"dropped {dropped} ({retention.why('log')})"
    return None


SIGNAL = Signal(
    "logs",
    tuple(LOG_TABLES),
    apply=apply,
    intake=Intake(wire.AGENT_LOGS, accept, "the agent", "batch of logs"),
    upkeep=(Upkeep("log retention", prune),),
)
