"""Every named statement of the store, collected from the modules that keep them beside the code that runs them
(:mod:`raysight.store.statements`): the macros the store creates when it opens, in order (DuckDB binds a macro to the
tables and macros it reads as it is created), the groups a write runs, and the read models' queries."""

from __future__ import annotations

from types import ModuleType

from raysight.signals.log_lines import logs_query, requests_query
from raysight.signals.polls import status_query
from raysight.signals.ray_events import (
    activity_query,
    entities,
    event_stages,
    failures_query,
    pipeline,
    reconcile,
    summary_query,
    timeline_query,
)
from raysight.signals.ray_metrics import reported_query
from raysight.signals.scrapes import resources_query
from raysight.signals.spans import traces_query
from raysight.store import doctor, schema, sessions_query
from raysight.store.statements import Group, Macro, Query

MACROS: tuple[Macro, ...] = (
    *event_stages.MACROS,
    *reconcile.MACROS,
    *entities.MACROS,
    *timeline_query.MACROS,
    *logs_query.MACROS,
    *failures_query.MACROS,
)
GROUPS: tuple[Group, ...] = tuple(pipeline.GROUPS.values())
READ_MODELS: tuple[ModuleType, ...] = (
    summary_query,
    status_query,
    activity_query,
    sessions_query,
    doctor,
    reported_query,
    resources_query,
    failures_query,
    timeline_query,
    traces_query,
    logs_query,
    requests_query,
)


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
