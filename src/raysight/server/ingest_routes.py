"""Ingest: Ray's aggregator batches; from node agents their logs and what they saw of their node's Ray processes;
from `raysight run` its driver's exit and Ray's aggregator metrics. Acknowledged only once durable."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import Future
from typing import Any, TypeVar

import orjson
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from raysight import wire
from raysight.config import INGEST_DEADLINE_S
from raysight.errors import BadQuery, BodyTooLarge, TooMany, Unavailable, UnsupportedEncoding
from raysight.ingest import agent_logs as agent_logs_batch
from raysight.ingest import node_life, otlp, otlp_logs, prom_text
from raysight.ingest import ray_state as ray_state_poll
from raysight.ingest.batch_shape import NotAnArray, array_length
from raysight.ingest.ids import SESSION_NAME
from raysight.ingest.ray_metrics import parse_aggregator_metrics
from raysight.server.guard import media_type
from raysight.server.params import INT64_MAX
from raysight.server.resends import digest
from raysight.server.state import app_state
from raysight.store.journal import AGENT_LOGS, SPANS
from raysight.store.queries import latest_session
from raysight.store.store import MAX_LOG_LINES, Store
from raysight.store.writer import CONTENT_ERRORS, QueueFull

log = logging.getLogger("raysight.ingest")
T = TypeVar("T")

RAY_METRICS_MAX_BODY = 1024 * 1024
RUN_EXIT_MAX_BODY = 64 * 1024
NODE_LIFE_MAX_BODY = 4 * 1024 * 1024
RAY_STATE_MAX_BODY = 64 * 1024 * 1024  # a poll of every resource at Ray's list limits
RUN_ID_MAX = 128
JOURNALLED_PER_BODY = 4  # what an export may take in the journal (its rows as JSON), in bodies of the largest size
RETRY = {"Retry-After": "1"}
KEY_HEADER = "x-raysight-ingest-key"
DROPPED_HEADER = "x-raysight-spans-dropped"  # what raysight's instrumentation dropped before this export


@contextlib.asynccontextmanager
async def held_body(request: Request, limit: int) -> AsyncIterator[bytes]:
    """The request body, held against the server's body budget until the block ends; refused before it is read
    whole when over ``limit`` bytes (BodyTooLarge) or over what the budget has left (Unavailable: retry)."""
    budget = app_state(request).bodies
    declared = request.headers.get("content-length")
    taken = int(declared) if declared is not None and declared.isdigit() else 0
    if taken > limit:
        raise BodyTooLarge(f"body over {limit} bytes")
    budget.take(taken)
    try:
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge(f"body over {limit} bytes")
            if size > taken:  # sent without a length, or longer than it said
                budget.take(size - taken)
                taken = size
            chunks.append(chunk)
        yield b"".join(chunks)
    finally:
        budget.give(taken)


async def read_body(request: Request, limit: int) -> bytes:
    """A small body (the agent routes'), read whole; held against the budget only while it is read."""
    async with held_body(request, limit) as body:
        return body


def _error(status: int, message: str, **headers: str) -> JSONResponse:
    return JSONResponse({"ok": False, "error": message, "status": status}, status_code=status, headers=headers)


async def ray_events(request: Request) -> Response:
    """POST /ingest/ray-events?cluster=NAME: one JSON array of Ray events from a node's aggregator agent."""
    started = time.perf_counter()
    if (refused := _key_refused(request)) is not None:
        return refused
    return await _with_body(request, lambda body: _journal(request, body, started), "Ray")


async def _with_body(request: Request, handle: Callable[[bytes], Awaitable[Response]], sender: str) -> Response:
    """``handle``'s answer to the request's body, which is held against the server's body budget meanwhile; 413 for
    a body over --max-body, 503 (``sender`` resends) when the budget is spent."""
    state = app_state(request)
    try:
        async with held_body(request, state.max_body) as body:
            return await handle(body)
    except BodyTooLarge as exc:
        state.metrics.rejected.labels("too_large").inc()
        return _error(413, f"{exc} (raise --max-body)")
    except Unavailable as exc:
        state.metrics.rejected.labels("bodies").inc()
        return _error(503, f"{exc}; {sender} will resend", **RETRY)
    except ClientDisconnect:
        return Response(status_code=499)


async def _journal(request: Request, body: bytes, started: float) -> Response:
    """Acknowledge a Ray batch once it is durable in the journal (or its first copy is), or say why not."""
    state = app_state(request)
    key = digest(body, request.url.query)
    prior = state.resends.find(key)
    if prior is not None and prior[0] is None:
        state.metrics.resent(prior[1])
        state.writer.call(lambda store: store.count(received=prior[1], deduplicated=prior[1], resent_batches=1))
        return JSONResponse({"ok": True, "received": prior[1], "resend": True})
    if prior is None:
        try:
            received = array_length(body)
        except NotAnArray as exc:
            state.metrics.rejected.labels("not_array").inc()
            return _error(400, str(exc))
        except ValueError as exc:
            state.metrics.rejected.labels("not_json").inc()
            return _error(400, f"body is not JSON: {exc}")
        if received > state.max_events:
            state.metrics.rejected.labels("too_many_events").inc()
            return _error(413, f"{received} events in one body, over {state.max_events} (raise --max-events)")
        try:
            future: Future[Any] = state.writer.submit(
                body, request.query_params.get("cluster") or None, request.query_params.get("run") or None, received
            )
        except QueueFull as exc:
            state.metrics.rejected.labels("busy").inc()
            return _error(503, f"busy: {exc}; Ray will resend", **RETRY)
        state.resends.track(key, future, received)
    else:
        future, received = prior  # type: ignore[assignment]  # a pending first copy (find() says so)
    if (failed := await _until_durable(request, future, started, "Ray")) is not None:
        return failed
    state.metrics.latency.observe(time.perf_counter() - started)
    return JSONResponse({"ok": True, "received": received, "resend": prior is not None})


async def _until_durable(request: Request, future: Future[Any], started: float, sender: str) -> Response | None:
    """None once the journalled body is durable, else the 503 that makes ``sender`` send it again."""
    remaining = INGEST_DEADLINE_S - (time.perf_counter() - started)
    try:
        # shielded: a caller that gives up must not cancel the write (resends wait on the same future)
        await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), timeout=max(remaining, 0.01))
    except asyncio.TimeoutError:
        app_state(request).metrics.rejected.labels("deadline").inc()
        return _error(503, f"not yet durable; {sender} will resend and duplicates are ignored", **RETRY)
    except OSError as exc:
        return _error(503, f"could not journal the batch ({exc}); {sender} will resend", **RETRY)
    return None


async def agent_logs(request: Request) -> Response:
    """POST /ingest/agent/logs: a node agent's batch of log lines (JSON, gzip-compressed or not), acknowledged once
    durable; a resent batch's lines are stored once."""
    started = time.perf_counter()
    if (refused := _key_refused(request)) is not None:
        return refused
    return await _with_body(request, lambda body: _journal_logs(request, body, started), "the agent")


async def _journal_logs(request: Request, body: bytes, started: float) -> Response:
    state = app_state(request)
    try:  # (what is journalled: the JSON)
        body, batch = await _off_loop(request, body, lambda data: (data, agent_logs_batch.parse(data, MAX_LOG_LINES)))
    except agent_logs_batch.BadBatch as exc:
        state.metrics.rejected.labels("bad_logs").inc()
        return _error(400, f"bad batch of logs: {exc}")
    try:
        future = state.writer.submit(body, events=batch.line_count, kind=AGENT_LOGS)
    except QueueFull as exc:
        state.metrics.rejected.labels("busy").inc()
        return _error(503, f"busy: {exc}; the agent will resend", **RETRY)
    if (failed := await _until_durable(request, future, started, "the agent")) is not None:
        return failed
    return JSONResponse({"ok": True, "lines": batch.line_count})


async def otlp_traces(request: Request) -> Response:
    """POST /v1/traces (or /ingest/otlp/{key}/v1/traces): an OTLP/HTTP trace export, protobuf or JSON, gzipped or
    not, answered once its spans are durable (a span the store cannot keep is counted in the partial success), and
    queued to be sent on where the server forwards spans."""
    return await _otlp(request, _journal_spans)


async def otlp_log_records(request: Request) -> Response:
    """POST /v1/logs (or /ingest/otlp/{key}/v1/logs): an OTLP/HTTP log export, protobuf or JSON, gzipped or not,
    stored as lines (``ingest/otlp_logs.py``: a file per resource, in its ``ray.session_name`` or the newest session)
    and answered once durable; a record the store cannot keep is counted in the partial success."""
    return await _otlp(request, _journal_log_records)


OtlpHandler = Callable[[Request, bytes, bool], Awaitable[Response]]


async def _otlp(request: Request, handle: OtlpHandler) -> Response:
    """An OTLP/HTTP export: the key checked, the body read, then ``handle(request, body, json)``, which inflates and
    decodes it off the event loop (``_off_loop``), then journals it; a body that is not an export of the kind gets
    400, one of too many items 413. (The ingest deadline runs from when it is decoded: an export of tens of thousands
    of items, answered 503 after being kept, would be sent again.)"""
    if (refused := _key_refused(request)) is not None:
        return refused
    state = app_state(request)
    json = media_type(request.headers.get("content-type")) == "application/json"

    async def handled(body: bytes) -> Response:
        try:
            return await handle(request, body, json)
        except (otlp.BadExport, agent_logs_batch.BadBatch) as exc:
            state.metrics.rejected.labels("bad_otlp").inc()
            return _error(400, str(exc))
        except TooMany as exc:
            state.metrics.rejected.labels("too_many_items").inc()
            return _error(413, str(exc))

    return await _with_body(request, handled, "the exporter")


async def _off_loop(request: Request, body: bytes, parse: Callable[[bytes], T]) -> T:
    """``parse`` of the inflated ``body``, both run on a thread: decoding an export of tens of thousands of items
    takes longer than the event loop may be held."""
    encoding, limit = _encoding(request), app_state(request).max_body
    return await run_in_threadpool(lambda: parse(_decoded(encoding, body, limit)))


async def _journal_spans(request: Request, body: bytes, json: bool) -> Response:
    state = app_state(request)
    export, body = await _off_loop(request, body, lambda data: (otlp.parse(data, json), data))
    started = time.perf_counter()
    if state.forwarder is not None and export.spans:
        forwarded = state.forwarder.put(body, "application/json" if json else "application/x-protobuf")
        if not forwarded and not state.forwarding.store:
            return _error(503, "busy: the spans to forward wait in a full queue; the exporter will resend", **RETRY)
    if export.spans:  # a server that keeps no span still keeps how the task attempts they are of ended
        kept = await run_in_threadpool(export.journalled, state.forwarding.store)
        if kept is not None and (failed := await _durable(request, kept, len(export.spans), SPANS, started)):
            return failed
    dropped = request.headers.get(DROPPED_HEADER, "0")
    dropped_at_source = int(dropped) if dropped.isdigit() and len(dropped) < 10 else 0
    if export.rejected or dropped_at_source:
        state.writer.call(
            lambda store: store.count(spans_rejected=export.rejected, spans_dropped_at_source=dropped_at_source)
        )
    return _otlp_answer(otlp.response(export.rejected, export.reason, json), json)


async def _journal_log_records(request: Request, body: bytes, json: bool) -> Response:
    session, now_ns = await app_state(request).read(latest_session), time.time_ns()
    export = await _off_loop(request, body, lambda data: otlp_logs.parse(data, json, session, now_ns, MAX_LOG_LINES))
    started = time.perf_counter()
    for batch in export.batches:
        lines = sum(len(file["texts"]) for file in batch["files"])
        journalled = await run_in_threadpool(orjson.dumps, batch)
        if (failed := await _durable(request, journalled, lines, AGENT_LOGS, started)) is not None:
            return failed
    return _otlp_answer(otlp_logs.response(export.rejected, export.reason, json), json)


async def _durable(request: Request, body: bytes, events: int, kind: str, started: float) -> Response | None:
    """Journal an exporter's ``body`` (what its export became): None once it is durable, else the error to answer
    (413 when it would take more than :data:`JOURNALLED_PER_BODY` bodies of the largest size)."""
    state = app_state(request)
    if len(body) > (most := JOURNALLED_PER_BODY * state.max_body):
        state.metrics.rejected.labels("too_large").inc()
        return _error(413, f"the export's items take {len(body):,} bytes to keep, over {most:,}: send smaller batches")
    try:
        future = state.writer.submit(body, events=events, kind=kind)
    except QueueFull as exc:
        state.metrics.rejected.labels("busy").inc()
        return _error(503, f"busy: {exc}; the exporter will resend", **RETRY)
    return await _until_durable(request, future, started, "the exporter")


def _otlp_answer(answer: bytes, json: bool) -> Response:
    return Response(answer, media_type="application/json" if json else "application/x-protobuf")


WBITS = {"gzip": 31, "deflate": 15}  # zlib's names for the two formats of HTTP's Content-Encoding


def _encoding(request: Request) -> str:
    """The body's Content-Encoding (gzip, deflate or identity); UnsupportedEncoding (415) for another."""
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding != "identity" and encoding not in WBITS:
        raise UnsupportedEncoding(f"Content-Encoding {encoding!r} is not supported: send gzip, deflate or none")
    return encoding


def _decoded(encoding: str, body: bytes, limit: int) -> bytes:
    """The body as it was before its ``encoding``, every member of a gzip body (RFC 1952 allows several, and
    readers join them): refused (BodyTooLarge) past ``limit`` bytes inflated, BadBatch where it is not whole and
    in that format."""
    if encoding == "identity":
        return body
    data, rest = bytearray(), body
    while rest:
        inflate = zlib.decompressobj(wbits=WBITS[encoding])
        try:
            data += inflate.decompress(rest, limit + 1 - len(data))
        except zlib.error as exc:
            raise agent_logs_batch.BadBatch(f"body is not {encoding}: {exc}") from None
        if len(data) > limit or inflate.unconsumed_tail:
            raise BodyTooLarge(f"body over {limit} bytes decompressed")
        if not inflate.eof:
            raise agent_logs_batch.BadBatch(f"body is not whole {encoding}: it ends within its stream")
        rest = inflate.unused_data
        if rest and encoding != "gzip":
            raise agent_logs_batch.BadBatch(f"body is not {encoding}: {len(rest)} bytes follow its stream")
    return bytes(data)


def _int_field(value: Any, name: str, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:  # `true` is no exit code
        raise BadQuery(f"bad run exit: {name} must be an integer from {low} to {high}, not {str(value)[:40]}")
    return value


def parse_run_exit(body: bytes) -> tuple[str, int | None, int, int, str | None]:
    """A run exit's run_id, driver_pid, exit_code, ended_ns (in the ranges the store keeps: INTEGER, BIGINT) and the
    session its driver joined (optional: one `raysight run` did not start)."""
    try:
        fields = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadQuery(f"bad run exit: body is not JSON: {exc}") from None
    if not isinstance(fields, dict):
        raise BadQuery('bad run exit: the body must be a JSON object {"run_id", "driver_pid", "exit_code", "ended_ns"}')
    exit_ = wire.shaped(fields, wire.RunExit)
    run_id = exit_["run_id"]
    if not (isinstance(run_id, str) and 0 < len(run_id) <= RUN_ID_MAX):
        raise BadQuery(f"bad run exit: run_id must be a string of 1 to {RUN_ID_MAX} characters")
    pid = None if exit_["driver_pid"] is None else _int_field(exit_["driver_pid"], "driver_pid", 0, INT64_MAX)
    code = _int_field(exit_["exit_code"], "exit_code", -(2**31), 2**31 - 1)
    session = exit_["session"]
    if session is not None and not (isinstance(session, str) and SESSION_NAME.fullmatch(session)):
        raise BadQuery("bad run exit: session must be the name of a Ray session (session_…), or null")
    return run_id, pid, code, _int_field(exit_["ended_ns"], "ended_ns", 0, INT64_MAX), session


def _key_refused(request: Request) -> Response | None:
    """401 unless the request carries the server's ingest key: in its URL (``?key=``, or in the path for Ray's
    aggregator and OTLP exporters, which append their own path), or in an ``X-Raysight-Ingest-Key`` header."""
    state = app_state(request)
    key = request.query_params.get("key") or request.path_params.get("key") or request.headers.get(KEY_HEADER)
    if state.secrets.ingest_ok(key):
        return None
    state.metrics.rejected.labels("key").inc()
    return _error(401, "this ingest URL needs the server's ingest key (`raysight env` prints the URL)")


async def run_exit(request: Request) -> Response:
    """POST /ingest/agent/run-exit: {"run_id", "driver_pid", "exit_code", "ended_ns", "session"} from `raysight run`."""
    if (refused := _key_refused(request)) is not None:
        return refused
    exit_ = parse_run_exit(await read_body(request, RUN_EXIT_MAX_BODY))
    return await _record(request, "the run exit", lambda s: s.record_run_exit(*exit_), lambda _: {})


async def node_life_sightings(request: Request) -> Response:
    """POST /ingest/agent/node-life: what a node agent saw of its Ray processes (``ingest/node_life.py``)."""
    if (refused := _key_refused(request)) is not None:
        return refused
    try:
        host, sightings = await run_in_threadpool(node_life.parse, await read_body(request, NODE_LIFE_MAX_BODY))
    except agent_logs_batch.BadBatch as exc:
        app_state(request).metrics.rejected.labels("bad_node_life").inc()
        return _error(400, f"bad node sightings: {exc}")
    return await _record(
        request, "the node sightings", lambda s: s.record_node_life(host, sightings), lambda n: {"changed": n}
    )


async def _record(
    request: Request, what: str, write: Callable[[Store], T] | Future[T], answer: Callable[[T], dict[str, Any]]
) -> Response:
    """Have the writer run ``write`` (or await its future, when the writer was handed it so) and answer
    ``{"ok": true, **answer(result)}``, or 503 (the sender retries) when it cannot be done within the ingest deadline
    (folding is behind or stalled) or the store fails for a reason not the sender's. A write that timed out is
    cancelled if it has not started, else completes: each must be harmless twice."""
    future = write if isinstance(write, Future) else app_state(request).writer.call(write)
    try:
        result = await asyncio.wait_for(asyncio.wrap_future(future), timeout=INGEST_DEADLINE_S)
    except asyncio.TimeoutError:
        return _error(
            503, f"busy: could not record {what} in {INGEST_DEADLINE_S} s (folding is behind); retry", **RETRY
        )
    except CONTENT_ERRORS as exc:  # validated, so this is unexpected; but retrying cannot help
        log.error("the store refused %s", what, exc_info=exc)
        return _error(400, f"the store refused {what} ({type(exc).__name__}); the server's log says more")
    except Exception as exc:  # noqa: BLE001 (environmental, or not foreseen: may pass on a retry)
        log.error("could not record %s", what, exc_info=exc)
        return _error(503, f"could not record {what} ({type(exc).__name__}); retry", **RETRY)
    return JSONResponse({"ok": True, **answer(result)})


async def ray_state(request: Request) -> Response:
    """POST /ingest/agent/ray-state: what a poll of a live cluster's dashboard found (``ingest/ray_state.py``)."""
    if (refused := _key_refused(request)) is not None:
        return refused
    try:
        poll = await run_in_threadpool(ray_state_poll.parse, await read_body(request, RAY_STATE_MAX_BODY))  # (64 MiB)
    except agent_logs_batch.BadBatch as exc:
        app_state(request).metrics.rejected.labels("bad_ray_state").inc()
        return _error(400, f"bad poll: {exc}")
    return await _record(request, "the poll", lambda s: s.record_poll(poll), lambda n: {"rows": n})


async def metrics_scrape(request: Request) -> Response:
    """POST /ingest/agent/metrics: one scrape of a Prometheus target (``ingest/prom_text.py``), from an agent: parsed
    and checked against the bounds on a thread (a page of 50,000 lines takes ~0.1 s), refused with 400 (a line past
    them) or 413 (too many lines) before the writer sees it."""
    if (refused := _key_refused(request)) is not None:
        return refused
    state = app_state(request)
    body = await read_body(request, prom_text.MAX_BODY)
    try:
        scrape = await run_in_threadpool(prom_text.parse, body)
    except agent_logs_batch.BadBatch as exc:
        state.metrics.rejected.labels("bad_scrape").inc()
        return _error(400, f"bad scrape: {exc}")
    except TooMany as exc:
        state.metrics.rejected.labels("too_many_items").inc()
        return _error(413, f"bad scrape: {exc}")
    future = state.writer.record_scrape(scrape)
    return await _record(request, "the scrape", future, lambda n: {"samples": n})


def parse_metrics_post(body: bytes) -> str:
    """The Prometheus text of a ``{"text": …}`` body (JSON: a content type no web page may send unasked)."""
    try:
        fields = orjson.loads(body)
    except orjson.JSONDecodeError:
        fields = None
    text = wire.shaped(fields, wire.RayMetrics)["text"] if isinstance(fields, dict) else None
    if not isinstance(text, str):
        raise BadQuery('bad Ray metrics: the body must be a JSON object {"text": "<Prometheus text>"}')
    return text


async def ray_metrics(request: Request) -> Response:
    """POST /ingest/agent/ray-metrics: a node's Prometheus text (its aggregator's lines suffice) from `raysight run`."""
    if (refused := _key_refused(request)) is not None:
        return refused
    try:
        text = parse_metrics_post(await read_body(request, RAY_METRICS_MAX_BODY))
        samples = await run_in_threadpool(parse_aggregator_metrics, text)
    except ValueError as exc:  # not Prometheus text
        raise BadQuery(f"bad Ray metrics: {exc}") from None
    return await _record(request, "Ray's metrics", lambda s: s.record_ray_metrics(samples), lambda n: {"samples": n})


routes = [
    Route("/ingest/ray-events", ray_events, methods=["POST"]),
    Route("/ingest/ray-events/{key}", ray_events, methods=["POST"]),
    Route("/ingest/agent/logs", agent_logs, methods=["POST"]),
    Route("/ingest/agent/run-exit", run_exit, methods=["POST"]),
    Route("/ingest/agent/ray-metrics", ray_metrics, methods=["POST"]),
    Route("/ingest/agent/node-life", node_life_sightings, methods=["POST"]),
    Route("/ingest/agent/ray-state", ray_state, methods=["POST"]),
    Route("/ingest/agent/metrics", metrics_scrape, methods=["POST"]),
    Route("/v1/traces", otlp_traces, methods=["POST"]),
    Route("/ingest/otlp/{key}/v1/traces", otlp_traces, methods=["POST"]),
    Route("/v1/logs", otlp_log_records, methods=["POST"]),
    Route("/ingest/otlp/{key}/v1/logs", otlp_log_records, methods=["POST"]),
]
