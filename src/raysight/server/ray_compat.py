"""Ray's own dashboard API, answered from the store, so `ray list/get/summary --address`, `ray.util.state`,
`ray job list/status` and `serve status/config -a` work unchanged; under ``/sessions/<name>/`` for any session, at
the root for the newest.

Envelope and semantics follow ``shared/ray/state-http-contract.md``: ``{"result", "msg", "data": {"result"}}``,
repeated ``filter_keys/predicates/values``, case-insensitive matches, sort by ID, limit ≤ 10000.
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib import metadata
from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from raysight import wire
from raysight.errors import BadQuery, RaysightError
from raysight.server.answers import ROWS, answer, pieces, rendered, streamed
from raysight.server.app_state import app_state
from raysight.server.guard import from_browser
from raysight.server.params import bool_param, int_param
from raysight.server.routing import Access, route
from raysight.signals.polls import serve_query
from raysight.signals.polls.polled_resources import OBJECTS
from raysight.signals.ray_events import state_query, summary_query
from raysight.signals.ray_events.entities import JOBS, resource
from raysight.store import sessions_query
from raysight.store.filters import Filter

RAY_MAX_LIMIT = 10_000
SAMPLED = "Objects are a sample: what raysight's poller saw last (every 30 s while the cluster lived)."
API_VERSION = "4"


def envelope(result: Any) -> dict[str, Any]:
    return {"result": True, "msg": "", "data": {"result": result}}


def ray_error(error: RaysightError) -> Response:
    """Ray's error envelope: ``{"result": false, "msg", "data": {"result": null}}``."""
    return answer({"result": False, "msg": str(error), "data": {"result": None}}, error.status, error.headers)


def _session(con: Any, request: Request, every: bool = False) -> str | None:
    """The session the URL names (``/s/<session>/…``; default the newest), resolved once for the request."""
    return sessions_query.resolve_session(con, request.path_params.get("session"), every)


def _filters(request: Request) -> list[Filter]:
    params = request.query_params
    keys, predicates, values = (params.getlist(n) for n in ("filter_keys", "filter_predicates", "filter_values"))
    if not len(keys) == len(predicates) == len(values):
        raise BadQuery("filter_keys, filter_predicates and filter_values must come in equal numbers")
    filters = []
    for key, predicate, value in zip(keys, predicates, values):
        if predicate not in ("=", "!="):
            raise BadQuery(f"Unsupported filter predicate {predicate}. Use = or !=")
        filters.append(Filter(key.lower(), predicate, value))
    return filters


async def list_resource(request: Request) -> Response:
    res = resource(request.path_params["resource"])
    params = request.query_params
    limit = int_param(params, "limit", 100)
    if limit is None or limit > RAY_MAX_LIMIT:
        raise BadQuery(f"Given limit {limit} exceeds the supported limit {RAY_MAX_LIMIT}. Use a lower limit.")
    for f in (filters := _filters(request)):
        if f.key not in res.by_name:
            raise BadQuery(f"The given filter column {f.key} is not supported. Supported: {sorted(res.by_name)}")
    detail = bool_param(params, "detail")

    def rows(con: Any) -> tuple[Any, Iterator[bytes]]:
        page = state_query.list_page(
            con,
            res,
            session=_session(con, request, every=True),
            filters=filters,
            limit=limit,
            detail=detail,
            exclude_driver=bool_param(params, "exclude_driver", True),
        )
        shape = {
            "total": page.total,
            "num_after_truncation": page.total,
            "num_filtered": page.total,
            "result": ROWS,
            "partial_failure_warning": "",
            "warnings": [SAMPLED] if res is OBJECTS else None,
        }
        return envelope(shape), pieces(state_query.page_rows(con, page))

    return await streamed(app_state(request), rows)


async def summarize(request: Request) -> Response:
    what = request.path_params["resource"]
    state = app_state(request)
    if what == "tasks":
        data = await state.read(lambda con: summary_query.summarize_tasks(con, _session(con, request)))
        groups = data["summary"]
        by_type = {
            t: sum(g["attempts"] for g in groups if g["type"] == t)
            for t in ("NORMAL_TASK", "ACTOR_TASK", "ACTOR_CREATION_TASK")
        }
        cluster = {
            "summary": {
                g["func_or_class_name"]: {k: g[k] for k in ("func_or_class_name", "type", "state_counts")}
                for g in groups
            },
            "total_tasks": by_type["NORMAL_TASK"],
            "total_actor_tasks": by_type["ACTOR_TASK"],
            "total_actor_scheduled": by_type["ACTOR_CREATION_TASK"],
            "summary_by": "func_name",
        }
        total = sum(by_type.values())
    elif what == "actors":
        data = await state.read(lambda con: summary_query.summarize_actors(con, _session(con, request)))
        cluster = {
            "summary": {
                g["class_name"]: {"class_name": g["class_name"], "state_counts": g["state_counts"]}
                for g in data["summary"]
            },
            "total_actors": sum(g["actors"] for g in data["summary"]),
            "summary_by": "class",
        }
        total = cluster["total_actors"]
    elif what == "objects":
        data = await state.read(lambda con: summary_query.summarize_objects(con, _session(con, request)))
        cluster = {
            "summary": {g["call_site"]: {k: v for k, v in g.items() if k != "call_site"} for g in data["summary"]},
            "total_objects": sum(g["total_objects"] for g in data["summary"]),
            "total_size_mb": sum(g["total_size_mb"] for g in data["summary"]),
            "callsite_enabled": any(g["call_site"] != "disabled" for g in data["summary"]),
            "summary_by": "callsite",
        }
        total = cluster["total_objects"]
    else:
        raise BadQuery(f"summaries exist for tasks, actors and objects, not {what}")
    return await rendered(
        envelope(
            {
                "total": total,
                "num_after_truncation": total,
                "num_filtered": total,
                "result": {"node_id_to_summary": {"cluster": cluster}},
                "partial_failure_warning": "",
                "warnings": None,
            }
        )
    )


def _ray_version() -> str:
    try:
        return metadata.version("ray")
    except metadata.PackageNotFoundError:
        return "2.60.0"


async def version(request: Request) -> Response:
    session = await app_state(request).read(lambda con: _session(con, request))
    return answer(
        {"version": API_VERSION, "ray_version": _ray_version(), "ray_commit": "", "session_name": session or ""}
    )


async def jobs(request: Request) -> Response:
    def rows(con: Any) -> tuple[Any, Iterator[bytes]]:
        page = state_query.list_page(con, JOBS, session=_session(con, request, every=True), limit=None, detail=True)
        return ROWS, pieces(state_query.page_rows(con, page))

    return await streamed(app_state(request), rows)


async def job(request: Request) -> Response:
    job_id = request.path_params["job_id"]
    result = await app_state(request).read(
        lambda con: state_query.list_rows(
            con, JOBS, session=_session(con, request, every=True), limit=None, detail=True
        )
    )
    for row in result.rows:
        if job_id in (row["job_id"], row["submission_id"]):
            return await rendered(row)
    return PlainTextResponse(f"Job {job_id} does not exist", status_code=404)


API_TYPES = ("imperative", "declarative")  # what Ray's route takes as ``api_type``


async def serve_applications(request: Request) -> Response:
    """Serve's state as the session's dashboard last gave it to raysight's poller (``ServeInstanceDetails``; Ray's
    empty one where Serve never ran), for `serve status -a` and `serve config -a`; ``api_type`` keeps the
    applications deployed so, as Ray's route does. Runtime envs' variables are kept as Ray gives them to its CLI; a
    browser's request gets their values redacted, as Ray's dashboard does."""
    api_type = (request.query_params.get("api_type") or "").lower()
    if api_type and api_type not in API_TYPES:
        raise BadQuery(f"Invalid 'api_type' value: {api_type!r}. Must be one of: {', '.join(API_TYPES)}")
    sample = await app_state(request).read(lambda con: serve_query.serve_sample(con, _session(con, request), None))
    details = sample["details"] or serve_query.NO_SERVE
    if api_type:
        apps = details["applications"]
        details = {**details, "applications": {k: a for k, a in apps.items() if a.get("source") == api_type}}
    return await rendered(serve_query.redacted(details) if from_browser(request.headers) else details)


READ_ONLY = (
    "raysight records Ray clusters and answers for them; it never submits, stops or deletes jobs or Serve "
    "applications. Send that to the cluster's own dashboard (its address: `ray status`, or the head's "
    "logs/dashboard.log)."
)


async def read_only(request: Request) -> Response:
    """Ray's job and Serve writes (submit, stop, delete, upload a package; deploy or delete Serve's applications):
    refused, saying where they belong."""
    return PlainTextResponse(READ_ONLY, status_code=405, headers={"Allow": "GET"})


routes = [  # at the root for the newest session, and mounted under /sessions/<name>/ by the app
    route(wire.RAY_VERSION, version, access=Access.READ, envelope=ray_error),
    route(wire.RAY_JOBS, jobs, access=Access.READ, envelope=ray_error),
    route(wire.RAY_JOBS, read_only, access=Access.READ, envelope=ray_error, methods=["POST"], bodies=None),
    route(wire.RAY_JOB_STOP, read_only, access=Access.READ, envelope=ray_error, methods=["POST"], bodies=None),
    route(wire.RAY_JOB, job, access=Access.READ, envelope=ray_error),
    route(wire.RAY_JOB, read_only, access=Access.READ, envelope=ray_error, methods=["DELETE"], bodies=None),
    route(wire.RAY_PACKAGE, read_only, access=Access.READ, envelope=ray_error, methods=["GET", "PUT"], bodies=None),
    route(wire.RAY_SERVE_VERSION, version, access=Access.READ, envelope=ray_error),
    route(wire.RAY_SERVE_APPLICATIONS, serve_applications, access=Access.READ, envelope=ray_error),
    route(
        wire.RAY_SERVE_APPLICATIONS,
        read_only,
        access=Access.READ,
        envelope=ray_error,
        methods=["PUT", "DELETE"],
        bodies=None,
    ),
    route(wire.RAY_SUMMARY, summarize, access=Access.READ, envelope=ray_error),
    route(wire.RAY_STATE, list_resource, access=Access.READ, envelope=ray_error),
]
