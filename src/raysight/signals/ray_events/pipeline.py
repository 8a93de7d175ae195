"""How a group of POSTs (or, when reindexing, a chunk of the raw events) is folded: its statements, in order.

Each stage makes one temporary relation from the stages before it, in one statement (``event_stages.py``); the
signal's writes (``apply.py``) run them in the order of these groups, with its own writes between them: after
``staged_tasks`` and ``staged_sessions`` it merges their rows into the entity tables, after the appends it folds the
Python-folded types' patches, and last it re-derives what is inferred of the group's sessions
(:data:`raysight.signals.ray_events.reconcile.RECONCILE`), or, where the group held task events alone and kept the
sessions' spans (``SPANS_KEPT``), of its tasks alone (``RECONCILE_TASKS``). The input that is not a stage is an Arrow
table the store registers: ``staged_posts`` (the POST bodies). With several cores, POSTS and EVENTS run on another
connection while the group before is written (``apply.parse_posts``), into a table of the in-memory ``staging``
database that the store's connections share, and :func:`.event_stages.parsed` stands in for them. ``python -m
raysight.signals.ray_events.pipeline [group]`` prints the SQL of each group (or the one named); the store logs each
statement it runs, with its time, to the ``raysight.store.sql`` logger at DEBUG."""

from __future__ import annotations

import sys

from raysight.signals.ray_events import event_stages as stage
from raysight.signals.ray_events.reconcile import RECONCILE, RECONCILE_TASKS, SPANS_KEPT
from raysight.store.statements import Group

_FOLD = (stage.TRANSITIONS, stage.PROFILE, stage.TASKS, *stage.APPENDED, stage.PATCHED, stage.SESSIONS, SPANS_KEPT)
_WRITTEN = (stage.RECEIVED, stage.QUARANTINE, stage.SEEN, stage.FRESH, stage.INSERT_RAW, *_FOLD)
APPLY = Group("apply", (stage.POSTS, stage.EVENTS, *_WRITTEN), "a group of POSTs, parsed in the transaction")
PARSED = Group(
    "parsed",
    (stage.parsed("staging.parsed_1"), *_WRITTEN),
    "a group of POSTs parsed on another connection (stage.POSTS and stage.EVENTS there, into staging.parsed_1)",
)
REINDEX = Group(
    "reindex",
    (stage.RAW_CHUNK, stage.EVENTS, stage.NONE_SEEN, stage.FRESH, *_FOLD),
    "a chunk of the raw events, refolded",
)
GROUPS = {group.name: group for group in (APPLY, PARSED, REINDEX, RECONCILE, RECONCILE_TASKS)}


def describe(names: list[str]) -> str:
    """The SQL of the groups named (every group when none is), each statement in order."""
    unknown = [name for name in names if name not in GROUPS]
    if unknown:
        raise SystemExit(f"no group {', '.join(unknown)}; the groups: {', '.join(GROUPS)}")
    return "\n\n".join(
        f"-- the group {group.name}: {group.about}\n\n{group.describe()}"
        for group in (GROUPS[name] for name in names or GROUPS)
    )


if __name__ == "__main__":
    print(describe(sys.argv[1:]))
