"""Serve's requests out of the store (``serve_requests``: a row per access line of a proxy or replica, stored with
the line): each request by its ID, with what its proxy said of it and each replica it crossed, newest first; the
latency percentiles by route (at the proxy) and by deployment (at its replicas); and one request whole, with its
lines in every component.

A request is listed when one of its access lines matches every filter given: ``--app shop --min-latency 250ms`` finds
the requests that took 250 ms or more in one of ``shop``'s replicas, ``--route /shop --status 5xx`` those whose
proxy answered a 5xx on that route. A handle call's line (``CALL``) says its route only in JSON logs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import duckdb
import orjson

from raysight.errors import BadQuery
from raysight.signals.log_lines import logs_query
from raysight.signals.log_lines.parse import SERVE_REQUESTS
from raysight.signals.ray_events.activity_query import MAX_BINS, bin_step
from raysight.store.statements import Query

MAX_REQUESTS = 10_000
BY = ("route", "deployment")
STATUS = r"[1-5]xx|[1-5]\d\d|OK|ERROR|CANCELLED"
ERROR_SQL = "(status LIKE '5%' OR status = 'ERROR')"  # a line of a request that failed there
_SHOWN = ("component", "replica", "host", "application", "deployment", "route", "method", "call", "status")


@dataclass(frozen=True)
class RequestQuery:
    session: str | None = None  # resolved once per request (store/sessions_query.py): None when none is recorded
    application: str | None = None
    deployment: str | None = None
    route: str | None = None
    status: str | None = None  # an HTTP code, a class of them (5xx), or OK, ERROR, CANCELLED
    min_latency_ms: float | None = None
    since_ns: int | None = None
    until_ns: int | None = None
    limit: int = 100
    offset: int = 0  # requests skipped (of those that match, newest first): a page's start


def _where(query: RequestQuery, session: str) -> tuple[str, dict[str, object]]:
    """The conditions on an access line (SQL over ``serve_requests``) and their named parameters; BadQuery names a
    bad one."""
    if query.status is not None and not re.fullmatch(STATUS, query.status, re.IGNORECASE):
        raise BadQuery(
            f"status must be an HTTP code, a class of them (5xx) or OK, ERROR, CANCELLED: not {query.status!r}"
        )
    if not 0 <= query.limit <= MAX_REQUESTS:
        raise BadQuery(f"limit must be 0 to {MAX_REQUESTS}")
    status = query.status.upper() if query.status else None
    tests: dict[str, tuple[str, object]] = {
        "application": ("application = $application", query.application),
        "deployment": ("deployment = $deployment", query.deployment),
        "route": ("route = $route", query.route),
        "status": (
            "status LIKE $status" if status and status.endswith("XX") else "status = $status",
            status[0] + "__" if status and status.endswith("XX") else status,
        ),
        "min_latency": ("latency_ms >= $min_latency", query.min_latency_ms),
        "since": ("ts_ns >= $since", query.since_ns),
        "until": ("ts_ns < $until", query.until_ns),
    }
    where = ["session = $session", "request_id IS NOT NULL"]
    where += [condition for condition, value in tests.values() if value is not None]
    params = {"session": session, **{name: value for name, (_, value) in tests.items() if value is not None}}
    return " AND ".join(where), params


def _matched(where: str) -> str:
    """The requests with an access line that matches ``where``: their IDs, and when their first line was logged."""
    return f"SELECT request_id, min(ts_ns) AS first_ns FROM {SERVE_REQUESTS.name} WHERE {where} GROUP BY request_id"


def _line(row: dict[str, Any]) -> dict[str, Any]:
    shown = {name: row[name] for name in _SHOWN}
    return {"time_ms": row["ts_ns"] // 1_000_000, **shown, "latency_ms": row["latency_ms"], "error": row["error"]}


def _request(request_id: str, lines: list[dict[str, Any]]) -> dict[str, Any]:
    """A request from its access lines (in the order logged): what its proxy said (else its first replica), and
    each replica it crossed."""
    proxy = next((line for line in lines if line["component"] == "proxy"), None)
    head = proxy or lines[0]
    return {
        "request_id": request_id,
        "time_ms": min(line["time_ms"] for line in lines),
        "application": next((line["application"] for line in lines if line["application"]), None),
        "route": next((line["route"] for line in [head, *lines] if line["route"]), None),
        "method": next((line["method"] for line in [head, *lines] if line["method"] != "CALL"), head["method"]),
        "status": head["status"],
        "latency_ms": head["latency_ms"],
        "host": head["host"],
        "error": any(line["error"] for line in lines),
        "proxy": proxy,
        "replicas": [line for line in lines if line["component"] == "replica"],
    }


def _access_lines(con: duckdb.DuckDBPyConnection, session: str, ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    """The access lines of the requests ``ids``, by request, each request's in the order logged."""
    names = ["request_id", "ts_ns", *_SHOWN, "latency_ms", "error"]
    rows = con.execute(
        f"""SELECT request_id, ts_ns, {", ".join(_SHOWN)}, latency_ms, {ERROR_SQL} AS error
            FROM {SERVE_REQUESTS.name} WHERE session = $session AND request_id IN (SELECT unnest($ids::VARCHAR[]))
            ORDER BY ts_ns, seq""",
        {"session": session, "ids": ids},
    ).fetchall()
    out: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        line = dict(zip(names, row))
        out.setdefault(line["request_id"], []).append(_line(line))
    return out


def serve_requests(con: duckdb.DuckDBPyConnection, query: RequestQuery) -> dict[str, Any]:
    """The requests ``query`` matches, newest first (``limit`` of them after ``offset``, and the ``total``)."""
    if query.session is None:
        _where(query, "")  # (still checked)
        return {"session": None, "total": 0, "requests": []}
    where, params = _where(query, query.session)
    picked = con.execute(
        f"""SELECT request_id, count(*) OVER () FROM ({_matched(where)})
            ORDER BY first_ns DESC, request_id LIMIT {int(query.limit)} OFFSET {int(query.offset)}""",
        params,
    ).fetchall()
    ids = [request_id for request_id, _ in picked]
    lines = _access_lines(con, query.session, ids)
    if picked:
        total = picked[0][1]
    else:  # (a page past the last: counted alone)
        (total,) = con.execute(f"SELECT count(*) FROM ({_matched(where)})", params).fetchone() or (0,)
    return {"session": query.session, "total": total, "requests": [_request(i, lines[i]) for i in ids]}


def _percentiles(
    con: duckdb.DuckDBPyConnection, query: RequestQuery, by: str, step_ms: int | None = None
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """The names ``by`` groups under, and a row a group (and a bin of ``step_ms``, where given): its names, its bin's
    start (epoch ms; None without bins), its requests, its failures and its latency p50, p95 and p99 (in ms) — by
    route at the proxies, or by deployment at its replicas."""
    if by not in BY:
        raise BadQuery(f"by must be one of {', '.join(BY)}, not {by!r}")
    where, params = _where(query, query.session or "")
    if query.session is None:
        return [], []
    keys, component = (["route"], "proxy") if by == "route" else (["application", "deployment"], "replica")
    at = "NULL" if step_ms is None else f"ts_ns // 1000000 // {int(step_ms)} * {int(step_ms)}"
    rows = con.execute(
        f"""SELECT {", ".join(keys)}, {at} AS at, count(*), count(*) FILTER ({ERROR_SQL}),
                   quantile_cont(latency_ms, [0.5, 0.95, 0.99])
            FROM {SERVE_REQUESTS.name} SEMI JOIN ({_matched(where)}) USING (request_id)
            WHERE session = $session AND component = '{component}' GROUP BY ALL ORDER BY ALL""",
        params,
    ).fetchall()
    return keys, rows


QUANTILES = ("p50_ms", "p95_ms", "p99_ms")


def latencies(con: duckdb.DuckDBPyConnection, query: RequestQuery, by: str) -> dict[str, Any]:
    """The latency percentiles (p50, p95, p99, in ms) of the requests ``query`` matches: ``by`` route, at their
    proxies; or ``by`` deployment, at its replicas; with how many requests and how many failed there."""
    keys, rows = _percentiles(con, query, by)
    out = [
        {**dict(zip(keys, named)), "requests": count, "errors": errors, **dict(zip(QUANTILES, values))}
        for *named, _, count, errors, values in rows
    ]
    return {"session": query.session, "by": by, "latencies": out}


# The span of a session's Serve requests over time: from its start (or its first request line, if earlier or the
# session's start is unknown) to its end (or $now while it is live, or its last line, if later)
SERVE_SPAN = Query(
    "serve span",
    f"""SELECT least(s.first_ns, r.lo) // 1000000, greatest(coalesce(e.ended_ns, $now), r.hi) // 1000000,
               e.ended_ns IS NULL
        FROM sessions s LEFT JOIN session_ends([$session]) e USING (session),
             (SELECT min(ts_ns) AS lo, max(ts_ns) AS hi FROM {SERVE_REQUESTS.name} WHERE session = $session) r
        WHERE s.session = $session""",
    about="when the session's Serve requests may be charted: from its start to its end or $now",
)


def latency_bins(
    con: duckdb.DuckDBPyConnection, query: RequestQuery, by: str, now_ns: int, step_ms: int | None = None
) -> dict[str, Any]:
    """:func:`latencies` over time: each route's (or deployment's) totals, and its requests, failures and latency
    percentiles in each bin of ``step_ms`` (default: by the span, as the activity chart's bins) from ``since`` (default:
    the session's start) to ``until`` (default: its end, or ``now_ns`` while it is live), the bins whole multiples of
    the step; None in a bin without requests. BadQuery for a step that cuts the span into over :data:`MAX_BINS`."""
    totals = latencies(con, query, by)
    nothing: dict[str, Any] = {"start_ms": None, "end_ms": None, "step_ms": None, "live": None, "series": []}
    span = con.execute(SERVE_SPAN.sql, {"session": query.session, "now": now_ns}).fetchone() if query.session else None
    if span is None or span[0] is None:
        return {**totals, **nothing}
    lo = span[0] if query.since_ns is None else query.since_ns // 1_000_000
    hi = span[1] if query.until_ns is None else query.until_ns // 1_000_000
    step = step_ms or bin_step(hi - lo)
    first = lo // step * step
    n = max(0, hi - first) // step + 1
    if n > MAX_BINS:
        raise BadQuery(f"step {step} ms cuts the span's {hi - lo} ms into {n} bins, over {MAX_BINS}")
    keys, rows = _percentiles(con, query, by, step)
    series: dict[tuple[Any, ...], dict[str, list[Any]]] = {}
    for *named, at, count, errors, values in rows:
        if (bins := series.get(tuple(named))) is None:
            bins = series[tuple(named)] = {"requests": [0] * n, "errors": [0] * n} | {q: [None] * n for q in QUANTILES}
        if 0 <= (i := (at - first) // step) < n:
            for name, value in zip(("requests", "errors", *QUANTILES), (count, errors, *values)):
                bins[name][i] = value
    shown = [{**row, "bins": series.get(tuple(row[k] for k in keys), {})} for row in totals.pop("latencies")]
    return {**totals, "start_ms": first, "end_ms": hi, "step_ms": step, "live": span[2], "series": shown}


def serve_request(con: duckdb.DuckDBPyConnection, session: str, request_id: str) -> dict[str, Any]:
    """One request whole: its access lines (``request``: None where none was logged) and every line of it, in every
    component (as `raysight logs --request-id` finds them)."""
    found = logs_query.log_lines(con, logs_query.LogQuery(session=session, request_id=request_id), count=False)
    access = _access_lines(con, session, [request_id]).get(request_id)
    return {
        "session": session,
        "request_id": request_id,
        "request": None if access is None else _request(request_id, access),
        "lines": orjson.loads(found.rows),
    }
