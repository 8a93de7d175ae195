"""SQL literals written from Python values: a string, a list of strings, an ``IN`` list. Pure, so that any part may
write its SQL with them (the store's statements, the terminal's escape patterns of :mod:`raysight.ansi`)."""

from __future__ import annotations

from collections.abc import Iterable


def sql_str(text: str) -> str:
    """SQL: a string literal."""
    return "'" + text.replace("'", "''") + "'"


def sql_list(values: Iterable[str]) -> str:
    """SQL: a list literal of strings (constants in the statement, so that DuckDB folds what depends on them)."""
    return "[" + ", ".join(map(sql_str, values)) + "]"


def sql_in(values: Iterable[str]) -> str:
    """SQL: the parenthesised strings an ``IN`` compares with."""
    return "(" + ", ".join(map(sql_str, values)) + ")"
