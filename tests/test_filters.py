"""Filters: the command line's words to SQL, without a database."""

from __future__ import annotations

import pytest

from raysight.errors import BadQuery
from raysight.store.filters import Filter, filter_sql, parse_filter, parse_time_ms


@pytest.mark.parametrize(
    "text, expected",
    [
        ("state=RUNNING", Filter("state", "=", "RUNNING")),
        ("NAME!=f", Filter("name", "!=", "f")),
        ("worker_pid>=100", Filter("worker_pid", ">=", "100")),
        ("start_time_ms<-5m", Filter("start_time_ms", "<", "-5m")),
        ("error_message=a=b", Filter("error_message", "=", "a=b")),
    ],
)
def test_parse_filter(text: str, expected: Filter) -> None:
    assert parse_filter(text) == expected


def test_parse_filter_without_operator_says_what_to_write() -> None:
    with pytest.raises(BadQuery, match="key=value"):
        parse_filter("state")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1795290380382", 1795290380382.0),
        ("2026-11-21T19:46:20Z", 1795290380000.0),
        ("-5m", 1_000_000 - 300_000),
        ("-1.5h", 1_000_000 - 5_400_000),
    ],
)
def test_times_in_every_form(text: str, expected: float) -> None:
    assert parse_time_ms(text, now_ms=1_000_000) == expected


@pytest.mark.parametrize(
    "f, kind, sql, params",
    [
        (Filter("state", "=", "running"), "str", "lower(c) = lower(?)", ["running"]),
        (Filter("state", "!=", "x"), "str", "lower(c) IS DISTINCT FROM lower(?)", ["x"]),
        (Filter("pid", ">", "7"), "int", "c > ?", [7.0]),
        (Filter("t", "<", "1000"), "time_ms", "c < ?", [1000.0]),
        (Filter("ok", "=", "true"), "bool", "coalesce(c, false) = ?", [True]),
        (Filter("actor_id", "=", "none"), "str", "c IS NULL", []),
    ],
)
def test_filter_sql(f: Filter, kind: str, sql: str, params: list[object]) -> None:
    assert filter_sql(f, "c", kind) == (sql, params)


@pytest.mark.parametrize(
    "f, kind",
    [
        (Filter("name", "<", "a"), "str"),
        (Filter("pid", ">", "many"), "int"),
        (Filter("t", ">", "soon"), "time_ms"),
        (Filter("b", "=", "maybe"), "bool"),
    ],
)
def test_bad_filters_are_clear_errors(f: Filter, kind: str) -> None:
    with pytest.raises(BadQuery):
        filter_sql(f, "c", kind)
