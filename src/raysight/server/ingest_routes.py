"""Ingest: Ray's aggregator batches, and from `raysight run` its driver's exit and Ray's aggregator metrics.
Acknowledged only once durable."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import Future
from typing import Any

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from raysight.config import INGEST_DEADLINE_S
from raysight.ingest.ray_metrics import parse_aggregator_metrics
from raysight.server.resends import digest
from raysight.server.state import app_state
from raysight.store.writer import QueueFull

RAY_METRICS_MAX_BODY = 1024 * 1024


class BodyTooLarge(Exception):
    pass


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing (before reading it whole) anything over ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def _error(status: int, message: str, **headers: str) -> JSONResponse:
    return JSONResponse({"ok": False, "error": message, "status": status}, status_code=status, headers=headers)


async def ray_events(request: Request) -> Response:
    """POST /ingest/ray-events?cluster=NAME: one JSON array of Ray events from a node's aggregator agent."""
    started = time.perf_counter()
    state = app_state(request)
    if not state.secrets.ingest_ok(request.query_params.get("key") or request.path_params.get("key")):
        state.metrics.rejected.labels("key").inc()
        return _error(401, "this ingest URL needs the server's ingest key (`raysight env` prints the URL)")
    try:
        body = await read_body(request, state.max_body)
    except BodyTooLarge:
        state.metrics.rejected.labels("too_large").inc()
        return _error(413, f"body over {state.max_body} bytes (raise --max-body)")
    except ClientDisconnect:
        return Response(status_code=499)
    key = digest(body, request.url.query)
    prior = state.resends.find(key)
    if prior is not None and prior[0] is None:
        state.metrics.resent(prior[1])
        state.writer.call(lambda store: store.count(received=prior[1], deduplicated=prior[1], resent_batches=1))
        return JSONResponse({"ok": True, "received": prior[1], "resend": True})
    if prior is None:
        try:
            events = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            state.metrics.rejected.labels("not_json").inc()
            return _error(400, f"body is not JSON: {exc}")
        if not isinstance(events, list):
            state.metrics.rejected.labels("not_array").inc()
            return _error(400, f"body is a JSON {type(events).__name__}, not an array of Ray events")
        if len(events) > state.max_events:
            state.metrics.rejected.labels("too_many_events").inc()
            return _error(413, f"{len(events)} events in one body, over {state.max_events} (raise --max-events)")
        received = len(events)
        del events  # parsed, a body takes up to ten times its size; only its length is needed from here
        try:
            future: Future[Any] = state.writer.submit(
                body, request.query_params.get("cluster") or None, request.query_params.get("run") or None, received
            )
        except QueueFull as exc:
            state.metrics.rejected.labels("busy").inc()
            return _error(503, f"busy: {exc}; Ray will resend", **{"Retry-After": "1"})
        state.resends.track(key, future, received)
    else:
        future, received = prior  # type: ignore[assignment]  # a pending first copy (find() says so)
    remaining = INGEST_DEADLINE_S - (time.perf_counter() - started)
    try:
        # shielded: a caller that gives up must not cancel the write (resends wait on the same future)
        await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), timeout=max(remaining, 0.01))
    except asyncio.TimeoutError:
        state.metrics.rejected.labels("deadline").inc()
        return _error(503, "not yet durable; Ray will resend and duplicates are ignored", **{"Retry-After": "1"})
    except OSError as exc:
        return _error(503, f"could not journal the batch ({exc}); Ray will resend", **{"Retry-After": "1"})
    state.metrics.latency.observe(time.perf_counter() - started)
    return JSONResponse({"ok": True, "received": received, "resend": prior is not None})


async def run_exit(request: Request) -> Response:
    """POST /ingest/agent/run-exit: {"run_id", "driver_pid", "exit_code", "ended_ns"} from `raysight run`."""
    state = app_state(request)
    if not state.secrets.ingest_ok(request.query_params.get("key")):
        return _error(401, "this ingest URL needs the server's ingest key")
    try:
        body = orjson.loads(await read_body(request, 64 * 1024))
        run_id, pid, code, ended = body["run_id"], body.get("driver_pid"), body["exit_code"], body["ended_ns"]
        if not (isinstance(run_id, str) and run_id and isinstance(code, int) and isinstance(ended, int)):
            raise TypeError("run_id must be a string, exit_code and ended_ns integers")
        if pid is not None and not isinstance(pid, int):
            raise TypeError("driver_pid must be an integer")
    except (BodyTooLarge, orjson.JSONDecodeError, KeyError, TypeError) as exc:
        return _error(400, f"bad run exit: {exc}")
    future = state.writer.call(lambda store: store.record_run_exit(run_id, pid, code, ended))
    await asyncio.wrap_future(future)
    return JSONResponse({"ok": True})


async def ray_metrics(request: Request) -> Response:
    """POST /ingest/agent/ray-metrics: a node's Prometheus text (its aggregator's lines suffice) from `raysight run`."""
    state = app_state(request)
    if not state.secrets.ingest_ok(request.query_params.get("key")):
        return _error(401, "this ingest URL needs the server's ingest key")
    try:
        samples = parse_aggregator_metrics((await read_body(request, RAY_METRICS_MAX_BODY)).decode())
    except BodyTooLarge:
        return _error(413, f"body over {RAY_METRICS_MAX_BODY} bytes")
    except ValueError as exc:  # not UTF-8, or not Prometheus text
        return _error(400, f"bad Ray metrics: {exc}")
    written = await asyncio.wrap_future(state.writer.call(lambda store: store.record_ray_metrics(samples)))
    return JSONResponse({"ok": True, "samples": written})


routes = [
    Route("/ingest/ray-events", ray_events, methods=["POST"]),
    Route("/ingest/ray-events/{key}", ray_events, methods=["POST"]),
    Route("/ingest/agent/run-exit", run_exit, methods=["POST"]),
    Route("/ingest/agent/ray-metrics", ray_metrics, methods=["POST"]),
]
