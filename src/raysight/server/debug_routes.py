"""The debugger's relay: a paused worker dials out to this server (``DEBUG_PAUSED``, the ingest key's) and a client
attaches to its pause (``DEBUG_ATTACH``, the admin token's, on loopback too), each over a WebSocket on the server's
one port; the server passes what the client types to the worker's debugger and what the debugger writes back. No
port of the worker's node is opened. Both are refused unless the server allows debugging (``--allow-debug``).

One client drives a pause at a time (a second is refused, told who holds it); a client that goes away leaves the
worker paused, for another to attach; the pause ends when the worker's debugger says so (continued, quit, timed
out) or its connection is lost. Every pause and every attach is recorded (``signals/debug_pauses/``).
"""

from __future__ import annotations

import contextlib
import secrets
import time
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.websockets import WebSocket, WebSocketDisconnect

from raysight import wire
from raysight.errors import BadIngest
from raysight.server.answers import raysight_error, read_json
from raysight.server.app_state import app_state
from raysight.server.debug_relay import LivePause
from raysight.server.params import bool_param
from raysight.server.routing import Access, Reach, route, socket
from raysight.signals.debug_pauses import apply, pauses_query
from raysight.signals.debug_pauses.parse import parse_pause
from raysight.store import sessions_query

MAX_INPUT = 64 * 1024  # characters of one message a client types
WORKER_GONE = "worker gone"  # how a pause ends whose worker's connection was lost before it said
# WebSocket close codes (4000-4999: the application's), as an HTTP status would say it
CLOSE_BAD, CLOSE_NOT_FOUND, CLOSE_HELD = 4400, 4404, 4409


def _message(text: str | bytes) -> dict[str, Any]:
    """A socket's JSON object; BadIngest for anything else."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise BadIngest("a debugger message must be a JSON object") from None
    if not isinstance(value, dict):
        raise BadIngest("a debugger message must be a JSON object")
    return value


async def _frame(socket_: WebSocket) -> bytes | str:
    """The next message's data: text (a message, JSON) or bytes (a DAP tunnel's); WebSocketDisconnect once the peer
    is gone."""
    message = await socket_.receive()
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(message.get("code", 1000))
    text: str | None = message.get("text")
    if text is not None:
        return text
    data: bytes = message.get("bytes") or b""
    return data


async def _refuse(socket_: WebSocket, code: int, why: str) -> None:
    await socket_.send_text(orjson.dumps({wire.REFUSED: why}).decode())
    await socket_.close(code)


async def paused_worker(worker: WebSocket) -> None:
    """``DEBUG_PAUSED``: a paused worker's connection, for as long as its pause lasts. Its first message is its pause
    (``wire.Pause``), answered with the pause's ID; then what its debugger writes, and at last how the pause ended."""
    state = app_state(worker)
    await worker.accept()
    try:
        row = parse_pause(await _frame(worker))
    except WebSocketDisconnect:
        return
    except BadIngest as exc:
        await _refuse(worker, CLOSE_BAD, f"bad pause report: {exc}")
        return
    pause_id = secrets.token_hex(8)
    await state.write(lambda tx: apply.paused(tx, pause_id, row))
    live = state.pauses.live[pause_id] = LivePause(pause_id, row, worker)
    how = WORKER_GONE
    try:
        await worker.send_text(orjson.dumps({wire.PAUSE_ID: pause_id}).decode())
        while True:
            data = await _frame(worker)
            if isinstance(data, bytes):
                await live.from_debugpy(data)
                continue
            message = _message(data)
            if isinstance(text := message.get(wire.OUTPUT), str):
                await live.output(text)
            elif message.get(wire.READY) is True:
                await live.ready()
            elif isinstance(ended := message.get(wire.ENDED), str):
                how = ended[:64]
                break
    except (WebSocketDisconnect, BadIngest):
        pass
    finally:  # recorded before anyone is told; none attaches meanwhile
        async with live.lock:
            live.over = True
        try:
            await state.write(lambda tx: apply.ended(tx, pause_id, how, time.time_ns()))
        finally:
            del state.pauses.live[pause_id]
            await live.end(how)
            with contextlib.suppress(Exception):
                await worker.close()


async def attach(client: WebSocket) -> None:
    """``DEBUG_ATTACH``: a client driving a live pause: what the debugger wrote so far, then what it writes as the
    client types (``{"input": line}``), until the pause ends or the client goes. A second client is refused, told who
    holds the pause. ``?dap=true``: a DAP client's tunnel, whose bytes go to the worker's debugpy and back."""
    state = app_state(client)
    pause_id = client.path_params["pause_id"]
    dap = client.query_params.get("dap", "").lower() in ("true", "1", "yes")
    await client.accept()
    live = state.pauses.live.get(pause_id)
    if live is None or live.over:
        await _refuse(client, CLOSE_NOT_FOUND, f"no live pause {pause_id!r}: `raysight debug` lists them")
        return
    address = f"{client.client.host}:{client.client.port}" if client.client else "unknown"
    who = client.headers.get(wire.CLIENT_HEADER) or "unnamed client"
    holder = f"{who} from {address} since {time.strftime('%H:%M:%S')}"
    if not await live.attach(client, holder, dap):
        await _refuse(client, CLOSE_HELD, f"pause {pause_id} is driven by {live.holder}: wait for it to detach")
        return
    attached_ns = time.time_ns()
    await state.write(lambda tx: apply.attached(tx, pause_id, live.row["session"], who, address, attached_ns))
    if live.over:  # the pause ended meanwhile, its end recorded (perhaps) before this attach: detached too
        await state.write(lambda tx: apply.detached(tx, pause_id, time.time_ns()))
    try:
        while True:
            data = await _frame(client)
            if isinstance(data, bytes):
                await live.to_debugpy(data)
                continue
            text = _message(data).get(wire.INPUT)
            if isinstance(text, str) and pause_id in state.pauses.live:
                await live.type(text[:MAX_INPUT])
    except (WebSocketDisconnect, BadIngest):
        pass
    finally:
        if await live.detach(client) and pause_id in state.pauses.live:
            await state.write(lambda tx: apply.detached(tx, pause_id, time.time_ns()))


async def pauses(request: Request) -> Response:
    """GET /api/raysight/debug/pauses?session=&all=: the live pauses (of every session, or ``session``'s), each with
    who drives it, then the workers Ray's own debugger holds paused (``kind`` ray, at their ``debugger`` address);
    ``all=true``: every pause of the session (default the newest) raysight relayed, with how each ended."""
    state = app_state(request)
    session = request.query_params.get("session") or None
    if bool_param(request.query_params, "all"):
        return await read_json(
            state, lambda con: pauses_query.session_pauses(con, sessions_query.recorded_session(con, session))
        )

    def live(con: Any) -> list[dict[str, Any]]:
        named = sessions_query.resolve_session(con, session) if session else None  # (by name or label)
        rows = pauses_query.open_pauses(con, named)
        relay = state.pauses
        ours = [{**row, "holder": relay.holder(row["pause_id"])} for row in rows if row["pause_id"] in relay.live]
        return ours + pauses_query.ray_paused(con, named, time.time_ns())

    return await read_json(state, live)


async def pause(request: Request) -> Response:
    """GET /api/raysight/debug/pauses/{pause_id}: one pause whole (its stack and locals as reported, its attaches);
    the locals to the admin token's holder alone, beyond loopback."""
    state = app_state(request)
    pause_id = request.path_params["pause_id"]

    shows_locals = state.secrets.admin_ok(request.headers.get("authorization"))

    def read(con: Any) -> dict[str, Any]:
        whole = pauses_query.pause(con, pause_id)
        if not shows_locals:  # (values of the program's: secrets, maybe; beyond loopback, the admin token's)
            whole["stack"] = [{**frame, "locals": {}} for frame in whole["stack"]]
            whole["locals_hidden"] = True
        return {**whole, "live": pause_id in state.pauses.live}

    return await read_json(state, read)


routes = [
    socket(wire.DEBUG_PAUSED, paused_worker, access=Access.INGEST, reach=Reach.DEBUG),
    socket(wire.DEBUG_ATTACH, attach, access=Access.REACH, reach=Reach.DEBUG),
    route(wire.DEBUG_PAUSES, pauses, access=Access.READ, envelope=raysight_error, params=("session", "all")),
    route(wire.DEBUG_PAUSE, pause, access=Access.READ, envelope=raysight_error, params=()),
]
