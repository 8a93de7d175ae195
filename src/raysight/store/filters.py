"""Filters and sorts, from the command line's words to SQL fragments and parameters. Pure: no database.

``state=RUNNING``, ``name!=f``, ``worker_pid>100``, ``start_time_ms>-5m``: the same syntax as ``ray list --filter``
plus ``<``, ``>``, ``<=``, ``>=`` on numbers and times (ISO-8601, epoch ms, or relative like ``-5m``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from raysight import units
from raysight.errors import BadQuery

OPERATORS = ("!=", "<=", ">=", "=", "<", ">")


@dataclass(frozen=True)
class Filter:
    key: str
    op: str
    value: str


def parse_filter(text: str) -> Filter:
    """``key<op>value`` split at the first operator (``!=`` and two-character operators first)."""
    positions = [(text.find(op), -len(op), op) for op in OPERATORS if op in text]
    if not positions:
        raise BadQuery(f"filter {text!r} has no operator; use key=value, key!=value, key<value or key>value")
    index, _, op = min(positions)
    key, value = text[:index].strip(), text[index + len(op) :].strip()
    if not key:
        raise BadQuery(f"filter {text!r} has no key")
    return Filter(key.lower(), op, value)


def parse_time_ms(text: str, now_ms: float | None = None) -> float:
    """A time as epoch milliseconds: epoch ms (``1795290380382``), ISO-8601, or relative to now (``-5m``, ``-1.5h``),
    as :func:`raysight.units.time_ns` reads them."""
    now_ns = time.time_ns() if now_ms is None else int(now_ms * units.MS)
    try:
        return units.time_ns(text, now_ns) / units.MS
    except ValueError as exc:
        raise BadQuery(str(exc)) from None


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise BadQuery(f"{text!r} is not a number") from None


def filter_sql(f: Filter, column_sql: str, kind: str, now_ms: float | None = None) -> tuple[str, list[object]]:
    """One filter as a SQL condition over ``column_sql`` (whose values are of ``kind``) and its parameters.

    Strings compare case-insensitively, as Ray's dashboard does; ``<`` and ``>`` need a number or a time.
    """
    sql_op = "<>" if f.op == "!=" else f.op
    if kind == "time_ms":
        return f"{column_sql} {sql_op} ?", [parse_time_ms(f.value, now_ms)]
    if kind in ("int", "float"):
        if f.value.lower() in ("", "none", "null"):
            return (f"{column_sql} IS NULL" if f.op == "=" else f"{column_sql} IS NOT NULL"), []
        return f"{column_sql} {sql_op} ?", [_number(f.value)]
    if f.op not in ("=", "!="):
        raise BadQuery(f"{f.key} is not a number or a time, so it takes only = and !=")
    if kind == "bool":
        truth = f.value.lower()
        if truth not in ("true", "false", "1", "0"):
            raise BadQuery(f"{f.key} is true or false, not {f.value!r}")
        return f"coalesce({column_sql}, false) {sql_op} ?", [truth in ("true", "1")]
    if f.value.lower() in ("none", "null"):
        return (f"{column_sql} IS NULL" if f.op == "=" else f"{column_sql} IS NOT NULL"), []
    if kind == "id":  # stored as lowercase hex: a plain comparison, which DuckDB can answer from its index
        return (f"{column_sql} = ?" if f.op == "=" else f"{column_sql} IS DISTINCT FROM ?"), [f.value.lower()]
    if f.op == "=":
        return f"lower({column_sql}) = lower(?)", [f.value]
    return f"lower({column_sql}) IS DISTINCT FROM lower(?)", [f.value]


def parse_sort(text: str) -> tuple[str, bool]:
    """``field`` or ``-field`` (descending) to (field, descending)."""
    text = text.strip()
    return (text[1:].lower(), True) if text.startswith("-") else (text.lower(), False)
