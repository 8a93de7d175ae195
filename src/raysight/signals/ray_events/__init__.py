"""Ray's events, as its aggregators POST them: kept raw, and folded into tasks, actors, jobs, nodes and workers
(``store/store.py``'s apply, in the stages of ``store/event_stages.py``). A group may be parsed ahead, on another
connection, while the group before it is written."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from raysight.signals.ray_events.parse import APPEND_TABLES, ENTITY_TABLES, RAW_EVENTS
from raysight.signals.signal import Signal

if TYPE_CHECKING:
    from raysight.store.journal import Record
    from raysight.store.store import Parsed, Post, Store


def posts(records: Sequence[Record]) -> list[Post]:
    from raysight.store.store import Post

    return [Post(record.body, record.label, record.run_id) for record in records]


def apply(store: Store, records: Sequence[Record], parsed: Parsed | None) -> Any:
    return store.apply(posts(records), journal_seq=records[-1].seq, parsed=parsed)


def prepare(store: Store, records: Sequence[Record]) -> Parsed:
    return store.parse(posts(records))


SIGNAL = Signal("ray", (RAW_EVENTS, *ENTITY_TABLES, *APPEND_TABLES.values()), apply=apply, prepare=prepare)
