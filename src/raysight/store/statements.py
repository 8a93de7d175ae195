"""The store's SQL, each statement named: the stages of a group, the macros statements read by name, the queries.

- A :class:`Stage` makes one temporary relation, named once, from the stages before it; every later statement reads
  it by that name (``FRESH.name``), never by a literal of its own.
- A :class:`Macro` is a relation (a table macro) or an expression (a scalar macro) kept in the store's catalog, with
  parameters of its own: what several statements share is read by name (``FROM session_ends($sessions)``), never
  spliced in as text that relies on the aliases of the statement around it.
- A :class:`Query` is a statement run as it is, its parameters named (``$session``).
- A :class:`Group` is statements run in order: what ``python -m raysight.signals.ray_events.pipeline`` prints.

Each module keeps its own beside the code that runs them; :mod:`raysight.store.catalog` collects them, the store
creates the macros when it opens, and ``tests/test_statements.py`` runs every one of them on the recorded session.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import duckdb

_PARAMETER = re.compile(r"\$([A-Za-z_]\w*)")


def params(sql: str) -> list[str]:
    """The names of the parameters a statement reads (``$session``), each once."""
    return list(dict.fromkeys(_PARAMETER.findall(sql)))


def bind(sql: str, values: Mapping[str, object]) -> dict[str, object]:
    """Of ``values``, those the statement ``sql`` reads (DuckDB refuses a parameter a statement does not name)."""
    return {name: values[name] for name in params(sql)}


@dataclass(frozen=True)
class Stage:
    """A relation a group makes for the statements after it, in one statement over the stages before it."""

    name: str  # the relation it makes
    select: str  # SQL over earlier stages
    view: bool = False  # a view (read once or cheaply: nothing copied), else a temporary table
    about: str = ""

    @property
    def sql(self) -> str:
        return f"CREATE OR REPLACE TEMP {'VIEW' if self.view else 'TABLE'} {self.name} AS {self.select}"

    @property
    def drop(self) -> str:
        return f"DROP {'VIEW' if self.view else 'TABLE'} IF EXISTS {self.name}"


@dataclass(frozen=True)
class Macro:
    """A relation (``table``) or an expression a statement reads by name, of its ``params`` alone. DuckDB binds a
    macro's tables and macros when it is created: a macro comes after those it reads."""

    name: str
    params: tuple[str, ...]
    body: str
    table: bool = False

    @property
    def sql(self) -> str:
        table = "TABLE " if self.table else ""
        return f"CREATE OR REPLACE MACRO {self.name}({', '.join(self.params)}) AS {table}{self.body}"


@dataclass(frozen=True)
class Query:
    """A statement run as it is: a read model's, or a write of a group. Its parameters are named (``$session``)."""

    name: str
    sql: str
    about: str = ""


@dataclass(frozen=True)
class Group:
    """Statements run in order, one after the other, in one transaction."""

    name: str
    steps: tuple[Stage | Query, ...]
    about: str = ""

    def describe(self) -> str:
        """The group's SQL, statement by statement in order, each under its name."""
        return "\n\n".join(f"-- {step.name}: {step.about}\n{step.sql};" for step in self.steps)


def dict_rows(cursor: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """A query's rows, each a dict by column name."""
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, r)) for r in cursor.fetchall()]
