"""Ray's state API over what raysight keeps: list / get of a resource, with the field names of Ray's state API (plus
raysight's own), filtered and sorted in DuckDB (nothing is capped) and read a chunk of rows at a time.

Each resource is described once as data (a :class:`Resource`: its SQL source, its fields with their kinds, which
fields are Ray's base columns, and its ID): Ray's entities in ``entities.py``, what only the poller sees in
``signals/polls/polled_resources.py``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np
import orjson

from raysight.errors import BadQuery, NotFound
from raysight.signals.polls import resources
from raysight.store.filters import Filter, filter_sql, parse_sort
from raysight.store.sessions_query import EVERY_SESSION

MS = "// 1000000"
CHUNK_ROWS = 1000  # rows of a page read, rendered and sent at once


@dataclass(frozen=True)
class Field:
    name: str
    sql: str
    kind: str = "str"  # str | id | int | float | bool | time_ms | json | list | profile | waited
    base: bool = False
    late: bool = False  # costly (a subquery per row): computed for the page's rows only, after paging


@dataclass(frozen=True)
class Resource:
    name: str
    source: str  # a FROM clause; its rows carry a `session` column
    id_field: str
    fields: list[Field]
    keys: tuple[str, ...] = ()  # SQL of the row's key (session first, ID second), needed by late fields
    condition: str = ""  # SQL that every row of the source must meet too
    session: str = ""  # SQL of a row's session, where it is not the first table's `session`
    order: tuple[str, ...] = ()  # the sort when none is asked for (else by ID)
    row_id: str = ""  # SQL of a BIGINT unique to each row, where its first table's rowid is not
    tiebreak: str = ""  # SQL sorted by last, after what was asked for (a task's attempt)
    not_driver: str = ""  # SQL a row meets when it is not a driver's (``exclude_driver``)
    sorts: dict[str, str] = field(default_factory=dict)  # SQL of the keys a list sorts by that are no field
    by_name: dict[str, Field] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.by_name.update({f.name: f for f in self.fields})

    def field(self, name: str) -> Field:
        try:
            return self.by_name[name]
        except KeyError:
            known = ", ".join(sorted(self.by_name))
            raise BadQuery(f"{self.name} have no field {name!r}; known fields: {known}") from None

    def columns(self, detail: bool) -> list[Field]:
        return [f for f in self.fields if detail or f.base]

    @property
    def session_sql(self) -> str:
        """SQL of a row's session."""
        return self.session or f"{self.source.split()[1]}.session"

    @property
    def locator(self) -> str:
        """SQL that finds a row again: what a page is sorted by, and its rows read back with (``list_page``)."""
        return self.row_id or f"{self.source.split()[1]}.rowid"


def field_of(name: str, sql: str | None = None, kind: str = "str", base: bool = False, late: bool = False) -> Field:
    return Field(name, sql or name, kind, base, late)


@dataclass
class ListResult:
    rows: list[dict[str, Any]]
    total: int
    session: str | None


@dataclass(frozen=True)
class ListPage:
    """The rows a list found (:func:`list_page`), in order, to be read a chunk at a time (:func:`page_rows`)."""

    res: Resource
    session: str | None
    total: int
    detail: bool
    located: np.ndarray  # each row's locator (:attr:`Resource.locator`), in the page's order


def list_page(
    con: duckdb.DuckDBPyConnection,
    res: Resource,
    *,
    session: str | None,
    filters: list[Filter] = (),  # type: ignore[assignment]
    sort: list[str] = (),  # type: ignore[assignment]
    limit: int | None = 100,
    offset: int = 0,
    detail: bool = False,
    exclude_driver: bool = False,
) -> ListPage:
    """Which rows of ``res`` in one session (resolved: :data:`EVERY_SESSION` for all, None when none is recorded),
    filtered, sorted, and paged, are on the page; ``total`` counts every match. Only the rows' locators are sorted (a
    row's fields are read later, a chunk at a time)."""
    if limit is not None and limit < 0:
        raise BadQuery("limit must be 0 or more")
    if offset < 0:
        raise BadQuery("offset must be 0 or more")
    if session is None:
        return ListPage(res, None, 0, detail, np.empty(0, np.int64))  # an empty store
    resolved = None if session == EVERY_SESSION else session
    where, params = _where(res, resolved, filters, exclude_driver)
    page = "" if limit is None else f" LIMIT {int(limit)}"
    located = con.execute(
        f"SELECT {res.locator} AS locator FROM {res.source} WHERE {where} ORDER BY {_order(res, sort)}{page} "
        f"OFFSET {int(offset)}",
        params,
    ).fetchnumpy()["locator"]
    total_row = con.execute(f"SELECT count(*) FROM {res.source} WHERE {where}", params).fetchone()
    return ListPage(res, resolved, int(total_row[0]) if total_row else 0, detail, located)


COUNTABLE = ("str", "bool")  # the kinds of field that :func:`count_by` counts by: a few values each


def count_by(
    con: duckdb.DuckDBPyConnection,
    res: Resource,
    name: str,
    *,
    session: str | None,
    filters: list[Filter] = (),  # type: ignore[assignment]
    exclude_driver: bool = False,
) -> dict[str, int]:
    """How many rows of ``res`` that :func:`list_page` would find have each value of the field ``name``, the filters
    on that field left out: the count of each choice a filter on it could make (a table's state chips)."""
    counted = res.field(name)
    if counted.kind not in COUNTABLE or counted.late:
        raise BadQuery(f"count_by takes a field of text or true/false values, and {name} is of {counted.kind}")
    if session is None:
        return {}
    resolved = None if session == EVERY_SESSION else session
    where, params = _where(res, resolved, [f for f in filters if f.key != name], exclude_driver)
    cursor = con.execute(
        f"SELECT {counted.sql} AS value, count(*) AS n FROM {res.source} WHERE {where} GROUP BY ALL ORDER BY n DESC",
        params,
    )
    return {_key(value): n for value, n in cursor.fetchall()}


def _key(value: object) -> str:
    """A value counted by, as the filter that picks it names it (``true``, ``null``)."""
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def page_rows(con: duckdb.DuckDBPyConnection, page: ListPage) -> Iterator[list[dict[str, Any]]]:
    """The page's rows, :data:`CHUNK_ROWS` at a time, each with its fields (late ones too, for those rows only). A
    row deleted since the page was found is left out (a row's locator stays its own: DuckDB never moves the rows of a
    table with a primary key)."""
    res, fields = page.res, page.res.columns(page.detail)
    late = [f for f in fields if f.late]
    decoded = [f for f in fields if f.kind in DECODED]
    select = [f"{f.sql} AS {f.name}" for f in fields if not f.late]
    select += [f"{k} AS __key{i}" for i, k in enumerate(res.keys)] if late else []
    for start in range(0, len(page.located), CHUNK_ROWS):
        located = page.located[start : start + CHUNK_ROWS].tolist()
        cursor = con.execute(
            f"SELECT {', '.join(select)}, {res.locator} AS __locator FROM {res.source} "
            f"WHERE {res.locator} IN (SELECT unnest($1::BIGINT[]))",
            [located],
        )
        names = [d[0] for d in cursor.description]
        found: dict[int, list[dict[str, Any]]] = {}
        for values in cursor.fetchall():
            row = dict(zip(names, values))
            found.setdefault(row.pop("__locator"), []).append(row)
        rows = [row for locator in located for row in found.pop(locator, ())]
        if late and rows:
            _add_late(con, res, late, rows)
        yield [_decode(decoded, {f.name: row[f.name] for f in fields}) for row in rows]


def list_rows(con: duckdb.DuckDBPyConnection, res: Resource, *, session: str | None, **page: Any) -> ListResult:
    """:func:`list_page`'s rows read whole: for answers that a caller reads at once."""
    found = list_page(con, res, session=session, **page)
    return ListResult([row for rows in page_rows(con, found) for row in rows], found.total, found.session)


def _add_late(con: duckdb.DuckDBPyConnection, res: Resource, late: list[Field], rows: list[dict[str, Any]]) -> None:
    """Fill the late fields of ``rows`` (one page) with a query over just their keys."""
    hidden = [f"__key{i}" for i in range(len(res.keys))]
    ids = sorted({row["__key1"] for row in rows})
    cursor = con.execute(
        f"SELECT {', '.join(res.keys)}, {', '.join(f.sql for f in late)} FROM {res.source} "
        f"WHERE {res.keys[1]} IN (SELECT unnest($1::VARCHAR[])){f' AND {res.condition}' if res.condition else ''}",
        [ids],
    )
    found = {tuple(r[: len(hidden)]): r[len(hidden) :] for r in cursor.fetchall()}
    for row in rows:
        values = found.get(tuple(row.pop(k) for k in hidden), (None,) * len(late))
        row.update(zip((f.name for f in late), values))


def get_rows(con: duckdb.DuckDBPyConnection, res: Resource, entity_id: str, *, session: str | None) -> ListResult:
    """Every row with this ID (tasks: one per attempt), all fields; NotFound when there is none."""
    result = list_rows(
        con, res, session=session, filters=[Filter(res.id_field, "=", entity_id)], limit=None, detail=True
    )
    if not result.rows:
        where = f"session {result.session}" if result.session else "any session"
        raise NotFound(f"no {res.name[:-1]} with id {entity_id} in {where}")
    return result


def _where(res: Resource, session: str | None, filters: list[Filter], exclude_driver: bool) -> tuple[str, list[object]]:
    """The WHERE clause and its parameters: one session (None: every session), the filters."""
    conditions: list[str] = []
    params: list[object] = []
    if session is not None:
        conditions.append(f"{res.session_sql} = ?")
        params.append(session)
    if res.condition:
        conditions.append(res.condition)
    if exclude_driver and res.not_driver:
        conditions.append(res.not_driver)
    for f in filters:
        column = res.field(f.key)
        sql, values = filter_sql(f, column.sql, column.kind)
        conditions.append(sql)
        params.extend(values)
    return " AND ".join(conditions) or "true", params


def _order(res: Resource, sort: list[str]) -> str:
    terms = []
    for text in sort or res.order or [res.id_field]:
        name, descending = parse_sort(text)
        if name in res.sorts:
            sql = res.sorts[name]
        elif name in res.by_name or not res.sorts:
            sql = res.field(name).sql
        else:
            raise BadQuery(f"{res.name} sort by a field or by {', '.join(res.sorts)}; they have no field {name!r}")
        terms.append(f"{sql} {'DESC' if descending else 'ASC'} NULLS LAST")
    if res.tiebreak:
        terms.append(res.tiebreak)
    return ", ".join(terms)


def _json_object(text: str | None) -> Any:
    """A profile event's extra data (JSON text, as a worker reported it); ``{}`` when none or not JSON."""
    try:
        return orjson.loads(text) if text else {}
    except orjson.JSONDecodeError:
        return {}


DECODED = ("json", "runtime_env", "profile", "waited")  # the kinds of field read as text and given as objects


def _decode(fields: list[Field], row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with its ``fields`` (of the kinds :data:`DECODED`) given as objects."""
    for f in fields:
        value = row[f.name]
        if f.kind == "json" and isinstance(value, str):
            row[f.name] = orjson.loads(value)
        elif f.kind == "runtime_env" and isinstance(value, str):
            row[f.name] = {"serialized_runtime_env": value}
        elif f.kind == "profile" and value:  # each event's extra data parsed, as Ray's state API gives it
            for event in value["events"]:
                event["extra_data"] = _json_object(event["extra_data"])
        elif f.kind == "waited" and value:
            value["usage"] = resources.usage(orjson.loads(value["usage"] or "{}"))
            value["demands"] = resources.demands(orjson.loads(value["demands"] or "[]"))
    return row
