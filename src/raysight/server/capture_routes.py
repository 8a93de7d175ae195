"""On-demand profiles of live Ray processes, run by the agent of their node: a user asks (``CAPTURES``, the admin
token's, on loopback too), the agent long-polls for what its nodes are asked (``AGENT_CAPTURES``, the ingest key's),
runs py-spy or memray, and sends back what it found (``AGENT_CAPTURE``); the user reads it (``CAPTURE``). All are
refused unless the server allows profiling (``--allow-profiling``). Every request is recorded, with who made it and
how it ended (``signals/profile_captures/``)."""

from __future__ import annotations

import secrets
import time
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from raysight import flame, wire
from raysight.errors import BadIngest, BadQuery, Conflict, NotFound
from raysight.ingest.fields import hex_id_field
from raysight.server.answers import raysight_error, read_json
from raysight.server.app_state import AppState, app_state
from raysight.server.ingest_routes import read_body
from raysight.server.params import id_param
from raysight.server.routing import Access, Reach, route
from raysight.signals.profile_captures import apply, captures_query
from raysight.signals.profile_captures.parse import MAX_RESULT, Result, parse_asked, parse_result
from raysight.store.tx import Tx

MAX_ASK = 4096  # bytes of a request
LONGEST_POLL_S = 20.0
MAX_NODES = 64  # node IDs one agent polls for


async def _expire(state: AppState) -> None:
    """Fail, saying why, the requests no agent took or answered in time."""
    expired, now = state.captures.expired(), time.time_ns()

    def failed(tx: Tx) -> None:
        for capture_id, why in expired:
            apply.finished(tx, capture_id, Result(why, None, None, None), now)

    if expired:
        await state.write(failed)


async def ask(request: Request) -> Response:
    """POST /api/raysight/profiles: an on-demand profile of a live process (``wire.CaptureAsked``): recorded, queued
    for its node's agent, and answered at once with its ID and where it runs; ``GET CAPTURE`` follows it."""
    state = app_state(request)
    try:
        asked = parse_asked(await read_body(request, MAX_ASK))
    except BadIngest as exc:
        raise BadQuery(f"bad profile request: {exc}") from None
    found = await state.read(lambda con: captures_query.target(con, asked))
    await _expire(state)
    state.captures.check_room()  # (before it is recorded: a request refused is no request)
    capture_id = secrets.token_hex(8)
    address = f"{request.client.host}:{request.client.port}" if request.client else "unknown"
    row: dict[str, Any] = {
        "capture_id": capture_id,
        "session": found.session,
        "kind": asked.kind,
        "task_id": found.task_id,
        "attempt": found.attempt,
        "actor_id": found.actor_id,
        "node_id": found.node_id,
        "pid": found.pid,
        "duration_s": asked.duration_s,
        "native": asked.native,
        "leaks": asked.leaks,
        "client": (request.headers.get(wire.CLIENT_HEADER) or "unnamed client")[:256],
        "address": address,
        "requested_ns": time.time_ns(),
    }
    await state.write(lambda tx: apply.asked(tx, row))
    order: wire.CaptureOrder = {
        "capture_id": capture_id,
        "kind": asked.kind,
        "pid": found.pid,
        "duration_s": asked.duration_s,
        "native": asked.native,
        "leaks": asked.leaks,
    }
    await state.captures.put(found.node_id, order)
    return JSONResponse({**row, "status": "queued"}, status_code=202)


async def listed(request: Request) -> Response:
    """GET /api/raysight/profiles?session=&task=&actor=: the on-demand profiles asked of a session (the newest, unless
    named), of one task or actor where given, newest first."""
    state = app_state(request)
    await _expire(state)
    params = request.query_params
    task = id_param(params, "task", 48, "`raysight list tasks`")
    actor = id_param(params, "actor", 32, "`raysight list actors`")
    session = params.get("session") or None
    return await read_json(state, lambda con: captures_query.captures(con, session, task, actor))


async def one(request: Request) -> Response:
    """GET /api/raysight/profiles/{capture_id}?format=json|svg: one whole: how it went, and what its agent found;
    ``svg``: its stacks as a flame graph."""
    state = app_state(request)
    await _expire(state)
    capture_id, fmt = request.path_params["capture_id"], request.query_params.get("format", "json")
    if fmt not in ("json", "svg"):
        raise BadQuery("format must be json or svg")
    if fmt == "json":
        return await read_json(state, lambda con: captures_query.capture(con, capture_id))
    found = await state.read(lambda con: captures_query.capture(con, capture_id))
    if found["status"] != "done":
        raise Conflict(f"on-demand profile {capture_id} is {found['status']}: it has no stacks to draw")
    return Response(await run_in_threadpool(flame.capture_svg, found), media_type="image/svg+xml")


async def agent_take(request: Request) -> Response:
    """GET /ingest/agent/captures?node=ID…&wait=S: what the agent of these nodes is to run (``wire.CaptureOrder``s),
    as soon as any is asked within ``wait`` seconds (at most 20; else none), each then running."""
    state = app_state(request)
    nodes = request.query_params.getlist("node")
    if not 0 < len(nodes) <= MAX_NODES:
        raise BadQuery(f"name the agent's nodes: 1 to {MAX_NODES} node= parameters")
    try:
        checked = [hex_id_field(node, "node") or "" for node in nodes]
        wait_s = float(request.query_params.get("wait", "0"))
    except (BadIngest, ValueError) as exc:
        raise BadQuery(f"bad poll: {exc}") from None
    if not 0 <= wait_s <= LONGEST_POLL_S:
        raise BadQuery(f"wait must be 0 to {LONGEST_POLL_S:g} seconds")
    await _expire(state)
    orders = await state.captures.take(checked, wait_s)
    if orders and await request.is_disconnected():  # (an agent that stopped while it waited: for the next one)
        state.captures.give_back(orders)
        orders = []
    if orders:
        ids, taken_ns = [order["capture_id"] for order in orders], time.time_ns()
        await state.write(lambda tx: apply.taken(tx, ids, taken_ns))
    return JSONResponse({"captures": orders})


async def agent_result(request: Request) -> Response:
    """POST /ingest/agent/captures/{capture_id}: what the agent found (``wire.CaptureResult``), or why it could not;
    404 for a request not running (never asked, already answered, or past its deadline)."""
    state = app_state(request)
    capture_id = request.path_params["capture_id"]
    result = await run_in_threadpool(parse_result, await read_body(request, MAX_RESULT))
    if not state.captures.finish(capture_id):
        raise NotFound(f"no on-demand profile {capture_id!r} is running: it was answered, or ran past its deadline")
    finished_ns = time.time_ns()
    await state.write(lambda tx: apply.finished(tx, capture_id, result, finished_ns))
    return JSONResponse({"ok": True})


routes = [
    route(
        wire.CAPTURES,
        ask,
        access=Access.REACH,
        envelope=raysight_error,
        methods=["POST"],
        reach=Reach.PROFILE,
        params=(),
    ),
    route(
        wire.CAPTURES,
        listed,
        access=Access.READ,
        envelope=raysight_error,
        methods=["GET"],
        params=("session", "task", "actor"),
    ),
    route(wire.CAPTURE, one, access=Access.READ, envelope=raysight_error, methods=["GET"], params=("format",)),
    route(
        wire.AGENT_CAPTURES,
        agent_take,
        access=Access.INGEST,
        envelope=raysight_error,
        methods=["GET"],
        reach=Reach.PROFILE,
    ),
    route(
        wire.AGENT_CAPTURE,
        agent_result,
        access=Access.INGEST,
        envelope=raysight_error,
        methods=["POST"],
        reach=Reach.PROFILE,
    ),
]
