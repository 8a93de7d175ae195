"""Log lines: a node agent's batches of the lines of its Ray files (``parse.py``, which declares their tables), and
OTLP log records made into such batches (``otlp_logs.py``), each line once, indexed by trigram blocks
(``log_index.py``). The store's side (``apply.py``, the retention of ``log_retention.py``, the read model
``logs_query.py``) is loaded when first used, so that a client reading the parser loads no database."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from raysight import wire
from raysight.signals.log_lines import parse
from raysight.signals.signal import Accepted, Intake, Signal, Upkeep

if TYPE_CHECKING:
    from raysight.settings import WriterSettings
    from raysight.store.journal import Record
    from raysight.store.store import Store


def applied(store: Store, records: Sequence[Record], parsed: None, folded: int) -> None:
    from raysight.signals.log_lines.apply import apply_logs

    apply_logs(store, [record.body for record in records], journal_seq=folded)


def accept(body: bytes) -> Accepted:
    """A node agent's batch (``POST /ingest/agent/logs``: JSON, gzipped or not), journalled as it came."""
    lines = parse.parse(body, parse.MAX_LOG_LINES).line_count
    return Accepted(body, lines, {"lines": lines})


def pruned(store: Store, settings: WriterSettings) -> str | None:
    from raysight.signals.log_lines.log_retention import upkeep

    return upkeep(store, settings)


SIGNAL = Signal(
    "logs",
    tuple(parse.LOG_TABLES),
    apply=applied,
    intake=Intake(wire.AGENT_LOGS, accept, "the agent", "batch of logs"),
    upkeep=(Upkeep("log retention", pruned),),
)
