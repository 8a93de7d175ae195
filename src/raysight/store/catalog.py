"""Every named statement of the store, collected from the modules that keep them beside the code that runs them
(:mod:`raysight.store.statements`): the macros the store creates when it opens, in order (DuckDB binds a macro to the
tables and macros it reads as it is created), and the groups a write runs."""

from __future__ import annotations

from raysight.store import event_stages, pipeline, reconcile, schema
from raysight.store.statements import Group, Macro

MACROS: tuple[Macro, ...] = (*event_stages.MACROS, *reconcile.MACROS)
GROUPS: tuple[Group, ...] = tuple(pipeline.GROUPS.values())


def created() -> list[str]:
    """The statements that create the macros (idempotent)."""
    return [*schema.MACROS, *(macro.sql for macro in MACROS)]
