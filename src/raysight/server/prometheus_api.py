"""Prometheus's HTTP query API over the stored metrics, so Grafana (and Ray's dashboards for it) use raysight as a
Prometheus data source: ``/api/v1/query``, ``query_range``, ``series``, ``labels``, ``label/<name>/values`` and
``metadata``, for the newest session, and under ``/sessions/<name>/`` for any. Answers and errors in Prometheus's
shapes (``{"status": "success", "data": …}``; ``{"status": "error", "errorType", "error"}``, typed and answered with
the status Prometheus gives each type: bad_data 400, execution 422, timeout and unavailable 503, internal 500)."""

from __future__ import annotations

import asyncio
import functools
import math
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl

import numpy as np
import orjson
from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from raysight import wire
from raysight.errors import BadQuery, NotFound, QueryFailed, QueryTimeout, RaysightError, Unavailable
from raysight.promql.budget import Budget
from raysight.promql.evaluator import evaluate
from raysight.promql.matchers import Matcher, selector_matchers
from raysight.promql.parse import duration_s, parse, shortened
from raysight.promql.source import LOOKBACK_MS
from raysight.promql.values import Matrix, Scalar, Series, String, Value, Vector, number_text
from raysight.server.answers import answer
from raysight.server.app_state import app_state
from raysight.server.ingest_routes import read_body
from raysight.server.routing import FORM_TYPES, Access, route
from raysight.signals.scrapes import metrics_query
from raysight.store import sessions_query

MAX_POINTS = 11_000  # per series of a range query, as Prometheus
MAX_FORM_BODY = 1024 * 1024  # a POSTed form's (a query is at most promql/parse.py's MAX_QUERY_CHARS)
MAX_SECONDS = 1e13  # a time or step, in seconds (year ~318,900): its milliseconds, and sums of them, fit in int64
# Prometheus's types of the errors it answers with (``web/api/v1/api.go``), of each of raysight's that has one; a
# 500 is "internal", any other error the caller's ("bad_data")
ERROR_TYPES: tuple[tuple[type[RaysightError], str], ...] = (
    (QueryTimeout, "timeout"),
    (QueryFailed, "execution"),
    (NotFound, "not_found"),
    (Unavailable, "unavailable"),
)


def prometheus_error(error: RaysightError) -> Response:
    """Prometheus's error envelope, ``{"status": "error", "errorType", "error"}``, typed as Prometheus types it."""
    kind = next((kind for cls, kind in ERROR_TYPES if isinstance(error, cls)), None)
    kind = kind or ("internal" if error.status >= 500 else "bad_data")
    return answer({"status": "error", "errorType": kind, "error": str(error)}, error.status, error.headers)


def _success(data: Any, warnings: list[str] | None = None) -> Response:
    return JSONResponse({"status": "success", "data": data, **({"warnings": warnings} if warnings else {})})


def _seconds(value: str | None, name: str, what: str, other: Callable[[str], float]) -> float:
    """Parameter ``name`` in seconds: a number, or ``other``'s reading of it (a ``what``); a finite one within
    :data:`MAX_SECONDS` of 0."""
    if not value:
        raise BadQuery(f'missing parameter "{name}"')
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = other(value)
        except (ValueError, RuntimeError, OverflowError):
            seconds = math.nan  # (refused below)
    if not abs(seconds) <= MAX_SECONDS:  # (NaN too)
        raise BadQuery(f'invalid parameter "{name}": cannot parse "{shortened(value)}" to a valid {what}')
    return seconds


def _time(value: str | None, name: str) -> float:
    """A time as Prometheus takes it: Unix seconds or RFC 3339."""
    return _seconds(value, name, "timestamp", lambda t: datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp())


def _duration(value: str | None, name: str) -> float:
    """A duration as Prometheus takes it: seconds or ``5m``, ``1h30m``."""
    return _seconds(value, name, "duration", duration_s)


async def _params(request: Request) -> QueryParams:
    """The query's parameters: in the URL, and for a POST in its form body too, first (as Prometheus reads both;
    Grafana POSTs its queries). The guard lets only a form through (its routes declare ``FORM_TYPES``)."""
    if request.method != "POST":
        return request.query_params
    form = parse_qsl((await read_body(request, MAX_FORM_BODY)).decode(errors="replace"), keep_blank_values=True)
    return QueryParams(form + request.query_params.multi_items())


def _with_params(
    fn: Callable[[Request, QueryParams], Awaitable[Response]],
) -> Callable[[Request], Awaitable[Response]]:
    """A handler given the query's parameters (:func:`_params`)."""

    async def route(request: Request) -> Response:
        return await fn(request, await _params(request))

    return route


def _session(con: Any, request: Request) -> str:
    """The session of the request's path (``/sessions/<name>/…``), else the newest."""
    return sessions_query.recorded_session(con, request.path_params.get("session"))


def _sorted(labels: dict[str, str]) -> dict[str, str]:
    return dict(sorted(labels.items()))  # (as Prometheus's label sets are)


def _answer(value: Value, steps: np.ndarray, instant: bool, budget: Budget) -> tuple[str, list[bytes]]:
    """The answer's result type, and the JSON of each element of its result."""
    seconds = (steps / 1000).tolist()
    if isinstance(value, Scalar):
        if instant:
            return "scalar", [orjson.dumps(seconds[0]), orjson.dumps(number_text(value.values[0]))]
        value = Vector([Series({}, value.values)])
    if isinstance(value, String):
        return "string", [orjson.dumps(seconds[0]), orjson.dumps(value.value)]
    if isinstance(value, Matrix):
        return "matrix", [_series(labels, (ts / 1000).tolist(), vs, budget) for labels, ts, vs in value.series]
    if instant:
        return "vector", [
            orjson.dumps({"metric": _sorted(s.labels), "value": [seconds[0], number_text(s.values[0])]})
            for s in value.series
            if not math.isnan(s.values[0])
        ]
    ordered = sorted(value.series, key=lambda s: sorted(s.labels.items()))
    return "matrix", [j for s in ordered if (j := _series(s.labels, seconds, s.values, budget))]


def _series(labels: dict[str, str], seconds: list[float], values: np.ndarray, budget: Budget) -> bytes:
    """A series of a matrix as JSON (empty when it has no point): one at a time, so that no rendering call holds
    the GIL long, nor the objects of every point at once."""
    budget.check()
    points = [[t, number_text(v)] for t, v in zip(seconds, values.tolist()) if v == v]  # (NaN: no point)
    return orjson.dumps({"metric": _sorted(labels), "values": points}) if points else b""


def _body(result_type: str, result: list[bytes], warnings: list[str]) -> bytes:
    """A success's JSON, from its result's elements' (``_answer``)."""
    shown = b',"warnings":' + orjson.dumps(warnings) if warnings else b""
    return b'{"status":"success","data":{"resultType":"%s","result":[%s]}%s}' % (
        result_type.encode(),
        b",".join(result),
        shown,
    )


async def _evaluate(
    request: Request, query: str, start: float | None, end: float | None, step: float, instant: bool
) -> Response:
    """``query`` from ``start`` to ``end`` (None: now, or the session's last scrape when it has been silent longer
    than the lookback: an ended session's last values), within the server's query limits; its answer rendered on
    the read's thread too."""
    step_ms = max(round(step * 1000), 1)
    state = app_state(request)
    budget = Budget(state.query_limits)

    def run(con: Any) -> bytes:
        source = metrics_query.SessionMetrics(con, _session(con, request))
        default = source.default_at_ms() if start is None or end is None else 0
        start_ms = default if start is None else round(start * 1000)
        end_ms = default if end is None else round(end * 1000)
        value = evaluate(query, source, start_ms, end_ms, step_ms, budget)
        result = _answer(value, np.arange(start_ms, end_ms + 1, step_ms, dtype=np.int64), instant, budget)
        return _body(*result, _dropped_warnings(source.dropped(), start_ms))

    if state.queries.locked():  # waiting its turn counts in the query's time, as in Prometheus's queue
        try:
            await asyncio.wait_for(state.queries.acquire(), budget.seconds_left())
        except asyncio.TimeoutError:
            raise QueryTimeout("query timed out in query queue") from None
    else:
        await state.queries.acquire()
    try:
        return Response(await state.read(run), media_type="application/json")
    finally:
        state.queries.release()


def _dropped_warnings(dropped: tuple[int, str] | None, start_ms: int) -> list[str]:
    """A warning when the retention dropped samples from where the query looks: its start, less the lookback."""
    if dropped is None or dropped[0] < start_ms - LOOKBACK_MS:
        return []
    through = datetime.fromtimestamp(dropped[0] / 1000, tz=UTC).isoformat(timespec="seconds")
    return [f"samples through {through} were {dropped[1]}: the answer lacks them"]


@_with_params
async def query(request: Request, params: QueryParams) -> Response:
    """GET|POST /api/v1/query?query=&time= (default: now; for a session silent longer than the lookback, its last
    scrape)"""
    expr = params.get("query") or ""
    if not expr:
        raise BadQuery('missing parameter "query"')
    given = params.get("time")
    at = None if given is None or given == "" else _time(given, "time")
    return await _evaluate(request, expr, at, at, 1.0, instant=True)


@_with_params
async def query_range(request: Request, params: QueryParams) -> Response:
    """GET|POST /api/v1/query_range?query=&start=&end=&step="""
    expr = params.get("query") or ""
    if not expr:
        raise BadQuery('missing parameter "query"')
    start, end = _time(params.get("start"), "start"), _time(params.get("end"), "end")
    step = _duration(params.get("step"), "step")
    if end < start:
        raise BadQuery('invalid parameter "end": end timestamp must not be before start time')
    if step <= 0:
        raise BadQuery('invalid parameter "step": zero or negative query resolution step widths are not accepted')
    if (end - start) / step > MAX_POINTS:
        raise BadQuery(
            f"exceeded maximum resolution of {MAX_POINTS:,} points per timeseries. "
            "Try decreasing the query resolution (?step=XX)"
        )
    return await _evaluate(request, expr, start, end, step, instant=False)


def _match_sets(params: QueryParams) -> list[list[Matcher]]:
    """The ``match[]`` selectors, each a list of matchers."""
    sets = []
    for selector in params.getlist("match[]"):
        node = parse(selector)
        if type(node).__name__ != "VectorSelector":
            raise BadQuery(f'invalid parameter "match[]": "{shortened(selector)}" is not a series selector')
        sets.append(selector_matchers(node))
    return sets


@_with_params
async def series(request: Request, params: QueryParams) -> Response:
    """GET|POST /api/v1/series?match[]=…"""
    sets = _match_sets(params)
    if not sets:
        raise BadQuery("no match[] parameter provided")
    return _success(
        await app_state(request).read(lambda con: metrics_query.series_labels(con, _session(con, request), sets))
    )


@_with_params
async def labels(request: Request, params: QueryParams) -> Response:
    """GET|POST /api/v1/labels[?match[]=…]"""
    sets = _match_sets(params)
    return _success(await app_state(request).read(lambda con: metrics_query.labels(con, _session(con, request), sets)))


@_with_params
async def label_values(request: Request, params: QueryParams) -> Response:
    """GET /api/v1/label/<name>/values[?match[]=…]"""
    name, sets = request.path_params["name"], _match_sets(params)
    return _success(
        await app_state(request).read(lambda con: metrics_query.label_values(con, _session(con, request), name, sets))
    )


@_with_params
async def metadata(request: Request, params: QueryParams) -> Response:
    """GET /api/v1/metadata[?metric=]"""
    metric = params.get("metric")
    return _success(
        await app_state(request).read(lambda con: metrics_query.metadata(con, _session(con, request), metric))
    )


# Prometheus's API: its routes read (the read token), answer errors as Prometheus does and take forms (Grafana's POSTs)
_prometheus = functools.partial(route, access=Access.READ, envelope=prometheus_error, bodies=FORM_TYPES)
routes = [  # at the root for the newest session, and mounted under /sessions/<name>/ by the app
    _prometheus(wire.PROM_QUERY, query, methods=["GET", "POST"]),
    _prometheus(wire.PROM_QUERY_RANGE, query_range, methods=["GET", "POST"]),
    _prometheus(wire.PROM_SERIES, series, methods=["GET", "POST"]),
    _prometheus(wire.PROM_LABELS, labels, methods=["GET", "POST"]),
    _prometheus(wire.PROM_LABEL_VALUES, label_values),
    _prometheus(wire.PROM_METADATA, metadata),
]
