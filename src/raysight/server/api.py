"""raysight's own JSON API under /api/raysight: one error shape ``{"ok": false, "error", "status"}``."""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import Response

from raysight import __version__, flame, units, wire
from raysight.errors import BadQuery
from raysight.server.answers import ROWS, answer, pieces, raysight_error, read_json, rendered, streamed
from raysight.server.app_state import app_state
from raysight.server.guard import from_browser
from raysight.server.params import bool_param, duration_param, id_param, int_param, time_param
from raysight.server.routing import Access, route
from raysight.signals.log_lines import logs_query, requests_query
from raysight.signals.log_lines.logs_query import LogQuery
from raysight.signals.polls import serve_query
from raysight.signals.polls.status_query import cluster_status
from raysight.signals.ray_events import activity_query, state_query, summary_query
from raysight.signals.ray_events import apply as ray_apply
from raysight.signals.ray_events import timeline_query as timeline_sql
from raysight.signals.ray_events.entities import resource
from raysight.signals.ray_events.failures_query import ErrorQuery, error_groups, failure
from raysight.signals.scrapes import resources_query, top_query
from raysight.signals.spans import traces_query as traces_sql
from raysight.signals.task_profiles import profiles_query
from raysight.store import doctor as doctor_sql
from raysight.store import sessions_query
from raysight.store.filters import parse_filter

MAX_LIMIT = 1_000_000
MAX_TOP = 1000  # rows of each `metrics top` table


async def list_resource(request: Request) -> Response:
    """GET /api/raysight/{resource}?session=&filter=k=v&sort=-field&limit=&offset=&detail=&count_by=: streamed, a
    chunk of rows at a time, so that the largest page takes no more memory than a small one.

    ``sort`` takes a field, or a key of the resource's own (tasks: ``-failed``, the failed attempts first);
    ``count_by=FIELD`` (of text or true/false values) adds ``counts``: the rows matched by each value of FIELD, the
    filters on FIELD left out (a table's state chips: ``count_by=state``)."""
    res = resource(request.path_params["resource"])
    params = request.query_params
    limit = int_param(params, "limit", 100)
    if limit is not None and limit > MAX_LIMIT:
        raise BadQuery(f"limit {limit} is over {MAX_LIMIT}; page with offset instead")
    filters = [parse_filter(f) for f in params.getlist("filter")]
    exclude_driver = not bool_param(params, "include_driver")
    counted = (params.get("count_by") or "").lower()

    def rows(con: Any) -> tuple[Any, Iterator[bytes]]:
        session = named_session(con, request, every=True)
        page = state_query.list_page(
            con,
            res,
            session=session,
            filters=filters,
            sort=params.getlist("sort"),
            limit=limit,
            offset=int_param(params, "offset", 0) or 0,
            detail=bool_param(params, "detail"),
            exclude_driver=exclude_driver,
        )
        shape: dict[str, Any] = {"session": page.session, "total": page.total}
        if counted:
            shape["counts"] = state_query.count_by(
                con, res, counted, session=session, filters=filters, exclude_driver=exclude_driver
            )
        return {**shape, "rows": ROWS}, pieces(state_query.page_rows(con, page))

    return await streamed(app_state(request), rows)


async def get_resource(request: Request) -> Response:
    """GET /api/raysight/{resource}/{id}: every row with that ID (a task's attempts), all fields."""
    res = resource(request.path_params["resource"])
    entity_id = request.path_params["entity_id"].lower()

    def read(con: Any) -> dict[str, Any]:
        result = state_query.get_rows(con, res, entity_id, session=named_session(con, request, every=True))
        return {"session": result.session, "rows": result.rows}

    return await read_json(app_state(request), read)


async def summary(request: Request) -> Response:
    """GET /api/raysight/summary/{tasks|actors}?session="""
    what = request.path_params["resource"]
    functions = {"tasks": summary_query.summarize_tasks, "actors": summary_query.summarize_actors}
    if what not in functions:
        raise BadQuery(f"summaries exist for tasks and actors, not {what!r}")
    return await read_json(app_state(request), lambda con: functions[what](con, named_session(con, request)))


async def sessions(request: Request) -> Response:
    return await read_json(app_state(request), lambda con: {"sessions": sessions_query.list_sessions(con)})


async def delete_session(request: Request) -> Response:
    name = request.path_params["session"]
    state = app_state(request)
    resolved = await state.read(lambda con: sessions_query.recorded_session(con, name))
    await asyncio.wrap_future(state.writer.call(lambda store: store.delete_session(resolved)))
    return answer({"ok": True, "deleted": resolved})


async def doctor(request: Request) -> Response:
    state = app_state(request)
    report = await state.read(doctor_sql.doctor)
    report["ingest_backlog"] = state.writer.backlog()  # acknowledged (journalled), not yet folded
    report["folding"] = state.writer.folding()  # waiting on a full disk, say, and what the journal's recovery skipped
    if state.forwarder is not None:  # spans sent on to another backend
        report["traces_forward"] = {
            "url": state.forwarder.url,
            "store": state.forwarding.store,
            "queued": state.forwarder.queued(),
            **vars(state.forwarder.counts),
        }
    return await rendered(report)


async def ping(request: Request) -> Response:
    """GET /api/raysight/ping: answers without touching the store (liveness for `raysight run` and the CLI), with
    the ingest backlog (batches acknowledged, not yet folded), the events folded since it started (pollers that wait
    for a quiet server read these two, not the doctor's queries), and the server's pid (`server --detach` checks that
    the server answering is the one it started)."""
    state = app_state(request)
    return answer(
        {
            "ok": True,
            "version": __version__,
            "pid": os.getpid(),
            "ingest_backlog": state.writer.backlog(),
            "events_received": state.metrics.events_received(),
        }
    )


async def logs(request: Request) -> Response:
    """GET /api/raysight/logs?session=&task=&attempt=&actor=&job=&worker=&pid=&node=&file=&request_id=&app=
    &deployment=&replica=&stream=&level=&grep=&regex=&since=&until=&after=&limit=&newest=&markers=&include_own=
    &context=&count=: log lines in the order stored (``request_id``, ``app``, ``deployment``, ``replica``: Serve's;
    ``since``/``until``: epoch ns, ISO 8601 or a time ago, -5m; ``after``: lines stored after this ``seq``, to follow;
    ``include_own``: a Ray dashboard's lines of raysight's own requests too; ``context``: lines of the file around each
    match, flagged so); ``last_seq`` is where to follow on from; ``dropped`` what the log retention dropped of the
    session. Streamed, a chunk of lines at a time."""
    params = request.query_params

    def text(name: str) -> str | None:
        value = params.get(name)
        return value or None

    def entity(name: str) -> str | None:
        value = text(name)
        return value.lower() if value else None

    limit = int_param(params, "limit", 1000)
    if limit is not None and limit > MAX_LIMIT:
        raise BadQuery(f"limit {limit} is over {MAX_LIMIT}; follow with after= instead")
    query = LogQuery(
        task_id=entity("task"),
        attempt=int_param(params, "attempt", None),
        actor_id=entity("actor"),
        job_id=entity("job"),
        worker_id=entity("worker"),
        pid=int_param(params, "pid", None),
        node_id=entity("node"),
        file=text("file"),
        request_id=text("request_id"),
        application=text("app"),
        deployment=text("deployment"),
        replica=text("replica"),
        stream=text("stream"),
        level=text("level"),
        grep=text("grep"),
        regex=text("regex"),
        since_ns=time_param(params, "since", units.NS),
        until_ns=time_param(params, "until", units.NS),
        after_seq=int_param(params, "after", None),
        limit=1000 if limit is None else limit,
        newest=bool_param(params, "newest"),
        markers=bool_param(params, "markers"),
        include_own=bool_param(params, "include_own"),
        context=int_param(params, "context", 0) or 0,
    )
    count = bool_param(params, "count", True)

    def rows(con: Any) -> tuple[Any, Iterator[bytes]]:
        page = logs_query.log_page(con, replace(query, session=named_session(con, request)), count=count)
        shape = {"session": page.session, "total": page.total, "last_seq": page.last_seq, "dropped": page.dropped}
        return {**shape, "rows": ROWS}, (piece.encode() for piece in logs_query.page_rows(con, page))

    return await streamed(app_state(request), rows)


def named_session(con: Any, request: Request, every: bool = False) -> str | None:
    """The session a request names (``?session=``, by name or label; default the newest), resolved once for the
    request's read models: None when none is recorded yet; ``*`` (every session) where ``every``."""
    return sessions_query.resolve_session(con, request.query_params.get("session"), every)


def recorded_session(con: Any, request: Request) -> str:
    """:func:`named_session`; NotFound when none is recorded yet."""
    return sessions_query.recorded_session(con, request.query_params.get("session"))


async def errors(request: Request) -> Response:
    """GET /api/raysight/errors?session=&job=&since=&until=&type=: the session's root failures grouped by cause (most
    frequent first), each with its consequences (``signals/ray_events/failures_query.py``); ``since``/``until``:
    epoch ns, ISO 8601 or a time ago."""
    params = request.query_params

    def read(con: Any) -> dict[str, Any]:
        session = named_session(con, request)
        if session is None:
            return {"session": None, "groups": []}
        query = ErrorQuery(
            session,
            job_id=(params.get("job") or "").lower() or None,
            since_ns=time_param(params, "since", units.NS),
            until_ns=time_param(params, "until", units.NS),
            error_type=params.get("type") or None,
        )
        return {"session": session, "groups": error_groups(con, query)}

    return await read_json(app_state(request), read)


async def error_detail(request: Request) -> Response:
    """GET /api/raysight/errors/{id}?session=&colours=: one failure whole (a task, actor, worker, node or job ID; no
    failures for one that did not fail), or a group's failures (its ID); ``colours``: each message with Ray's colour
    codes, for a terminal."""
    failure_id = request.path_params["failure_id"].lower()
    if not re.fullmatch(r"[0-9a-f]{8,56}", failure_id):
        raise BadQuery(f"{failure_id!r} is no ID: a task, actor, worker, node or job ID, or a group's, in hex")
    colours = bool_param(request.query_params, "colours")

    def read(con: Any) -> dict[str, Any]:
        return failure(con, recorded_session(con, request), failure_id, colours)

    return await read_json(app_state(request), read)


async def activity(request: Request) -> Response:
    """GET /api/raysight/activity?session=&step=&start=&end=: task attempts started, finished and failed in each
    ``step`` (a duration, 5s; default by the span) from ``start`` (default: the session's start) to ``end`` (each epoch
    ms, ISO 8601 or a time ago; default its end, or now while it is live)."""
    params = request.query_params
    step_ns = duration_param(params, "step")
    if step_ns is not None and step_ns < units.MS:
        raise BadQuery(f"step must be at least 1ms, not {params['step']!r}")
    step_ms = None if step_ns is None else step_ns // units.MS
    start_ms, end_ms = time_param(params, "start", units.MS), time_param(params, "end", units.MS)

    def read(con: Any) -> dict[str, Any]:
        now_ms = time.time_ns() // units.MS
        return activity_query.activity(con, named_session(con, request), now_ms, step_ms, end_ms, start_ms)

    return await read_json(app_state(request), read)


async def status(request: Request) -> Response:
    """GET /api/raysight/status?session=&at=: what the cluster had and what waited for it at ``at`` (epoch ns, ISO 8601
    or a time ago; default the last sample the poller took), as `ray status` shows it
    (``signals/polls/status_query.py``)."""
    at = time_param(request.query_params, "at", units.NS)

    def read(con: Any) -> dict[str, Any]:
        return cluster_status(con, recorded_session(con, request), at)

    return await read_json(app_state(request), read)


async def serve(request: Request) -> Response:
    """GET /api/raysight/serve?session=&at=: Ray Serve's state at ``at`` (epoch ns, ISO 8601 or a time ago; default
    the last sample the poller took), ``details`` as the dashboard gave it (``ServeInstanceDetails``, what `serve
    status` and `serve config` read), with when it was first and last polled so (``signals/polls/serve_query.py``).
    Runtime envs' variables are kept as Ray's dashboard gives them to its CLI; a browser's request gets their values
    redacted, as Ray's dashboard does."""
    at = time_param(request.query_params, "at", units.NS)
    sample = await app_state(request).read(
        lambda con: serve_query.serve_sample(con, recorded_session(con, request), at)
    )
    if from_browser(request.headers):
        sample["details"] = serve_query.redacted(sample["details"])
    return await rendered(sample)


async def serve_history(request: Request) -> Response:
    """GET /api/raysight/serve/history?session=&app=: each change of Serve's applications, deployments and replicas
    over the session, as the poller saw them (``signals/polls/serve_query.py``)."""
    app = request.query_params.get("app") or None
    return await read_json(
        app_state(request), lambda con: serve_query.serve_history(con, recorded_session(con, request), app)
    )


async def serve_replicas(request: Request) -> Response:
    """GET /api/raysight/serve/replicas?session=&app=&deployment=&at=: every replica of Serve's until ``at`` (epoch
    ns, ISO 8601 or a time ago; default the last sample), with its states over time, its actor, worker, pid, node and
    log file, and how it ended (``signals/polls/serve_query.py``)."""
    params = request.query_params
    at = time_param(params, "at", units.NS)
    app, deployment = params.get("app") or None, params.get("deployment") or None
    return await read_json(
        app_state(request),
        lambda con: serve_query.serve_replicas(con, recorded_session(con, request), app, deployment, at),
    )


def serve_request_query(params: QueryParams) -> requests_query.RequestQuery:
    """The filters of Serve's requests a query string gives (``app``, ``deployment``, ``route``, ``status``,
    ``min_latency``, ``since``, ``until``, ``limit``, ``offset``), the session left to resolve."""
    min_latency = duration_param(params, "min_latency")
    return requests_query.RequestQuery(
        application=params.get("app") or None,
        deployment=params.get("deployment") or None,
        route=params.get("route") or None,
        status=params.get("status") or None,
        min_latency_ms=None if min_latency is None else min_latency / units.MS,
        since_ns=time_param(params, "since", units.NS),
        until_ns=time_param(params, "until", units.NS),
        limit=int_param(params, "limit", 100) or 0,
        offset=int_param(params, "offset", 0) or 0,
    )


async def serve_requests(request: Request) -> Response:
    """GET /api/raysight/serve/requests?session=&app=&deployment=&route=&status=&min_latency=&since=&until=&limit=
    &offset=&by=: Serve's requests with an access line that matches (``status``: an HTTP code, 5xx, OK, ERROR or
    CANCELLED; ``min_latency`` in ns or with its unit, 250ms; ``since``/``until``: epoch ns, ISO 8601 or a time ago),
    newest first, ``limit`` of them after ``offset``, each with its proxy's line and its replicas';
    ``by=route|deployment``: their latency percentiles instead (``signals/log_lines/requests_query.py``)."""
    query = serve_request_query(request.query_params)
    by = request.query_params.get("by") or None

    def read(con: Any) -> dict[str, Any]:
        asked = replace(query, session=named_session(con, request))
        return requests_query.serve_requests(con, asked) if by is None else requests_query.latencies(con, asked, by)

    return await read_json(app_state(request), read)


async def serve_latency(request: Request) -> Response:
    """GET /api/raysight/serve/latency?session=&by=route|deployment&step=&(serve/requests' filters): the requests,
    failures and latency p50/p95/p99 of each route (at its proxies; the default) or deployment (at its replicas),
    whole and in each ``step`` (a duration, 5s; default by the span) from ``since`` (default the session's start) to
    ``until`` (default its end, or now while it is live): the dashboard's Serve charts, from the requests' access
    lines (``signals/log_lines/requests_query.py``)."""
    params = request.query_params
    query = serve_request_query(params)
    step_ns = duration_param(params, "step")
    if step_ns is not None and step_ns < units.MS:
        raise BadQuery(f"step must be at least 1ms, not {params['step']!r}")
    step_ms = None if step_ns is None else step_ns // units.MS
    by = params.get("by") or "route"

    def read(con: Any) -> dict[str, Any]:
        asked = replace(query, session=named_session(con, request))
        return requests_query.latency_bins(con, asked, by, time.time_ns(), step_ms)

    return await read_json(app_state(request), read)


async def serve_request(request: Request) -> Response:
    """GET /api/raysight/serve/requests/{request_id}?session=: one Serve request whole, its access lines, every line
    of it in every component, and its traces (those with a span of its ``request_id``: Serve's spans of it)."""
    request_id = request.path_params["request_id"]  # (checked as `raysight logs --request-id` checks it)

    def read(con: Any) -> dict[str, Any]:
        session = recorded_session(con, request)
        traced = traces_sql.list_traces(con, traces_sql.TraceQuery(session=session, request_id=request_id))
        return {**requests_query.serve_request(con, session, request_id), "traces": traced["traces"]}

    return await read_json(app_state(request), read)


async def usage(request: Request) -> Response:
    """GET /api/raysight/usage?session=&node=&at=: what each node (or ``node``) used of its CPUs, GPUs, memory and
    object store at ``at`` (epoch ms, ISO 8601 or a time ago; default the session's last scrape), and the cluster's
    sum (``signals/scrapes/resources_query.py``)."""
    at = time_param(request.query_params, "at", units.MS)
    node = id_param(request.query_params, "node", 56, "raysight list nodes")
    return await read_json(
        app_state(request), lambda con: resources_query.node_usage(con, recorded_session(con, request), node, at)
    )


async def metrics_top(request: Request) -> Response:
    """GET /api/raysight/metrics/top?session=&at=&limit=: the busiest nodes, workers and actors at ``at`` (epoch ms, ISO
    8601 or a time ago; default now, or an ended session's last scrape), by CPU (``signals/scrapes/top_query.py``)."""
    at = time_param(request.query_params, "at", units.MS)
    limit = int_param(request.query_params, "limit", 10) or 10
    if limit > MAX_TOP:
        raise BadQuery(f"limit must be at most {MAX_TOP}")

    def read(con: Any) -> dict[str, Any]:
        return top_query.top(con, recorded_session(con, request), at, limit, state.query_limits)

    state = app_state(request)
    return await read_json(state, read)


def job_param(request: Request) -> str | None:
    """``?job=``: a job's ID (8 hex digits), or None."""
    return id_param(request.query_params, "job", 8, "raysight list jobs")


async def timeline(request: Request) -> Response:
    """GET /api/raysight/timeline?session=&job=: the session's task attempts as Chrome trace JSON (`ray timeline`'s
    format), one job's where given: streamed, a chunk of events at a time."""
    job = job_param(request)

    def rows(con: Any) -> tuple[Any, Iterator[bytes]]:
        events = timeline_sql.chrome_trace(con, recorded_session(con, request), job)
        return ROWS, (piece.encode() for piece in events)

    return await streamed(app_state(request), rows)


async def task_stream(request: Request) -> Response:
    """GET /api/raysight/task-stream?session=&job=&limit=: the dashboard's timeline, a lane per worker and a bar per
    task attempt in columns (``signals/ray_events/timeline_query.py``), the first ``limit`` attempts by start."""
    job = job_param(request)
    limit = int_param(request.query_params, "limit", timeline_sql.STREAM_LIMIT) or 0
    if not 1 <= limit <= 2_000_000:
        raise BadQuery(f"limit must be 1 to 2000000, not {limit}")

    def read(con: Any) -> bytes:
        return timeline_sql.task_stream(con, recorded_session(con, request), job, limit)

    return Response(await app_state(request).read(read), media_type="application/json")


MAX_TRACES = 10_000


async def traces(request: Request) -> Response:
    """GET /api/raysight/traces?session=&job=&task=&actor=&request=&name=&min_duration=&error=&since=&until=&limit=
    &offset=: the traces with a span that matches, newest first, ``limit`` of them after ``offset`` and the ``total``
    that match (``min_duration`` in ns or with its unit, 250ms; ``since``, ``until``: epoch ns, ISO 8601 or a time
    ago)."""
    params = request.query_params

    def entity(name: str) -> str | None:
        return (params.get(name) or "").lower() or None

    limit = int_param(params, "limit", 50) or 50
    if limit > MAX_TRACES:
        raise BadQuery(f"limit must be at most {MAX_TRACES}")
    query = traces_sql.TraceQuery(
        job_id=job_param(request),
        task_id=entity("task"),
        actor_id=entity("actor"),
        request_id=params.get("request") or None,
        name=params.get("name") or None,
        min_duration_ns=duration_param(params, "min_duration"),
        errors_only=bool_param(params, "error"),
        since_ns=time_param(params, "since", units.NS),
        until_ns=time_param(params, "until", units.NS),
        limit=limit,
        offset=int_param(params, "offset", 0) or 0,
    )
    return await read_json(
        app_state(request), lambda con: traces_sql.list_traces(con, replace(query, session=named_session(con, request)))
    )


async def trace(request: Request) -> Response:
    """GET /api/raysight/traces/{trace_id}: a trace's spans in tree order, each with its depth and whether it is on
    the critical path."""
    trace_id = request.path_params["trace_id"].lower()
    return await read_json(app_state(request), lambda con: traces_sql.get_trace(con, trace_id))


async def profile(request: Request) -> Response:
    """GET /api/raysight/profile?session=&task=&attempt=&function=&actor=&job=&cpu_only=: the profile of a task's
    attempts (``attempt``: one of them), or of every attempt of a function, an actor or a job, merged: its stacks
    hottest first (``[stack, samples, on_cpu]``, collapsed); ``cpu_only``: the samples on CPU alone. A task's session
    is by default the newest that sampled it. ``format=svg``: its flame graph (what the dashboard shows)."""
    params = request.query_params
    if (fmt := params.get("format") or "json") not in ("json", "svg"):
        raise BadQuery("format must be json or svg")
    query = profiles_query.ProfileQuery(
        task_id=id_param(params, "task", 48, "raysight list tasks"),
        attempt=int_param(params, "attempt", None),
        function=params.get("function") or None,
        actor_id=id_param(params, "actor", 32, "raysight list actors"),
        job_id=job_param(request),
        cpu_only=bool_param(params, "cpu_only"),
    )

    def read(con: Any) -> dict[str, Any]:
        session = None
        if query.task_id is not None and not params.get("session"):
            session = profiles_query.task_session(con, query.task_id)
        return profiles_query.profile(con, replace(query, session=session or recorded_session(con, request)))

    if fmt == "json":
        return await read_json(app_state(request), read)
    svg = flame.profile_svg(profiles_query.named(query), await app_state(request).read(read), query.cpu_only)
    return Response(svg, media_type="image/svg+xml")


async def reindex(request: Request) -> Response:
    state = app_state(request)
    events = await asyncio.wrap_future(state.writer.call(ray_apply.reindex))
    return answer({"ok": True, "events": events})


SERVE_REQUEST_PARAMS = ("session", "app", "deployment", "route", "status", "min_latency", "since", "until")
PAGED = ("limit", "offset")
routes = [
    route(wire.PING, ping, access=Access.READ, envelope=raysight_error, params=()),
    route(wire.SESSIONS, sessions, access=Access.READ, envelope=raysight_error, params=()),
    route(wire.SESSION, delete_session, access=Access.ADMIN, envelope=raysight_error, methods=["DELETE"], params=()),
    route(wire.DOCTOR, doctor, access=Access.READ, envelope=raysight_error, params=()),
    route(wire.REINDEX, reindex, access=Access.ADMIN, envelope=raysight_error, methods=["POST"], params=()),
    route(wire.SUMMARY, summary, access=Access.READ, envelope=raysight_error, params=("session",)),
    route(
        wire.LOGS,
        logs,
        access=Access.READ,
        envelope=raysight_error,
        params=(
            *("session", "task", "attempt", "actor", "job", "worker", "pid", "node", "file", "request_id", "app"),
            *("deployment", "replica", "stream", "level", "grep", "regex", "since", "until", "after", "limit"),
            *("newest", "markers", "include_own", "context", "count"),
        ),
    ),
    route(
        wire.ERRORS,
        errors,
        access=Access.READ,
        envelope=raysight_error,
        params=("session", "job", "since", "until", "type"),
    ),
    route(wire.ERROR, error_detail, access=Access.READ, envelope=raysight_error, params=("session", "colours")),
    route(
        wire.ACTIVITY, activity, access=Access.READ, envelope=raysight_error, params=("session", "step", "start", "end")
    ),
    route(wire.STATUS, status, access=Access.READ, envelope=raysight_error, params=("session", "at")),
    route(wire.SERVE, serve, access=Access.READ, envelope=raysight_error, params=("session", "at")),
    route(wire.SERVE_HISTORY, serve_history, access=Access.READ, envelope=raysight_error, params=("session", "app")),
    route(
        wire.SERVE_REPLICAS,
        serve_replicas,
        access=Access.READ,
        envelope=raysight_error,
        params=("session", "app", "deployment", "at"),
    ),
    route(
        wire.SERVE_REQUESTS,
        serve_requests,
        access=Access.READ,
        envelope=raysight_error,
        params=(*SERVE_REQUEST_PARAMS, *PAGED, "by"),
    ),
    route(
        wire.SERVE_LATENCY,
        serve_latency,
        access=Access.READ,
        envelope=raysight_error,
        params=(*SERVE_REQUEST_PARAMS, *PAGED, "by", "step"),
    ),
    route(wire.SERVE_REQUEST, serve_request, access=Access.READ, envelope=raysight_error, params=("session",)),
    route(wire.TIMELINE, timeline, access=Access.READ, envelope=raysight_error, params=("session", "job")),
    route(
        wire.TASK_STREAM, task_stream, access=Access.READ, envelope=raysight_error, params=("session", "job", "limit")
    ),
    route(wire.USAGE, usage, access=Access.READ, envelope=raysight_error, params=("session", "node", "at")),
    route(
        wire.METRICS_TOP, metrics_top, access=Access.READ, envelope=raysight_error, params=("session", "at", "limit")
    ),
    route(
        wire.PROFILE,
        profile,
        access=Access.READ,
        envelope=raysight_error,
        params=("session", "task", "attempt", "function", "actor", "job", "cpu_only", "format"),
    ),
    route(
        wire.TRACES,
        traces,
        access=Access.READ,
        envelope=raysight_error,
        params=(
            *("session", "job", "task", "actor", "request", "name", "min_duration", "error", "since", "until"),
            *PAGED,
        ),
    ),
    route(wire.TRACE, trace, access=Access.READ, envelope=raysight_error, params=()),
    route(
        wire.RESOURCE,
        list_resource,
        access=Access.READ,
        envelope=raysight_error,
        params=("session", "filter", "sort", *PAGED, "detail", "include_driver", "count_by"),
    ),
    route(wire.ENTITY, get_resource, access=Access.READ, envelope=raysight_error, params=("session",)),
]
