"""Ingest: Ray's aggregator batches; from node agents their logs and what they saw of their node's Ray processes;
from `raysight run` its driver's exit and Ray's aggregator metrics. Acknowledged only once durable.

Each route takes the ingest key, which the guard checks (``guard.py``); a refusal is raised, counted by its reason in
``raysight_ingest_rejected``, and answered in raysight's envelope (503s with ``Retry-After``: the sender resends)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import Future
from typing import Any, TypeVar

import orjson
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute

from raysight import wire
from raysight.config import INGEST_DEADLINE_S
from raysight.errors import (
    BadIngest,
    BadQuery,
    BodyTooLarge,
    QueueFull,
    RaysightError,
    TooMany,
    Unavailable,
    UnsupportedEncoding,
)
from raysight.server.answers import raysight_error
from raysight.server.app_state import app_state
from raysight.server.guard import media_type
from raysight.server.resends import digest
from raysight.server.routing import Access, route
from raysight.signals import log_lines as logs_signal
from raysight.signals import ray_events as ray_signal
from raysight.signals import spans as spans_signal
from raysight.signals.log_lines import otlp_logs
from raysight.signals.log_lines.parse import MAX_LOG_LINES
from raysight.signals.ray_events.batch_shape import array_length
from raysight.signals.registry import SIGNALS
from raysight.signals.signal import Intake, Signal, WrittenIntake
from raysight.signals.spans import parse as spans_parse
from raysight.store.sessions_query import latest_session
from raysight.store.writer import CONTENT_ERRORS

log = logging.getLogger("raysight.ingest")
T = TypeVar("T")

JOURNALLED_PER_BODY = 4  # what an export may take in the journal (its rows as JSON), in bodies of the largest size
RETRY = {"Retry-After": "1"}


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


def _rejected(request: Request, reason: str, error: RaysightError) -> RaysightError:
    """``error``, counted as ``reason`` in the server's ingest refusals."""
    app_state(request).metrics.rejected.labels(reason).inc()
    return error


@contextlib.contextmanager
def _counted(request: Request, reason: str, refusal: type[RaysightError]) -> Iterator[None]:
    """Count a ``refusal`` that leaves the block as ``reason`` in the server's ingest refusals."""
    try:
        yield
    except refusal:
        app_state(request).metrics.rejected.labels(reason).inc()
        raise


async def ray_events(request: Request) -> Response:
    """POST /ingest/ray-events?cluster=NAME: one JSON array of Ray events from a node's aggregator agent."""
    started = time.perf_counter()
    return await _with_body(request, lambda body: _journal(request, body, started), "Ray")


async def _with_body(request: Request, handle: Callable[[bytes], Awaitable[Response]], sender: str) -> Response:
    """``handle``'s answer to the request's body, which is held against the server's body budget meanwhile; 413 for
    a body over --max-body, 503 (``sender`` resends) when the budget is spent."""
    state = app_state(request)
    async with contextlib.AsyncExitStack() as held:
        try:
            body = await held.enter_async_context(held_body(request, state.max_body))
        except BodyTooLarge as exc:
            raise _rejected(request, "too_large", BodyTooLarge(f"{exc} (raise --max-body)")) from None
        except Unavailable as exc:
            raise _rejected(request, "bodies", Unavailable(f"{exc}; {sender} will resend", headers=RETRY)) from None
        return await handle(body)


def _submit(
    request: Request, sender: str, body: bytes, events: int, kind: str, label: str | None = None, run: str | None = None
) -> Future[Any]:
    """Hand ``body`` to the writer to journal (``Writer.submit``); 503 while its backlog is full (``sender``
    resends)."""
    try:
        return app_state(request).writer.submit(body, label, run, events, kind)
    except QueueFull as exc:
        raise _rejected(request, "busy", Unavailable(f"busy: {exc}; {sender} will resend", headers=RETRY)) from None


async def _journal(request: Request, body: bytes, started: float) -> Response:
    """Acknowledge a Ray batch once it is durable in the journal (or its first copy is), or say why not."""
    state = app_state(request)
    key = digest(body, request.url.query)
    prior = state.resends.find(key)
    if prior is not None and prior[0] is None:
        state.metrics.resent(prior[1])
        counted = {"received": prior[1], "deduplicated": prior[1], "resent_batches": 1}
        state.writer.call(lambda store: store.count(**counted), ordered=False)
        return JSONResponse({"ok": True, "received": prior[1], "resend": True})
    if prior is None:
        try:
            received = array_length(body)
        except BadIngest as exc:  # JSON, of another kind
            raise _rejected(request, "not_array", exc) from None
        except ValueError as exc:
            raise _rejected(request, "not_json", BadIngest(f"body is not JSON: {exc}")) from None
        if received > state.max_events:
            why = f"{received} events in one body, over {state.max_events} (raise --max-events)"
            raise _rejected(request, "too_many_events", TooMany(why))
        cluster, run_id = request.query_params.get("cluster") or None, request.query_params.get("run") or None
        future = _submit(request, "Ray", body, received, ray_signal.SIGNAL.name, cluster, run_id)
        state.resends.track(key, future, received)
    else:
        future, received = prior  # type: ignore[assignment]  # a pending first copy (find() says so)
    await _until_durable(request, future, started, "Ray")
    state.metrics.latency.observe(time.perf_counter() - started)
    return JSONResponse({"ok": True, "received": received, "resend": prior is not None})


async def _until_durable(request: Request, future: Future[Any], started: float, sender: str) -> None:
    """Once the journalled body is durable; else the 503 that makes ``sender`` send it again."""
    remaining = INGEST_DEADLINE_S - (time.perf_counter() - started)
    try:
        # shielded: a caller that gives up must not cancel the write (resends wait on the same future)
        await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), timeout=max(remaining, 0.01))
    except asyncio.TimeoutError:
        why = f"not yet durable; {sender} will resend and duplicates are ignored"
        raise _rejected(request, "deadline", Unavailable(why, headers=RETRY)) from None
    except OSError as exc:
        raise Unavailable(f"could not journal the batch ({exc}); {sender} will resend", headers=RETRY) from None


def intake_route(signal: Signal, intake: Intake) -> BaseRoute:
    """The ingest route of a signal that comes in by an :class:`Intake`: the body held against the server's budget,
    inflated and parsed off the event loop, journalled as the signal's kind, and acknowledged once durable."""

    async def receive(request: Request) -> Response:
        started = time.perf_counter()

        async def journal(body: bytes) -> Response:
            try:
                accepted = await _off_loop(request, body, intake.parse)
            except BadIngest as exc:
                raise _rejected(request, f"bad_{signal.name}", BadIngest(f"bad {intake.what}: {exc}")) from None
            future = _submit(request, intake.sender, accepted.body, accepted.items, signal.name)
            await _until_durable(request, future, started, intake.sender)
            return JSONResponse({"ok": True, **accepted.answer})

        return await _with_body(request, journal, intake.sender)

    receive.__doc__ = f"POST {intake.path}: {signal.name}, acknowledged once durable."
    return route(intake.path, receive, access=Access.INGEST, envelope=raysight_error, methods=["POST"])


async def otlp_traces(request: Request) -> Response:
    """POST /v1/traces (or /ingest/otlp/{key}/v1/traces): an OTLP/HTTP trace export, protobuf or JSON, gzipped or
    not, answered once its spans are durable (a span the store cannot keep is counted in the partial success), and
    queued to be sent on where the server forwards spans."""
    return await _otlp(request, _journal_spans)


async def otlp_log_records(request: Request) -> Response:
    """POST /v1/logs (or /ingest/otlp/{key}/v1/logs): an OTLP/HTTP log export, protobuf or JSON, gzipped or not,
    stored as lines (``signals/log_lines/otlp_logs.py``: a file per resource, in its ``ray.session_name`` or the
    newest session) and answered once durable; a record the store cannot keep is counted in the partial success."""
    return await _otlp(request, _journal_log_records)


OtlpHandler = Callable[[Request, bytes, bool], Awaitable[Response]]


async def _otlp(request: Request, handle: OtlpHandler) -> Response:
    """An OTLP/HTTP export (its key checked by the guard): the body read, then ``handle(request, body, json)``, which
    inflates and decodes it off the event loop (``_off_loop``), then journals it; a body that is not an export of the
    kind gets 400, one of too many items 413. (The ingest deadline runs from when it is decoded: an export of tens of
    thousands of items, answered 503 after being kept, would be sent again.)"""
    json = media_type(request.headers.get("content-type")) == "application/json"

    async def handled(body: bytes) -> Response:
        with _counted(request, "bad_otlp", BadIngest), _counted(request, "too_many_items", TooMany):
            return await handle(request, body, json)

    return await _with_body(request, handled, "the exporter")


async def _off_loop(request: Request, body: bytes, parse: Callable[[bytes], T]) -> T:
    """``parse`` of the inflated ``body``, both run on a thread: decoding an export of tens of thousands of items
    takes longer than the event loop may be held."""
    encoding, limit = _encoding(request), app_state(request).max_body

    def decoded_and_parsed() -> T:
        with _counted(request, "too_large", BodyTooLarge):
            data = _decoded(encoding, body, limit)
        return parse(data)

    return await run_in_threadpool(decoded_and_parsed)


async def _journal_spans(request: Request, body: bytes, json: bool) -> Response:
    state = app_state(request)
    export, body = await _off_loop(request, body, lambda data: (spans_parse.parse(data, json), data))
    started = time.perf_counter()
    if state.forwarder is not None and export.spans:
        forwarded = state.forwarder.put(body, "application/json" if json else "application/x-protobuf")
        if not forwarded and not state.forwarding.store:
            why = "busy: the spans to forward wait in a full queue; the exporter will resend"
            raise Unavailable(why, headers=RETRY)
    if export.spans:  # a server that keeps no span still keeps how the task attempts they are of ended
        kept = await run_in_threadpool(export.journalled, state.forwarding.store)
        if kept is not None:
            await _durable(request, kept, len(export.spans), spans_signal.SIGNAL.name, started)
    dropped = request.headers.get(wire.SPANS_DROPPED_HEADER, "0")
    dropped_at_source = int(dropped) if dropped.isdigit() and len(dropped) < 10 else 0
    if export.rejected or dropped_at_source:
        state.writer.call(
            lambda store: store.count(spans_rejected=export.rejected, spans_dropped_at_source=dropped_at_source),
            ordered=False,
        )
    return _otlp_answer(spans_parse.response(export.rejected, export.reason, json), json)


async def _journal_log_records(request: Request, body: bytes, json: bool) -> Response:
    session, now_ns = await app_state(request).read(latest_session), time.time_ns()
    export = await _off_loop(request, body, lambda data: otlp_logs.parse(data, json, session, now_ns, MAX_LOG_LINES))
    started = time.perf_counter()
    for batch in export.batches:
        lines = sum(len(file["texts"]) for file in batch["files"])
        await _durable(request, await run_in_threadpool(orjson.dumps, batch), lines, logs_signal.SIGNAL.name, started)
    return _otlp_answer(otlp_logs.response(export.rejected, export.reason, json), json)


async def _durable(request: Request, body: bytes, events: int, kind: str, started: float) -> None:
    """Journal an exporter's ``body`` (what its export became), until it is durable; 413 when it would take more than
    :data:`JOURNALLED_PER_BODY` bodies of the largest size."""
    if len(body) > (most := JOURNALLED_PER_BODY * app_state(request).max_body):
        why = f"the export's items take {len(body):,} bytes to keep, over {most:,}: send smaller batches"
        raise _rejected(request, "too_large", BodyTooLarge(why))
    future = _submit(request, "the exporter", body, events, kind)
    await _until_durable(request, future, started, "the exporter")


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
    readers join them): refused (BodyTooLarge) past ``limit`` bytes inflated (the server's --max-body), BadIngest
    where it is not whole and in that format."""
    if encoding == "identity":
        return body
    data, rest = bytearray(), body
    while rest:
        inflate = zlib.decompressobj(wbits=WBITS[encoding])
        try:
            data += inflate.decompress(rest, limit + 1 - len(data))
        except zlib.error as exc:
            raise BadIngest(f"body is not {encoding}: {exc}") from None
        if len(data) > limit or inflate.unconsumed_tail:
            raise BodyTooLarge(f"body over {limit} bytes decompressed (raise --max-body)")
        if not inflate.eof:
            raise BadIngest(f"body is not whole {encoding}: it ends within its stream")
        rest = inflate.unused_data
        if rest and encoding != "gzip":
            raise BadIngest(f"body is not {encoding}: {len(rest)} bytes follow its stream")
    return bytes(data)


def written_route(signal: Signal, intake: WrittenIntake) -> BaseRoute:
    """The ingest route of a signal written at once (a :class:`WrittenIntake`): the body read whole within the
    intake's limit, parsed on a thread, written by the writer, and acknowledged once committed."""

    async def receive(request: Request) -> Response:
        body = await read_body(request, intake.limit)
        try:
            parsed = await run_in_threadpool(intake.parse, body)
        except BadIngest as exc:
            refused = BadIngest(f"bad {intake.what}: {exc}")
            raise (_rejected(request, intake.rejected, refused) if intake.rejected else refused) from None
        except TooMany as exc:
            raise _rejected(request, "too_many_items", TooMany(f"bad {intake.what}: {exc}")) from None
        writer = app_state(request).writer
        if intake.together:
            future = writer.call_together(intake.write, parsed)
        else:
            future = writer.call(lambda store: intake.write(store, parsed), ordered=False)
        result = await _committed(future, intake.written)
        return JSONResponse({"ok": True, **({intake.answer: result} if intake.answer else {})})

    receive.__doc__ = f"POST {intake.path}: {signal.name}, acknowledged once written."
    return route(intake.path, receive, access=Access.INGEST, envelope=raysight_error, methods=["POST"])


async def _committed(future: Future[T], what: str) -> T:
    """What the writer's ``future`` returns, or 503 (the sender retries) when it cannot be done within the ingest
    deadline (folding is behind or stalled) or the store fails for a reason not the sender's. A write that timed out
    is cancelled if it has not started, else completes: each must be harmless twice."""
    try:
        return await asyncio.wait_for(asyncio.wrap_future(future), timeout=INGEST_DEADLINE_S)
    except asyncio.TimeoutError:
        why = f"busy: could not record {what} in {INGEST_DEADLINE_S} s (folding is behind); retry"
        raise Unavailable(why, headers=RETRY) from None
    except CONTENT_ERRORS as exc:  # validated, so this is unexpected; but retrying cannot help
        log.error("the store refused %s", what, exc_info=exc)
        raise BadQuery(f"the store refused {what} ({type(exc).__name__}); the server's log says more") from None
    except Exception as exc:  # noqa: BLE001 (environmental, or not foreseen: may pass on a retry)
        log.error("could not record %s", what, exc_info=exc)
        raise Unavailable(f"could not record {what} ({type(exc).__name__}); retry", headers=RETRY) from None


def routes() -> list[BaseRoute]:
    """Every ingest route: those of the signals registered now that come in by an intake, then the others."""
    return [
        *(
            intake_route(signal, signal.intake)
            if isinstance(signal.intake, Intake)
            else written_route(signal, signal.intake)
            for signal in SIGNALS.values()
            if signal.intake
        ),
        *OWN_ROUTES,
    ]


OWN_ROUTES = [
    route(wire.RAY_EVENTS, ray_events, access=Access.INGEST, envelope=raysight_error, methods=["POST"]),
    route(wire.RAY_EVENTS_KEYED, ray_events, access=Access.INGEST, envelope=raysight_error, methods=["POST"]),
    route(wire.OTLP_TRACES, otlp_traces, access=Access.INGEST, envelope=raysight_error, methods=["POST"]),
    route(wire.OTLP_TRACES_KEYED, otlp_traces, access=Access.INGEST, envelope=raysight_error, methods=["POST"]),
    route(wire.OTLP_LOGS, otlp_log_records, access=Access.INGEST, envelope=raysight_error, methods=["POST"]),
    route(wire.OTLP_LOGS_KEYED, otlp_log_records, access=Access.INGEST, envelope=raysight_error, methods=["POST"]),
]
