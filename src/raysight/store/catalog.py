"""Every named statement of the store, collected from the modules that keep them beside the code that runs them
(:mod:`raysight.store.statements`): the macros the store creates when it opens, in order (DuckDB binds a macro to the
tables and macros it reads as it is created), the groups a write runs, and the read models' queries."""

from __future__ import annotations

from types import ModuleType

from raysight.signals.log_lines import logs_query
from raysight.signals.ray_events import event_stages, pipeline
from raysight.signals.spans import traces_query
from raysight.store import (
    errors,
    queries,
    reconcile,
    schema,
    summaries,
    timeline,
)
from raysight.store.statements import Group, Macro, Query

MACROS: tuple[Macro, ...] = (
    *event_stages.MACROS,
    *reconcile.MACROS,
    *queries.MACROS,
    *timeline.MACROS,
    *logs_query.MACROS,
    *errors.MACROS,
)
GROUPS: tuple[Group, ...] = tuple(pipeline.GROUPS.values())
READ_MODELS: tuple[ModuleType, ...] = (summaries, errors, timeline, traces_query, logs_query)


def created() -> list[str]:
    """The statements that create the macros (idempotent)."""
    return [*schema.MACROS, *(macro.sql for macro in MACROS)]


def read_queries() -> list[Query]:
    """The read models' queries: each :class:`Query` a read model's module names, alone or in a tuple."""
    found = []
    for module in READ_MODELS:
        for value in vars(module).values():
            found += [q for q in (value if isinstance(value, tuple) else (value,)) if isinstance(q, Query)]
    return found
