"""Traces: the list (by job, task, actor, Serve request, duration, error) and one trace's spans as a tree with its
critical path. A trace belongs to the sessions its spans name; its root is its span without a parent (or, when it
continues a trace begun elsewhere, its earliest span)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import duckdb
import orjson

from raysight.ansi import plain_json_sql, plain_sql
from raysight.errors import BadQuery, NotFound
from raysight.store.statements import Query

TRACE_ID_HEX = 32
SPAN_COLUMNS = (
    "trace_id", "span_id", "parent_span_id", "name", "kind", "start_ns", "end_ns", "status", "status_message",
    "service", "session", "job_id", "node_id", "worker_id", "pid", "task_id", "attempt", "actor_id", "request_id",
    "attributes", "events", "links", "scope",
)  # fmt: skip
JSON_COLUMNS = ("attributes", "events", "links")
# A span's error text (its status's message, an exception event's) given without a terminal's escapes
_SELECTED = {"status_message": plain_sql("status_message"), "events": plain_json_sql("events")}
TRACE_SPANS = Query(
    "trace spans",
    f"""SELECT {", ".join(_SELECTED.get(c, c) for c in SPAN_COLUMNS)} FROM spans WHERE trace_id = $trace
        ORDER BY start_ns, span_id""",
    about="the spans of the trace $trace, by start",
)


@dataclass(frozen=True)
class TraceQuery:
    session: str | None = None
    job_id: str | None = None
    task_id: str | None = None
    actor_id: str | None = None
    request_id: str | None = None
    name: str | None = None  # a span of the trace has this name (any span: "leaf", "Actor.method")
    min_duration_ns: int | None = None
    errors_only: bool = False
    since_ns: int | None = None
    until_ns: int | None = None
    limit: int = 50
    offset: int = 0  # traces skipped (of those that match, newest first): a page's start


def _distinct(column: str) -> str:
    """A trace's values of ``column`` (SQL over its spans), each once, sorted: an empty list where none has one."""
    return f"coalesce(list_sort(list_distinct(list({column}) FILTER ({column} IS NOT NULL))), [])"


def list_traces(con: duckdb.DuckDBPyConnection, query: TraceQuery) -> dict[str, Any]:
    """The traces with a span that matches the query, newest first (``limit`` of them after ``offset``, and the
    ``total`` that match): each with its root span's name, start, duration, spans, errors and the jobs, services and
    Serve requests it went through."""
    session = query.session  # (resolved by the caller: None when none is recorded)
    if session is None:
        return {"session": None, "total": 0, "traces": []}
    where: list[str] = ["session = ?"]
    params: list[object] = [session]
    for column, value in (
        ("job_id", query.job_id),
        ("task_id", query.task_id),
        ("actor_id", query.actor_id),
        ("request_id", query.request_id),
        ("name", query.name),
    ):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    if query.since_ns is not None:
        where.append("end_ns >= ?")
        params.append(query.since_ns)
    if query.until_ns is not None:
        where.append("start_ns <= ?")
        params.append(query.until_ns)
    having = []
    if query.min_duration_ns is not None:
        having.append(f"max(end_ns) - min(start_ns) >= {int(query.min_duration_ns)}")
    if query.errors_only:
        having.append("count(*) FILTER (status = 'error') > 0")
    matched = f"""WITH hits AS (SELECT DISTINCT trace_id FROM spans WHERE {" AND ".join(where)}), matched AS (
            SELECT trace_id, arg_min(name, (parent_span_id IS NOT NULL, start_ns)) AS root,
                   min(start_ns) AS start_ns, max(end_ns) - min(start_ns) AS duration_ns, count(*) AS spans,
                   count(*) FILTER (status = 'error') AS errors,
                   {_distinct("job_id")} AS jobs, {_distinct("service")} AS services,
                   {_distinct("request_id")} AS requests
            FROM spans WHERE trace_id IN (SELECT trace_id FROM hits)
            GROUP BY trace_id {"HAVING " + " AND ".join(having) if having else ""})"""
    (total,) = con.execute(f"{matched} SELECT count(*) FROM matched", params).fetchone() or (0,)
    rows = con.execute(
        f"{matched} FROM matched ORDER BY start_ns DESC, trace_id LIMIT {int(query.limit)} OFFSET {int(query.offset)}",
        params,
    )
    names = [d[0] for d in rows.description]
    found = [dict(zip(names, row, strict=True)) for row in rows.fetchall()]
    return {"session": session, "total": total, "traces": found}


def get_trace(con: duckdb.DuckDBPyConnection, trace_id: str) -> dict[str, Any]:
    """A trace's spans in tree order (each with its ``depth`` and whether it is on the ``critical`` path)."""
    if len(trace_id) != TRACE_ID_HEX or any(c not in "0123456789abcdef" for c in trace_id):
        raise BadQuery(f"{trace_id!r} is no trace ID: 32 hex digits, as `raysight traces` shows")
    rows = con.execute(TRACE_SPANS.sql, {"trace": trace_id}).fetchall()
    if not rows:
        raise NotFound(f"no trace {trace_id} has been recorded")
    spans = [dict(zip(SPAN_COLUMNS, row, strict=True)) for row in rows]
    for span in spans:
        for column in JSON_COLUMNS:
            span[column] = orjson.loads(span[column]) if span[column] is not None else None
    ordered = tree_order(spans)
    critical = critical_path(ordered)
    for span in ordered:
        span["critical"] = span["span_id"] in critical
    start = min(span["start_ns"] for span in spans)
    return {
        "trace_id": trace_id,
        "start_ns": start,
        "duration_ns": max(span["end_ns"] for span in spans) - start,
        "spans": ordered,
    }


def tree_order(spans: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``spans`` (sorted by start) depth first, children by start, each given its ``depth``; a span whose parent is
    not in the trace (it continues a trace begun elsewhere, or its parent was never sent) is a root."""
    known = {span["span_id"] for span in spans}
    children: dict[str | None, list[dict[str, Any]]] = {}
    for span in spans:
        parent = span["parent_span_id"] if span["parent_span_id"] in known else None
        children.setdefault(parent, []).append(span)
    ordered: list[dict[str, Any]] = []
    stack = [(span, 0) for span in reversed(children.get(None, []))]
    while stack:
        span, depth = stack.pop()
        ordered.append({**span, "depth": depth})
        stack.extend((child, depth + 1) for child in reversed(children.get(span["span_id"], [])))
    return ordered


def critical_path(ordered: Sequence[dict[str, Any]]) -> set[str]:
    """The spans that the trace's end waited on: from the root that ends last, the child that ended last before its
    parent's end, then the one that ended last before that child started, and so on down (as Jaeger draws it)."""
    children: dict[str, list[dict[str, Any]]] = {}
    roots = []
    for span in ordered:
        if span["depth"] == 0:
            roots.append(span)
        elif span["parent_span_id"] is not None:
            children.setdefault(span["parent_span_id"], []).append(span)
    if not roots:
        return set()
    path: set[str] = set()
    todo = [(max(roots, key=lambda s: s["end_ns"]), None)]
    while todo:
        span, until = todo.pop()
        path.add(span["span_id"])
        bound = span["end_ns"] if until is None else min(span["end_ns"], until)
        for child in sorted(children.get(span["span_id"], []), key=lambda s: s["end_ns"], reverse=True):
            if child["end_ns"] <= bound and child["end_ns"] > span["start_ns"]:
                todo.append((child, bound))
                bound = child["start_ns"]
    return path
