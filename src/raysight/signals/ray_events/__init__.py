"""Ray's events, as its aggregators POST them: kept raw, and folded into tasks, actors, jobs, nodes and workers
(``apply.py``, in the stages of ``event_stages.py``, parsed by ``parse.py``). A group may be parsed ahead, on another
connection, while the group before it is written. The store's side (``apply.py``) is loaded when first used, so that a
client reading the parser loads no database."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from raysight.signals.ray_events.parse import APPEND_TABLES, ENTITY_TABLES, RAW_EVENTS
from raysight.signals.signal import Signal

if TYPE_CHECKING:
    from raysight.signals.ray_events.apply import ApplyResult, Parsed, Post
    from raysight.store.journal import Record
    from raysight.store.store import Store


def posts(records: Sequence[Record]) -> list[Post]:
    from raysight.signals.ray_events.apply import Post

    return [Post(record.body, record.label, record.run_id) for record in records]


def applied(store: Store, records: Sequence[Record], parsed: Parsed | None, folded: int) -> ApplyResult:
    from raysight.signals.ray_events.apply import apply_posts

    return apply_posts(store, posts(records), journal_seq=folded, parsed=parsed)


def prepared(store: Store, records: Sequence[Record]) -> Parsed:
    from raysight.signals.ray_events.apply import parse_posts

    return parse_posts(store, posts(records))


def refolded(store: Store) -> int:
    from raysight.signals.ray_events.apply import reindex

    return reindex(store)


SIGNAL = Signal(
    "ray",
    (RAW_EVENTS, *ENTITY_TABLES, *APPEND_TABLES.values()),
    apply=applied,
    prepare=prepared,
    refold=refolded,
)
