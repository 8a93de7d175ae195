"""raysight's instrumentation (`raysight/instrument`) without a Ray cluster: the W3C trace context a submission carries,
the worker-side span queue (never in the way when the server is down or hangs; its spans read back from a real
server), the runtime-env and setup hooks' chaining of the user's own, Ray's `--tracing-startup-hook`, and the
`raysight env` / `raysight run` variables that turn tracing on.

Nothing here patches Ray in the pytest process: what calls ``instrument()`` runs in a subprocess, or with
``hooks.instrument`` replaced by a recording stub."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import os
import subprocess
import sys
import textwrap
import time
import traceback
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span, Status
from opentelemetry.sdk.resources import Resource as SdkResource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, TraceFlags, TraceState

from raysight import wire
from raysight.cli import main
from raysight.cli.run import free_port, serve_exporter_hint, tracing_env, uv_run_warning
from raysight.client import Client
from raysight.errors import NotFound
from raysight.ingest.otlp import key_values
from raysight.instrument import export, hook_paths, hooks, otlp_proto, ray_tracing, task_spans
from raysight.instrument.task_spans import TaskSpan
from raysight.settings import (
    ENV_CHAINED_ENV_HOOK,
    ENV_CHAINED_SETUP_HOOK,
    ENV_INGEST_KEY,
    ENV_OTLP_ENDPOINT,
    ENV_POST_MORTEM_TIMEOUT,
    ENV_SERVER,
    ENV_TRACES_SAMPLE_RATIO,
)
from tests.ray_scenarios import ServerProcess

ROOT = Path(__file__).parent.parent
TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C
SPAN_ID = 0xB7AD6B7169203331
SESSION = "session_2026-11-24_12-00-00_000000_1"


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without Ray's, raysight's or OpenTelemetry's variables (a fresh shell), plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RAY_", "RAYSIGHT_", "OTEL_")) and k not in ("TRACEPARENT", "TRACESTATE")
    }
    return {**env, **extra}


def in_subprocess(code: str, timeout: float = 30, **env: str) -> tuple[dict[str, Any], float]:
    """Run ``code`` in a fresh interpreter; the JSON object on its last line of stdout, and its wall time (s)."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=clean_env(**env),
        cwd=ROOT,
    )
    wall = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), wall


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(tmp_path_factory.mktemp("instrument") / "data") as process:
        yield process


# --- the trace context a submission carries ------------------------------------------------------------------------


@pytest.mark.parametrize("flags", [TraceFlags.SAMPLED, TraceFlags.DEFAULT])
@pytest.mark.parametrize("state", [None, TraceState([("congo", "t61rcWkgMzE"), ("rojo", "00f067aa0ba902b7")])])
def test_carrier_round_trips_a_span_context(flags: int, state: TraceState | None) -> None:
    context = SpanContext(TRACE_ID, SPAN_ID, is_remote=False, trace_flags=TraceFlags(flags), trace_state=state)
    carried = ray_tracing.carrier(context)
    header = b"congo=t61rcWkgMzE,rojo=00f067aa0ba902b7" if state else b""
    assert carried == b"\x00" + TRACE_ID.to_bytes(16, "big") + SPAN_ID.to_bytes(8, "big") + bytes([flags]) + header
    parsed = ray_tracing.parse_carrier(carried)
    assert parsed is not None
    assert (parsed.trace_id, parsed.span_id, parsed.trace_flags, parsed.is_remote) == (TRACE_ID, SPAN_ID, flags, True)
    assert parsed.trace_flags.sampled is (flags == TraceFlags.SAMPLED)
    assert dict(parsed.trace_state) == ({"congo": "t61rcWkgMzE", "rojo": "00f067aa0ba902b7"} if state else {})


def test_parse_carrier_refuses_what_is_no_carrier() -> None:
    good = ray_tracing.carrier(SpanContext(TRACE_ID, SPAN_ID, is_remote=False, trace_flags=TraceFlags(1)))
    assert ray_tracing.parse_carrier(good) is not None
    for value in (
        None,
        good.hex(),  # text, not bytes
        bytearray(good),
        good[:25],  # short
        b"",
        b"\x01" + good[1:],  # another version
        b"\x00" + bytes(16) + good[17:],  # all-zero trace ID
        good[:17] + bytes(8) + good[25:],  # all-zero span ID
    ):
        assert ray_tracing.parse_carrier(value) is None, value


W3C = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def expected_span(span: TaskSpan) -> Span:
    """What the protobuf library makes of a task span, field by field, to hold the hand-written encoding to."""
    message = Span(
        trace_id=span.trace_id.to_bytes(16, "big"),
        span_id=span.span_id.to_bytes(8, "big"),
        name=span.name,
        kind=Span.SpanKind.SPAN_KIND_CONSUMER,
        start_time_unix_nano=span.start_ns,
        end_time_unix_nano=span.end_ns,
        attributes=key_values(span.attributes),
    )
    if span.parent_id is not None:
        message.parent_span_id = span.parent_id.to_bytes(8, "big")
    if span.error is not None:
        message.status.CopyFrom(Status(code=Status.StatusCode.STATUS_CODE_ERROR, message=span.error))
        kind, _, text = span.error.partition(": ")
        exception = {"exception.type": kind, "exception.message": text, "exception.stacktrace": span.stack}
        message.events.append(
            Span.Event(name="exception", time_unix_nano=span.error_ns, attributes=key_values(exception))
        )
    return message


def test_task_spans_encode_as_the_protobuf_library_would() -> None:
    attributes = {
        "ray.function": "__main__.f", "ray.task.attempt": 2, "negative": -5, "big": 2**63 - 1, "ratio": 0.25,
        "flag": True, "off": False, "list": [1, "é", [2.5]], "missing": None, "text": "ünïcode",
    }  # fmt: skip
    spans = [
        TaskSpan(
            TRACE_ID, SPAN_ID, None, "root", 1_700_000_000 * 10**9, attributes, end_ns=1_700_000_000 * 10**9 + 500
        ),
        TaskSpan(TRACE_ID, 2, SPAN_ID, "child" * 40, 2**63 - 2, {"ray.task.attempt": 2}, end_ns=2**63 - 1),
    ]
    try:
        raise ValueError("it failed: here")
    except ValueError as exc:
        spans[1].fail(exc, 2**63 - 1)
    resource = {"service.name": "ray", "process.pid": 4321, "ray.session_name": SESSION}
    for _ in range(2):  # the second time from what the encoder remembered of the first
        request = ExportTraceServiceRequest.FromString(task_spans.encode_request(spans, resource))
        (resource_spans,) = request.resource_spans
        assert resource_spans.resource == Resource(attributes=key_values(resource))
        (scope_spans,) = resource_spans.scope_spans
        assert scope_spans.scope.name == wire.TASK_SCOPE
        assert list(scope_spans.spans) == [expected_span(span) for span in spans]
    sdk_spans = ExportTraceServiceRequest(resource_spans=[ResourceSpans(resource=Resource())]).SerializeToString()
    both = ExportTraceServiceRequest.FromString(sdk_spans + task_spans.encode_request(spans, resource))
    assert len(both.resource_spans) == 2  # appended to another export, one export of both


def test_sdk_spans_written_by_hand_read_as_the_sdk_encoder_writes_them() -> None:
    """What the span queue sends of the SDK's spans (``otlp_proto.sdk_request``) parses into the very message the
    OTLP exporter's encoder builds: every kind, value type, event, link, status, trace state, remote parent, dropped
    count, two resources and three scopes (one with a version, attributes and a schema URL; one of no name)."""
    exporter = InMemorySpanExporter()
    providers = [
        TracerProvider(resource=SdkResource.create({"service.name": name, "n": i}), span_limits=SpanLimits(
            max_span_attributes=12, max_events=2, max_links=1, max_event_attributes=2, max_link_attributes=1))
        for i, name in enumerate(("ray", "ünïcode"))
    ]  # fmt: skip
    for provider in providers:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    values = {
        "text": "ünïcode", "empty": "", "flag": True, "off": False, "zero": 0, "negative": -5, "big": 2**63 - 1,
        "ratio": 0.25, "bytes": b"\x00\xff", "texts": ["a", ""], "flags": [True, False], "ints": [1, -2],
        "floats": [0.5], "none": [],
    }  # fmt: skip
    remote = SpanContext(
        TRACE_ID, SPAN_ID, is_remote=True, trace_flags=TraceFlags(1), trace_state=TraceState([("k", "v")])
    )
    scopes = [("raysight.test", None, None, None), ("versioned", "1.2", "https://opentelemetry.io/schemas/1.21.0",
              {"scope.attr": "x"}), ("", None, None, None)]  # fmt: skip
    for provider in providers:
        for name, version, schema_url, attributes in scopes:
            tracer = provider.get_tracer(name, version, schema_url, attributes)
            for kind in trace.SpanKind:
                context = (
                    trace.set_span_in_context(trace.NonRecordingSpan(remote)) if kind is trace.SpanKind.SERVER else None
                )
                links = [trace.Link(remote, {"link": 1, "more": 2}), trace.Link(remote)]
                with tracer.start_as_current_span(f"span {kind.name} é", context, kind, values, links) as span:
                    with tracer.start_as_current_span("") as child:
                        child.set_status(trace.Status(trace.StatusCode.OK))
                    for i in range(3):
                        span.add_event(f"event {i}", {"a": i, "b": "x", "c": 0.5}, timestamp=1_700_000_000 * 10**9 + i)
                    span.add_event("")
                    span.set_status(trace.Status(trace.StatusCode.ERROR, "it failed: ü"))
    spans = exporter.get_finished_spans()
    assert len(spans) == 2 * 3 * 5 * 2
    expected = encode_spans(spans)
    for _ in range(2):  # the second time from what the encoder remembered of the first
        assert ExportTraceServiceRequest.FromString(otlp_proto.sdk_request(spans)) == expected
    assert otlp_proto.sdk_request([]) == expected.__class__().SerializeToString() == b""


def test_parse_traceparent_reads_w3c_trace_context_and_formats_it_back() -> None:
    parsed = ray_tracing.parse_traceparent(W3C)
    assert parsed is not None
    assert (parsed.trace_id, parsed.span_id, parsed.trace_flags, parsed.is_remote) == (TRACE_ID, SPAN_ID, 1, True)
    assert parsed.trace_state is None or dict(parsed.trace_state) == {}
    assert ray_tracing.traceparent(parsed) == W3C
    unsampled = ray_tracing.parse_traceparent(W3C[:-2] + "00")
    assert unsampled is not None and not unsampled.trace_flags.sampled
    assert ray_tracing.traceparent(unsampled) == W3C[:-2] + "00"
    with_state = f"{W3C} congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
    parsed = ray_tracing.parse_traceparent(with_state)
    assert parsed is not None and parsed.trace_id == TRACE_ID
    assert dict(parsed.trace_state) == {"congo": "t61rcWkgMzE", "rojo": "00f067aa0ba902b7"}
    assert ray_tracing.traceparent(parsed) == with_state
    assert ray_tracing.traceparent(ray_tracing.parse_traceparent(f"  {W3C}\n")) == W3C  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "value",
    [
        None,
        b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "",
        "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  # the version W3C forbids
        "00-0af7651916cd43dd8448eb211c80319-b7ad6b7169203331-01",  # trace ID of 31 digits
        "00-0af7651916cd43dd8448eb211c80319c0-b7ad6b7169203331-01",  # of 33
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-01",  # span ID of 15
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-1",  # flags of 1 digit
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",  # no flags
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-00",  # a fifth field
        "00-0af7651916cd43dd8448eb211c80319g-b7ad6b7169203331-01",  # not hex
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333z-01",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0x",
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",  # zero IDs
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
    ],
)
def test_parse_traceparent_refuses_what_is_no_traceparent(value: object) -> None:
    assert ray_tracing.parse_traceparent(value) is None


@pytest.mark.parametrize(
    "value",
    [
        "00-0af7651916cd43dd_448eb211c80319c-b7ad6b7169203331-01",  # '_' in the trace ID
        "00-+af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  # '+' and 31 digits
        "00-0af7651916cd43dd8448eb211c80319c-+7ad6b7169203331-01",  # '+' leading the span ID
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-\t1",  # a tab in the flags
    ],
)
def test_parse_traceparent_refuses_fields_that_int_would_take(value: str) -> None:
    assert ray_tracing.parse_traceparent(value) is None


# --- the span queue of a worker or driver --------------------------------------------------------------------------

QUEUE_PRELUDE = """
import atexit, json, socket, time
from dataclasses import asdict
from raysight.instrument import export
from raysight.instrument.task_spans import TaskSpan

result = {}
queue = None

def report():  # registered before the queue's own shutdown, so it runs after it (atexit runs last-in first-out)
    result["at_exit"] = asdict(queue.counts)
    result["exit_began"] = time.time()
    print(json.dumps(result), flush=True)

atexit.register(report)

def make(n):
    return [TaskSpan(i + 1, i + 1, None, f"t{i}", 1_000 + i, {"ray.task.kind": "task"}, end_ns=2_000 + i)
            for i in range(n)]

def sink(delay_s=0.0):  # the URL of an OTLP endpoint here: it reads each export, answers 200 after delay_s, counts
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Sink(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            time.sleep(delay_s)
            result["requests"] = result.get("requests", 0) + 1
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
"""


def test_span_queue_never_blocks_nor_raises_when_the_server_is_down() -> None:
    nobody = free_port()  # nothing listens there: each export is refused at once
    code = QUEUE_PRELUDE + textwrap.dedent(
        f"""
        spans = make(2000)
        queue = export.SpanQueue("http://127.0.0.1:{nobody}/v1/traces", lambda: {{"ray.session_name": "s"}})
        started = time.perf_counter()
        for span in spans:
            queue.add(span)
        result["add_s"] = time.perf_counter() - started
        started = time.perf_counter()
        result["flushed"] = queue.force_flush(3000)
        result["flush_s"] = time.perf_counter() - started
        result["after_flush"] = asdict(queue.counts)
        result["end"] = time.time()
        """
    )
    result, wall = in_subprocess(code, timeout=30)
    exited = time.time()
    assert result["add_s"] < 0.5, result
    assert result["flushed"] is True and result["flush_s"] < 4, result
    assert result["after_flush"] == {"exported": 0, "dropped_full": 0, "dropped_failed": 2000}
    assert result["at_exit"] == {"exported": 0, "dropped_full": 0, "dropped_failed": 2000}
    assert result["exit_began"] - result["end"] < 1.0 and exited - result["end"] < 3.0, (result, exited)
    assert wall < 15


def test_span_queue_drops_and_counts_what_a_full_queue_cannot_take_and_exits_past_a_hung_server() -> None:
    """A server that takes the connection and never answers: the thread waits on its one export (up to
    EXPORT_TIMEOUT_S, twice), the queue of 10 fills, the rest is dropped; a flush waits only its timeout, and the
    process exits after EXIT_FLUSH_S, counting what was still queued as failed."""
    code = QUEUE_PRELUDE + textwrap.dedent(
        """
        spans = make(100)
        hung = socket.socket()
        hung.bind(("127.0.0.1", 0))
        hung.listen(64)  # accepted by the kernel, never read nor answered
        queue = export.SpanQueue(f"http://127.0.0.1:{hung.getsockname()[1]}/v1/traces", dict, max_queue=10)
        started = time.perf_counter()
        for span in spans:
            queue.add(span)
        result["add_s"] = time.perf_counter() - started
        result["after_add"] = asdict(queue.counts)
        result["queued"] = len(queue._queue)
        started = time.perf_counter()
        result["flushed"] = queue.force_flush(300)
        result["flush_s"] = time.perf_counter() - started
        result["queued_at_end"] = len(queue._queue)
        result["end"] = time.time()
        """
    )
    result, wall = in_subprocess(code, timeout=30)
    exited = time.time()
    assert result["add_s"] < 0.5, result
    # what was taken: the batch the thread took (1 to 10 spans, now waiting on the server) and the 10 queued
    accepted = 100 - result["after_add"]["dropped_full"]
    assert result["queued"] == 10 and 10 <= accepted <= 20, result
    assert result["after_add"]["exported"] == result["after_add"]["dropped_failed"] == 0
    assert result["flushed"] is False and 0.25 <= result["flush_s"] < 1.0, result
    in_flight = accepted - result["queued_at_end"]  # the one batch the thread took, whenever it took it
    assert 1 <= in_flight <= 10, result
    at_exit = result["at_exit"]
    assert at_exit["exported"] == 0 and at_exit["dropped_full"] == result["after_add"]["dropped_full"]
    # what was still queued at exit is dropped and counted; the batch sent to the server and never answered is not
    assert at_exit["dropped_failed"] == result["queued_at_end"], result
    assert export.EXIT_FLUSH_S * 0.9 <= result["exit_began"] - result["end"] < export.EXPORT_TIMEOUT_S, result
    assert exited - result["end"] < export.EXPORT_TIMEOUT_S, (result, exited)
    assert wall < 15


def test_span_queue_sends_at_most_one_export_per_linger_to_a_slow_server() -> None:
    """Spans ending steadily while each export waits 20 ms on the server go in one export per LINGER_S, not in an
    export of the few that ended during the last one, one after the other."""
    code = QUEUE_PRELUDE + textwrap.dedent(
        """
        queue = export.SpanQueue(sink(delay_s=0.02), dict)
        started = time.monotonic()
        spans = make(400)
        for i, span in enumerate(spans):  # 400 spans over a second
            queue.add(span)
            time.sleep(max(0.0, started + i / 400 - time.monotonic()))
        result["sending_s"] = time.monotonic() - started
        result["flushed"] = queue.force_flush(5000)
        result["counts"] = asdict(queue.counts)
        """
    )
    result, _ = in_subprocess(code, timeout=30)
    assert result["flushed"] and result["counts"]["exported"] == 400, result
    # the first span's at once, one a linger after, the flush's (and one a full batch, were there one)
    most = result["sending_s"] / export.LINGER_S + 2 + 400 // export.BATCH
    assert 2 <= result["requests"] <= most, result


def test_span_queue_sends_a_burst_once_spans_stop_ending_without_waiting_out_its_linger() -> None:
    """The spans of a burst (a worker's last tasks before its cluster goes) leave QUIET_S after the last one, not
    LINGER_S after the send before."""
    code = QUEUE_PRELUDE + textwrap.dedent(
        """
        queue = export.SpanQueue(sink(), dict)
        spans = make(11)
        queue.add(spans[0])  # after an idle spell: sent at once
        deadline = time.monotonic() + 5
        while queue.counts.exported < 1 and time.monotonic() < deadline:
            time.sleep(0.005)
        started = time.monotonic()
        for span in spans[1:]:  # a burst, then nothing
            queue.add(span)
        while queue.counts.exported < 11 and time.monotonic() < deadline:
            time.sleep(0.005)
        result["burst_sent_after_s"] = time.monotonic() - started
        result["counts"] = asdict(queue.counts)
        """
    )
    result, _ = in_subprocess(code, timeout=30)
    assert result["counts"]["exported"] == 11, result
    assert export.QUIET_S <= result["burst_sent_after_s"] < export.LINGER_S / 2, result


def wait_for_trace(client: Client, trace_id: str, spans: int, timeout_s: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            trace = client.trace(trace_id)
            if len(trace["spans"]) >= spans:
                return trace
        except NotFound:
            pass
        assert time.monotonic() < deadline, f"trace {trace_id} did not reach {spans} spans in {timeout_s} s"
        time.sleep(0.1)


def fail_in_task() -> RuntimeError:
    try:
        raise RuntimeError("boom")
    except RuntimeError as exc:
        return exc


def test_span_queue_exports_task_spans_that_a_real_server_reads_back(server: ServerProcess) -> None:
    trace_id, root_id, ok_id, failed_id = 0x5EED0000000000000000000000000001, 0x1111, 0x2222, 0x3333
    resource = {
        "service.name": "ray",
        "ray.session_name": SESSION,
        "ray.job_id": "02000000",
        "ray.node_id": "ab" * 28,
        "process.pid": 4321,
    }
    base = time.time_ns()
    task = {"ray.task.kind": "task", "ray.task.attempt": 0}
    spans = [
        TaskSpan(trace_id, root_id, None, "driver", base, {"ray.task.kind": "task"}, end_ns=base + 9_000_000),
        TaskSpan(
            trace_id,
            ok_id,
            root_id,
            "work",
            base + 1_000_000,
            {**task, "ray.task_id": "cd" * 24, "ray.function": "app.work"},
            end_ns=base + 3_000_000,
        ),
        TaskSpan(
            trace_id,
            failed_id,
            root_id,
            "boom_task",
            base + 4_000_000,
            {**task, "ray.task_id": "ef" * 24, "ray.function": "app.boom_task"},
            end_ns=base + 8_000_000,
        ),
    ]
    spans[2].fail(fail_in_task(), base + 7_000_000)
    queue = export.SpanQueue(f"{server.url}/v1/traces", lambda: resource)
    try:
        for span in spans:
            queue.add(span)
        assert queue.force_flush(5000) is True
        assert asdict(queue.counts) == {"exported": 3, "dropped_full": 0, "dropped_failed": 0}
    finally:
        queue.shutdown()
    with server.client() as client:
        trace = wait_for_trace(client, f"{trace_id:032x}", 3)
        assert trace["trace_id"] == f"{trace_id:032x}" and trace["start_ns"] == base
        assert trace["duration_ns"] == 9_000_000
        by_name = {span["name"]: span for span in trace["spans"]}
        assert [span["name"] for span in trace["spans"]] == ["driver", "work", "boom_task"]  # tree order
        assert [span["depth"] for span in trace["spans"]] == [0, 1, 1]
        for span in trace["spans"]:
            assert span["kind"] == "consumer" and span["scope"] == "raysight.ray"
            assert (span["session"], span["job_id"], span["node_id"], span["pid"], span["service"]) == (
                SESSION,
                "02000000",
                "ab" * 28,
                4321,
                "ray",
            )
        root, ok, failed = by_name["driver"], by_name["work"], by_name["boom_task"]
        assert root["parent_span_id"] is None and root["span_id"] == f"{root_id:016x}"
        assert ok["parent_span_id"] == failed["parent_span_id"] == f"{root_id:016x}"
        assert (ok["span_id"], ok["task_id"], ok["attempt"]) == (f"{ok_id:016x}", "cd" * 24, 0)
        assert (ok["start_ns"], ok["end_ns"], ok["status"], ok["status_message"], ok["events"]) == (
            base + 1_000_000,
            base + 3_000_000,
            "unset",
            None,
            None,
        )
        assert ok["attributes"]["ray.function"] == "app.work"
        assert (failed["status"], failed["status_message"], failed["task_id"]) == (
            "error",
            "RuntimeError: boom",
            "ef" * 24,
        )
        [event] = failed["events"]
        assert (event["name"], event["ns"]) == ("exception", base + 7_000_000)
        assert event["attributes"]["exception.type"] == "RuntimeError"
        assert event["attributes"]["exception.message"] == "boom"
        stack = event["attributes"]["exception.stacktrace"]
        assert stack.startswith("Traceback (most recent call last):") and "in fail_in_task" in stack
        assert stack.rstrip().endswith("RuntimeError: boom")
        listed = client.traces(session=SESSION)
        assert listed["session"] == SESSION
        [row] = [t for t in listed["traces"] if t["trace_id"] == f"{trace_id:032x}"]
        assert (row["root"], row["spans"], row["errors"], row["jobs"], row["services"]) == (
            "driver",
            3,
            1,
            ["02000000"],
            ["ray"],
        )


# --- the runtime-env hook and the workers' setup hook, chaining the user's -----------------------------------------


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What the hooks did, in order: ``hooks.instrument`` replaced by a stub that records its calls (nothing is
    patched, no provider set), ``set_base`` by one that records the TRACEPARENT it was given."""
    done: list[Any] = []

    def instrument(endpoint: str | None = None, propagate: bool = True) -> None:
        done.append(("instrument", endpoint, propagate))

    monkeypatch.setattr(hooks, "instrument", instrument)
    monkeypatch.setattr(ray_tracing, "set_base", lambda value: done.append(("set_base", value)))
    for name in (ENV_OTLP_ENDPOINT, ENV_CHAINED_ENV_HOOK, ENV_CHAINED_SETUP_HOOK, "TRACEPARENT"):
        monkeypatch.delenv(name, raising=False)
    return done


INSTRUMENTED = ("instrument", None, True)


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, events: list[Any]) -> Iterator[Any]:
    """An importable module of the user's hooks (``theirs_hooks``): ``env_hook`` (a RAY_RUNTIME_ENV_HOOK that adds
    env_vars THEIRS=1) and ``setup`` (a setup hook); both record into ``events``."""
    name = "theirs_hooks"
    (tmp_path / f"{name}.py").write_text(
        textwrap.dedent(
            """
            EVENTS = []

            def env_hook(runtime_env):
                EVENTS.append(("env_hook", dict(runtime_env or {})))
                env = dict(runtime_env or {})
                env["env_vars"] = {**(env.get("env_vars") or {}), "THEIRS": "1"}
                return env

            def setup():
                EVENTS.append(("setup",))
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop(name, None)
    module = importlib.import_module(name)
    module.EVENTS = events
    try:
        yield module
    finally:
        sys.modules.pop(name, None)


def test_runtime_env_hook_sets_raysights_setup_hook_and_endpoint(
    events: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert hooks.runtime_env_hook(None) == {hook_paths.SETUP_HOOK_KEY: hook_paths.SETUP_HOOK}
    assert events == [("set_base", None), INSTRUMENTED]
    events.clear()
    monkeypatch.setenv(ENV_OTLP_ENDPOINT, "http://h:1")
    monkeypatch.setenv("TRACEPARENT", W3C)
    assert hooks.runtime_env_hook({}) == {
        hook_paths.SETUP_HOOK_KEY: hook_paths.SETUP_HOOK,
        "env_vars": {ENV_OTLP_ENDPOINT: "http://h:1"},
    }
    assert events == [("set_base", W3C), INSTRUMENTED]
    assert hook_paths.SETUP_HOOK == "raysight.instrument.worker_setup"  # what Ray loads in each worker
    assert importlib.import_module("raysight.instrument").worker_setup is hooks.worker_setup


def test_runtime_env_hook_keeps_the_users_runtime_env_without_changing_it(
    events: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_OTLP_ENDPOINT, "http://h:1")
    theirs = {"env_vars": {"A": "1"}, "pip": ["requests"], "working_dir": "."}
    assert hooks.runtime_env_hook(theirs) == {
        "env_vars": {"A": "1", ENV_OTLP_ENDPOINT: "http://h:1"},
        "pip": ["requests"],
        "working_dir": ".",
        hook_paths.SETUP_HOOK_KEY: hook_paths.SETUP_HOOK,
    }
    assert theirs == {"env_vars": {"A": "1"}, "pip": ["requests"], "working_dir": "."}  # a copy was changed
    their_endpoint = {"env_vars": {ENV_OTLP_ENDPOINT: "http://theirs:2"}}
    assert hooks.runtime_env_hook(their_endpoint)["env_vars"] == {ENV_OTLP_ENDPOINT: "http://theirs:2"}
    ours = {hook_paths.SETUP_HOOK_KEY: hook_paths.SETUP_HOOK}  # ray.init twice, or init() and the hook
    assert hooks.runtime_env_hook(ours)["env_vars"] == {ENV_OTLP_ENDPOINT: "http://h:1"}
    assert ENV_CHAINED_SETUP_HOOK not in hooks.runtime_env_hook(ours)["env_vars"]
    assert events.count(INSTRUMENTED) == 4  # once per call


def test_runtime_env_hook_takes_the_post_mortem_switch_to_the_jobs_workers(
    events: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`raysight run --post-mortem` sets it in the driver's environment: a cluster's workers (which the driver did not
    start) get it from the job's runtime env."""
    monkeypatch.delenv(ENV_OTLP_ENDPOINT, raising=False)
    monkeypatch.setenv(hook_paths.RAY_POST_MORTEM, "1")
    monkeypatch.setenv(ENV_POST_MORTEM_TIMEOUT, "90")
    env_vars = hooks.runtime_env_hook({})["env_vars"]
    assert env_vars == {hook_paths.RAY_POST_MORTEM: "1", ENV_POST_MORTEM_TIMEOUT: "90"}


def test_runtime_env_hook_chains_the_users_setup_hook_by_name(events: list[Any]) -> None:
    env = hooks.runtime_env_hook({hook_paths.SETUP_HOOK_KEY: "mypkg.setup", "env_vars": {"A": "1"}})
    assert env == {
        hook_paths.SETUP_HOOK_KEY: hook_paths.SETUP_HOOK,
        "env_vars": {"A": "1", ENV_CHAINED_SETUP_HOOK: "mypkg.setup"},
    }
    assert events.count(INSTRUMENTED) == 1


def test_runtime_env_hook_chains_the_users_setup_callable(events: list[Any]) -> None:
    def theirs() -> str:
        events.append(("theirs",))
        return "their result"

    env = hooks.runtime_env_hook({hook_paths.SETUP_HOOK_KEY: theirs})
    assert set(env) == {hook_paths.SETUP_HOOK_KEY}  # no endpoint set: no env_vars
    chained = env[hook_paths.SETUP_HOOK_KEY]
    assert callable(chained) and chained is not theirs
    assert events == [("set_base", None), INSTRUMENTED]
    events.clear()
    assert chained() == "their result"  # (in a worker:) raysight's worker_setup first, then theirs
    assert events == [INSTRUMENTED, ("theirs",)]
    events.clear()
    from ray import cloudpickle  # how Ray ships a callable setup hook to the workers

    restored = cloudpickle.loads(cloudpickle.dumps(chained))
    assert restored() == "their result"  # (their function was copied with its list: only ours is seen here)
    assert events == [INSTRUMENTED]


def test_runtime_env_hook_calls_the_users_env_hook_first_and_keeps_its_changes(
    events: list[Any], user_module: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_CHAINED_ENV_HOOK, "theirs_hooks.env_hook")
    monkeypatch.setenv(ENV_OTLP_ENDPOINT, "http://h:1")
    env = hooks.runtime_env_hook({"env_vars": {"A": "1"}, hook_paths.SETUP_HOOK_KEY: "mypkg.setup"})
    assert env == {
        hook_paths.SETUP_HOOK_KEY: hook_paths.SETUP_HOOK,
        "env_vars": {
            "A": "1",
            "THEIRS": "1",
            ENV_OTLP_ENDPOINT: "http://h:1",
            ENV_CHAINED_SETUP_HOOK: "mypkg.setup",
        },
    }
    # theirs saw the runtime env as the job gave it, before raysight's changes; then raysight traced the driver
    assert events == [
        ("env_hook", {"env_vars": {"A": "1"}, hook_paths.SETUP_HOOK_KEY: "mypkg.setup"}),
        ("set_base", None),
        INSTRUMENTED,
    ]
    events.clear()
    assert hooks.runtime_env_hook(None)["env_vars"] == {"THEIRS": "1", ENV_OTLP_ENDPOINT: "http://h:1"}
    assert events == [("env_hook", {}), ("set_base", None), INSTRUMENTED]


def test_runtime_env_hook_returns_the_runtime_env_when_tracing_the_driver_fails(
    events: list[Any], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(endpoint: str | None = None, propagate: bool = True) -> None:
        raise RuntimeError("no tracing today")

    monkeypatch.setattr(hooks, "instrument", broken)
    assert hooks.runtime_env_hook({"env_vars": {"A": "1"}}) == {
        "env_vars": {"A": "1"},
        hook_paths.SETUP_HOOK_KEY: hook_paths.SETUP_HOOK,
    }
    assert "raysight: could not trace this driver" in caplog.text and "no tracing today" in caplog.text


def test_worker_setup_traces_the_worker_then_runs_the_users_setup_hook(
    events: list[Any], user_module: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    hooks.worker_setup()  # none chained
    assert events == [INSTRUMENTED]
    events.clear()
    monkeypatch.setenv(ENV_CHAINED_SETUP_HOOK, "theirs_hooks.setup")
    hooks.worker_setup()
    assert events == [INSTRUMENTED, ("setup",)]
    events.clear()

    def broken(endpoint: str | None = None, propagate: bool = True) -> None:
        raise RuntimeError("no tracing today")

    monkeypatch.setattr(hooks, "instrument", broken)
    hooks.worker_setup()  # raysight's failure does not keep the user's hook from running
    assert events == [("setup",)]


# --- Ray's own tracing: raysight only sends the spans --------------------------------------------------------------


def test_tracing_startup_hook_sends_rays_spans_and_patches_nothing() -> None:
    nobody = free_port()
    code = """
        import json
        import ray
        from ray import actor, remote_function
        from ray._common import signature
        from ray._private import function_manager
        from opentelemetry import trace
        import raysight.instrument
        from raysight.instrument import export, hooks, ray_tracing

        patched = {
            "get": (ray, "get"),
            "wait": (ray, "wait"),
            "flatten_args": (signature, "flatten_args"),
            "recover_args": (signature, "recover_args"),
            "get_execution_info": (function_manager.FunctionActorManager, "get_execution_info"),
            "task _remote": (remote_function.RemoteFunction, "_remote"),
            "actor _remote": (actor.ActorClass, "_remote"),
            "_actor_method_call": (actor.ActorHandle, "_actor_method_call"),
        }
        before = {name: getattr(owner, attr) for name, (owner, attr) in patched.items()}
        raysight.instrument.tracing_startup_hook()
        raysight.instrument.tracing_startup_hook()  # idempotent
        provider = trace.get_tracer_provider()
        processors = provider._active_span_processor._span_processors
        queues = [p for p in processors if isinstance(p, export.SpanQueue)]
        with trace.get_tracer("ray").start_as_current_span("a span of Ray's wrappers"):
            pass
        queues[0].force_flush(3000)
        print(json.dumps({
            "instrumented": ray_tracing.instrumented(),
            "restored": [n for n, (o, a) in patched.items() if getattr(o, a) is before[n]],
            "provider": f"{type(provider).__module__}.{type(provider).__qualname__}",
            "processors": [f"{type(p).__module__}.{type(p).__qualname__}" for p in processors],
            "url": queues[0].url.geturl(),
            "counts": hooks.counts().__dict__,
            "same_queue": hooks.counts() is queues[0].counts,
        }))
    """
    result, _ = in_subprocess(code, timeout=60, RAYSIGHT_OTLP_ENDPOINT=f"http://127.0.0.1:{nobody}/")
    assert result["instrumented"] is False
    # all restored but the receiving side, which takes away what other processes' submissions may carry
    assert result["restored"] == ["get", "wait", "flatten_args", "task _remote", "actor _remote", "_actor_method_call"]
    assert result["provider"] == "opentelemetry.sdk.trace.TracerProvider"
    assert result["processors"] == ["raysight.instrument.ray_ids.RayIds", "raysight.instrument.export.SpanQueue"]
    assert result["url"] == f"http://127.0.0.1:{nobody}/v1/traces"
    # the SDK span reached raysight's queue (and its export failed: nobody listens)
    assert result["counts"] == {"exported": 0, "dropped_full": 0, "dropped_failed": 1}
    assert result["same_queue"] is True


# --- Ray Serve's tracing: raysight's provider makes Serve's spans, sent once -----------------------------------------


@pytest.mark.parametrize("hooked", [True, False], ids=["after the setup hook", "alone (serve deploy)"])
def test_serve_sets_up_tracing_with_raysights_exporter_and_each_span_is_sent_once(
    hooked: bool, server: ServerProcess
) -> None:
    """Serve's own ``setup_tracing`` (as each proxy and replica calls it) with raysight's exporter: Serve's provider
    is refused without a warning, raysight's (made by the setup hook, or by the exporter where no hook ran) makes
    Serve's span, at Serve's ratio, and sends it once; alone, what the process submits carries no trace context."""
    code = f"""
        import json
        from opentelemetry import trace
        from raysight.instrument import export, hooks, ray_tracing
        from ray.serve._private import tracing_utils

        if {hooked}:
            hooks.worker_setup()
        assert tracing_utils.setup_tracing("Greeter", "abc")
        provider = trace.get_tracer_provider()
        processors = provider._active_span_processor._span_processors
        with tracing_utils.TraceContextManager("proxy_http_request"):
            tracing_utils.set_span_attributes({{"request_id": "raysight-quick"}})
        [queue] = [p for p in processors if isinstance(p, export.SpanQueue)]
        queue.force_flush(5000)
        print(json.dumps({{
            "own": provider is hooks._own,
            "processors": [type(p).__name__ for p in processors],
            "sampler": provider.sampler.get_description(),
            "counts": hooks.counts().__dict__,
            "propagates": "_remote" in [name for _, name, _ in ray_tracing._patches],
        }}))
    """
    env = {
        hook_paths.RAY_SERVE_EXPORTER: hook_paths.SERVE_EXPORTER,
        hook_paths.RAY_SERVE_SAMPLING: "1.0",
        ENV_TRACES_SAMPLE_RATIO: "0",  # (raysight's own: Serve's ratio is what samples its span)
        ENV_OTLP_ENDPOINT: server.url,
    }
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60, env=clean_env(**env)
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Overriding" not in done.stderr, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["own"] and result["processors"] == ["RayIds", "SpanQueue"]
    assert result["sampler"].startswith("ParentBased{root:TraceIdRatioBased{1.0},")
    assert result["counts"] == {"exported": 1, "dropped_full": 0, "dropped_failed": 0}
    assert result["propagates"] is hooked


# --- `raysight env` and `raysight run` -----------------------------------------------------------------------------

NO_SETTINGS = {
    "RAY_RUNTIME_ENV_HOOK": None,
    ENV_SERVER: None,
    ENV_INGEST_KEY: None,
    hook_paths.RAY_SERVE_EXPORTER: None,
    hook_paths.RAY_SERVE_SAMPLING: None,
}
HOOK_LINE = "export RAY_RUNTIME_ENV_HOOK='raysight.instrument.runtime_env_hook'"


def env_lines(*args: str, **env: str | None) -> list[str]:
    result = CliRunner().invoke(main, ["env", *args], env={**NO_SETTINGS, **env}, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "export RAY_enable_ray_event='1'" in lines
    return [line for line in lines if any(part in line for part in ("HOOK", "OTLP", "RAYSIGHT_TRACING", "PROFILE"))]


def test_env_prints_the_tracing_variables() -> None:
    assert env_lines("--server", "http://h:1") == [HOOK_LINE, "export RAYSIGHT_OTLP_ENDPOINT='http://h:1'"]
    assert env_lines("--server", "http://h:1/", "--ingest-key", "k") == [
        HOOK_LINE,
        "export RAYSIGHT_OTLP_ENDPOINT='http://h:1/ingest/otlp/k'",
    ]
    assert env_lines("--server", "http://h:1", "--no-tracing", "--no-profiling") == []
    # each on its own: the hook, for the other
    assert env_lines("--server", "http://h:1", "--no-tracing") == [
        HOOK_LINE,
        "export RAYSIGHT_OTLP_ENDPOINT='http://h:1'",
        "export RAYSIGHT_TRACING='0'",
    ]
    assert env_lines("--server", "http://h:1", "--no-profiling") == [
        HOOK_LINE,
        "export RAYSIGHT_OTLP_ENDPOINT='http://h:1'",
        "export RAYSIGHT_PROFILE_HZ='0'",
    ]
    assert env_lines("--server", "http://h:1", RAY_RUNTIME_ENV_HOOK="mypkg.env_hook") == [
        HOOK_LINE,
        "export RAYSIGHT_OTLP_ENDPOINT='http://h:1'",
        "export RAYSIGHT_CHAINED_ENV_HOOK='mypkg.env_hook'",
    ]
    # run again where the first `eval "$(raysight env)"` already set raysight's hook: nothing chained to itself
    assert env_lines("--server", "http://h:1", RAY_RUNTIME_ENV_HOOK=hook_paths.ENV_HOOK) == [
        HOOK_LINE,
        "export RAYSIGHT_OTLP_ENDPOINT='http://h:1'",
    ]


SERVES = {hook_paths.RAY_SERVE_EXPORTER: hook_paths.SERVE_EXPORTER, hook_paths.RAY_SERVE_SAMPLING: "1.0"}


def test_tracing_env_moves_the_users_env_hook_to_the_chained_one() -> None:
    ours = {hook_paths.RAY_ENV_HOOK: hook_paths.ENV_HOOK, ENV_OTLP_ENDPOINT: "http://h:1", **SERVES}
    assert tracing_env("http://h:1", environ={}) == ours
    assert tracing_env("http://h:1", environ={"RAY_RUNTIME_ENV_HOOK": ""}) == ours
    assert tracing_env("http://h:1", environ={"RAY_RUNTIME_ENV_HOOK": hook_paths.ENV_HOOK}) == ours
    assert tracing_env("http://h:1", environ={"RAY_RUNTIME_ENV_HOOK": "mypkg.env_hook"}) == {
        **ours,
        ENV_CHAINED_ENV_HOOK: "mypkg.env_hook",
    }
    assert tracing_env("http://h:1/", "a/b c", environ={}) == {
        hook_paths.RAY_ENV_HOOK: hook_paths.ENV_HOOK,
        ENV_OTLP_ENDPOINT: "http://h:1/ingest/otlp/a%2Fb%20c",
        **SERVES,
    }


def test_tracing_env_points_serves_tracing_at_raysight_every_request_unless_the_user_said_otherwise() -> None:
    """Serve's exporter is raysight's, sampling 1.0 where the user set none; a ratio of theirs is kept, and an exporter
    of theirs is left alone (with their ratio, or Serve's default), with a hint that names it."""
    assert {k: v for k, v in tracing_env("http://h:1", environ={}).items() if k in SERVES} == SERVES
    assert serve_exporter_hint({}) is None
    kept = tracing_env("http://h:1", environ={hook_paths.RAY_SERVE_SAMPLING: "0.1"})
    assert (kept[hook_paths.RAY_SERVE_EXPORTER], kept[hook_paths.RAY_SERVE_SAMPLING]) == (
        hook_paths.SERVE_EXPORTER,
        "0.1",
    )
    ours_already = {hook_paths.RAY_SERVE_EXPORTER: hook_paths.SERVE_EXPORTER}  # a shell `raysight env` set up
    assert tracing_env("http://h:1", environ=ours_already)[hook_paths.RAY_SERVE_EXPORTER] == hook_paths.SERVE_EXPORTER
    assert serve_exporter_hint(ours_already) is None
    theirs = {hook_paths.RAY_SERVE_EXPORTER: "mypkg.tracing:exporter"}
    assert not set(tracing_env("http://h:1", environ=theirs)) & set(SERVES)
    hint = serve_exporter_hint(theirs)
    assert hint is not None and "mypkg.tracing:exporter" in hint and hook_paths.RAY_SERVE_EXPORTER in hint


def test_uv_run_warning() -> None:
    warning = uv_run_warning(["uv", "run", "app.py"], {})
    assert warning is not None and "RAY_ENABLE_UV_RUN_RUNTIME_ENV=0" in warning
    assert uv_run_warning(["/opt/bin/uv", "--quiet", "run", "python", "app.py"], {}) == warning
    assert uv_run_warning(["uv", "run", "app.py"], {"RAY_ENABLE_UV_RUN_RUNTIME_ENV": "1"}) == warning
    for command, environ in [
        (["uv", "run", "app.py"], {"RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}),
        (["uv", "run", "app.py"], {"RAY_ENABLE_UV_RUN_RUNTIME_ENV": "False"}),
        (["python", "app.py"], {}),
        (["uv", "pip", "install", "ray"], {}),
        ([], {}),
    ]:
        assert uv_run_warning(command, environ) is None, (command, environ)


SHOWN = (
    "RAY_RUNTIME_ENV_HOOK",
    "RAYSIGHT_OTLP_ENDPOINT",
    "RAYSIGHT_CHAINED_ENV_HOOK",
    "RAYSIGHT_TRACING",
    "RAYSIGHT_PROFILE_HZ",
    "RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH",
    "RAY_SERVE_TRACING_SAMPLING_RATIO",
)
SHOW_ENV = f"import json, os; print(json.dumps({{k: os.environ.get(k) for k in {SHOWN!r}}}))"


def raysight_run(*args: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
    """`raysight ARGS…` as a user runs it in a fresh shell (``env`` added)."""
    return subprocess.run(
        [sys.executable, "-m", "raysight", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=clean_env(**env),
        cwd=ROOT,
    )


def shown(done: subprocess.CompletedProcess[str]) -> dict[str, str | None]:
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, str | None] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_run_traces_and_profiles_the_program_unless_told_not_to(server: ServerProcess) -> None:
    program = (sys.executable, "-c", SHOW_ENV)
    traced = raysight_run("run", "--server", server.url, "--", sys.executable, "-c", SHOW_ENV)
    assert shown(traced) == {
        "RAY_RUNTIME_ENV_HOOK": "raysight.instrument.runtime_env_hook",
        "RAYSIGHT_OTLP_ENDPOINT": server.url,
        "RAYSIGHT_CHAINED_ENV_HOOK": None,
        "RAYSIGHT_TRACING": None,
        "RAYSIGHT_PROFILE_HZ": None,
        **SERVES,
    }
    assert traced.stderr == ""
    chained = raysight_run(
        "run", "--server", server.url, "--", sys.executable, "-c", SHOW_ENV, RAY_RUNTIME_ENV_HOOK="mypkg.env_hook"
    )
    assert shown(chained)["RAYSIGHT_CHAINED_ENV_HOOK"] == "mypkg.env_hook"
    assert shown(chained)["RAY_RUNTIME_ENV_HOOK"] == "raysight.instrument.runtime_env_hook"
    bare = raysight_run("run", "--server", server.url, "--no-tracing", "--no-profiling", "--", *program)
    assert shown(bare) == dict.fromkeys(SHOWN)
    # profiled, untraced: the hook, no span (nor Serve's exporter, which a shell's `raysight env` left)
    untraced = raysight_run(
        "run", "--server", server.url, "--no-tracing", "--", *program, RAYSIGHT_TRACING="1", **SERVES
    )
    assert shown(untraced) == {
        **dict.fromkeys(SHOWN),
        "RAY_RUNTIME_ENV_HOOK": "raysight.instrument.runtime_env_hook",
        "RAYSIGHT_OTLP_ENDPOINT": server.url,
        "RAYSIGHT_TRACING": "0",
        "RAY_SERVE_TRACING_SAMPLING_RATIO": "1.0",  # (Serve's own setting, which nothing reads without its exporter)
    }
    unprofiled = raysight_run("run", "--server", server.url, "--no-profiling", "--", *program)
    assert shown(unprofiled)["RAYSIGHT_PROFILE_HZ"] == "0" and shown(unprofiled)["RAYSIGHT_TRACING"] is None
    # a shell `raysight env --no-profiling` set up: profiling on again; a rate of the user's own stays
    assert (
        shown(raysight_run("run", "--server", server.url, "--", *program, RAYSIGHT_PROFILE_HZ="0"))[
            "RAYSIGHT_PROFILE_HZ"
        ]
        is None
    )
    assert (
        shown(raysight_run("run", "--server", server.url, "--", *program, RAYSIGHT_PROFILE_HZ="50"))[
            "RAYSIGHT_PROFILE_HZ"
        ]
        == "50"
    )


def test_run_neither_tracing_nor_profiling_drops_raysights_hook_from_the_shell(server: ServerProcess) -> None:
    shell = tracing_env("http://elsewhere:1", environ={})
    untraced = raysight_run(
        "run", "--server", server.url, "--no-tracing", "--no-profiling", "--", sys.executable, "-c", SHOW_ENV, **shell
    )
    assert shown(untraced)["RAY_RUNTIME_ENV_HOOK"] is None and shown(untraced)["RAYSIGHT_OTLP_ENDPOINT"] is None
    theirs = {**shell, "RAY_RUNTIME_ENV_HOOK": "raysight.instrument.runtime_env_hook"}
    theirs["RAYSIGHT_CHAINED_ENV_HOOK"] = "my.hook"
    untraced = raysight_run(
        "run", "--server", server.url, "--no-tracing", "--no-profiling", "--", sys.executable, "-c", SHOW_ENV, **theirs
    )
    assert shown(untraced)["RAY_RUNTIME_ENV_HOOK"] == "my.hook"  # the user's own hook, which raysight had chained


def test_run_and_env_keep_the_users_own_serve_exporter_and_say_so(server: ServerProcess) -> None:
    theirs = {"RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH": "mypkg.tracing:exporter"}
    run = raysight_run("run", "--server", server.url, "--", sys.executable, "-c", SHOW_ENV, **theirs)
    assert shown(run)["RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH"] == "mypkg.tracing:exporter"
    assert shown(run)["RAY_SERVE_TRACING_SAMPLING_RATIO"] is None  # (theirs: Serve's default)
    assert run.stderr == serve_exporter_hint(theirs) + "\n"
    env = CliRunner().invoke(main, ["env", "--server", "http://h:1"], env={**NO_SETTINGS, **theirs})
    assert env.exit_code == 0 and "RAY_SERVE_TRACING" not in env.stdout, env.output
    assert env.stderr == serve_exporter_hint(theirs) + "\n"
    ours = CliRunner().invoke(main, ["env", "--server", "http://h:1"], env=NO_SETTINGS)
    assert f"export RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH='{hook_paths.SERVE_EXPORTER}'" in ours.stdout
    assert "export RAY_SERVE_TRACING_SAMPLING_RATIO='1.0'" in ours.stdout and ours.stderr == ""


def fake_uv(tmp_path: Path) -> Path:
    """A `uv` that prints what it was given and the hook it was started with (the real one need not be installed)."""
    uv = tmp_path / "bin" / "uv"
    uv.parent.mkdir()
    uv.write_text('#!/bin/sh\necho "uv $* hook=$RAY_RUNTIME_ENV_HOOK"\n')
    uv.chmod(0o755)
    return uv


def test_run_warns_that_ray_skips_the_hook_under_uv_run(server: ServerProcess, tmp_path: Path) -> None:
    uv = fake_uv(tmp_path)
    warning = uv_run_warning(["uv", "run", "app.py"], {})
    done = raysight_run("run", "--server", server.url, "--", str(uv), "run", "app.py")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "uv run app.py hook=raysight.instrument.runtime_env_hook\n"
    assert done.stderr == f"{warning}\n"
    told = raysight_run(
        "run", "--server", server.url, "--", str(uv), "run", "app.py", RAY_ENABLE_UV_RUN_RUNTIME_ENV="0"
    )
    assert told.returncode == 0 and told.stderr == "", told.stderr
    bare = raysight_run("run", "--server", server.url, "--no-tracing", "--no-profiling", "--", str(uv), "run", "app.py")
    assert bare.returncode == 0 and bare.stderr == "", bare.stderr
    # no uv on the PATH: the warning still comes first, then the error
    missing = raysight_run(
        "run", "--server", server.url, "--", "uv", "run", "app.py", PATH=str(tmp_path / "nothing-here")
    )
    assert missing.returncode == 1
    assert missing.stderr.index(warning) < missing.stderr.index("Error: command not found: uv")


def test_new_traces_are_sampled_by_the_ratio_and_a_task_follows_its_parent(monkeypatch: pytest.MonkeyPatch) -> None:
    """``RAYSIGHT_TRACES_SAMPLE_RATIO`` decides for a task with no parent; a parent's decision is followed."""
    unsampled = ray_tracing.carrier(SpanContext(7, 9, True, TraceFlags(TraceFlags.DEFAULT)))
    monkeypatch.setattr(ray_tracing, "_ratio", 0.0)
    for parent in (None, unsampled):
        running = ray_tracing.Running.begin("f", parent, {})
        context = trace.get_current_span(running.context).get_span_context()
        assert running.span is None and not context.trace_flags.sampled and context.is_valid
    child = ray_tracing.Running.begin("f", unsampled, {})
    assert trace.get_current_span(child.context).get_span_context().trace_id == 7  # the parent's trace


def test_init_before_ray_init_makes_the_coming_job_traced() -> None:
    """`raysight.instrument.init()` in a driver before `ray.init`: Ray will call raysight's runtime-env hook (a hook
    already set is chained), and the driver is traced at once."""
    result, _ = in_subprocess(
        """
        import json, os
        os.environ["RAY_RUNTIME_ENV_HOOK"] = "my.own.hook"
        import raysight.instrument
        from raysight.instrument import ray_tracing
        raysight.instrument.init("http://127.0.0.1:9")
        print(json.dumps({k: os.environ.get(k) for k in (
            "RAY_RUNTIME_ENV_HOOK", "RAYSIGHT_CHAINED_ENV_HOOK", "RAYSIGHT_OTLP_ENDPOINT")} | {
            "instrumented": ray_tracing.instrumented()}))
        """
    )
    assert result == {
        "RAY_RUNTIME_ENV_HOOK": "raysight.instrument.runtime_env_hook",
        "RAYSIGHT_CHAINED_ENV_HOOK": "my.own.hook",
        "RAYSIGHT_OTLP_ENDPOINT": "http://127.0.0.1:9",
        "instrumented": True,
    }


@pytest.mark.parametrize(
    ("args", "kwargs", "signature_of"),
    [
        ((), {}, lambda: None),  # nothing: the carrier alone, an odd count
        ((1, "two"), {}, lambda a, b: None),  # in the first positional argument's marker
        ((), {"k": 3}, lambda k: None),  # after the keyword arguments, an odd count
        ((1,), {"k": [4]}, lambda a, k: None),
    ],
)
def test_the_carrier_rides_in_ray_s_flattened_arguments_and_comes_out_whole(args, kwargs, signature_of) -> None:
    """What a submission carries costs Ray no argument where there is a positional one, one where there is none; the
    worker's side gives back the arguments as they were, and the carrier as the keyword the executor takes away."""
    from ray._common import signature

    carrier = ray_tracing.carrier(SpanContext(5, 6, True, TraceFlags(TraceFlags.SAMPLED)))
    flatten = ray_tracing._flatten_with_carrier(signature.flatten_args)
    recover = ray_tracing._recover_with_carrier(signature.recover_args, signature.DUMMY_TYPE)
    parameters = signature.extract_signature(signature_of)
    plain = signature.flatten_args(parameters, args, kwargs)
    flat = flatten(parameters, args, {**kwargs, ray_tracing.CARRIER: carrier})
    assert len(flat) == len(plain) + (0 if args else 1)
    back_args, back_kwargs = recover(flat)
    assert (back_args, back_kwargs) == (list(args), {**kwargs, ray_tracing.CARRIER: carrier})
    assert recover(plain) == signature.recover_args(plain)  # what carries nothing is read as Ray reads it
    assert flatten(parameters, args, kwargs) == plain
    with pytest.raises(TypeError):  # Ray's own check of the arguments still holds
        flatten(parameters, (*args, "one too many"), {**kwargs, ray_tracing.CARRIER: carrier})


def _raises() -> None:
    raise ValueError("plain")


def _raises_later() -> Iterator[int]:
    yield 1
    raise ValueError("generator")


async def _raises_async() -> None:
    raise ValueError("async")


async def _raises_async_later() -> AsyncIterator[int]:
    yield 1
    raise ValueError("async generator")


async def _drained(items: AsyncIterator[int]) -> list[int]:
    return [item async for item in items]


def _raised(function: Callable[[], Any]) -> BaseException:
    """What calling ``function`` and running what it returns to its end raised."""
    try:
        result = function()
        if inspect.isgenerator(result):
            list(result)
        elif inspect.isasyncgen(result):
            asyncio.run(_drained(result))
        elif inspect.iscoroutine(result):
            asyncio.run(result)
    except ValueError as exc:
        return exc
    raise AssertionError(f"{function} raised nothing")


@pytest.mark.skipif(sys.version_info < (3, 11), reason="CPython 3.10 re-raises with the traceback it caught")
@pytest.mark.parametrize("function", [_raises, _raises_later, _raises_async, _raises_async_later])
@pytest.mark.parametrize("traced", [True, False], ids=["in a span", "untraced"])
def test_an_exception_leaves_a_tasks_wrapper_with_the_traceback_it_has_unwrapped(
    function: Callable[[], Any], traced: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wrapper's frames are in no traceback: not the one the exception leaves with (which Ray formats), frame
    for frame the one it has without the wrapper, nor the one the task's span records; traced in a span or not."""
    ended: list[TaskSpan] = []
    ids = SimpleNamespace(hex=lambda: "00" * 24, is_nil=lambda: True)
    worker = SimpleNamespace(
        get_current_task_id=lambda: ids, get_current_task_attempt_number=lambda: 0, get_actor_id=lambda: ids
    )
    monkeypatch.setattr(ray_tracing, "core_worker", lambda: worker)
    monkeypatch.setattr(ray_tracing, "_sink", ended.append)
    monkeypatch.setattr(ray_tracing, "_patches", [("patched", "as in a traced worker", None)] if traced else [])
    descriptor = SimpleNamespace(class_name="", function_name=function.__name__, module_name=__name__)
    wrapped = ray_tracing._traced(function, descriptor)
    frames = traceback.extract_tb(_raised(wrapped).__traceback__)
    assert [tuple(f) for f in frames] == [tuple(f) for f in traceback.extract_tb(_raised(function).__traceback__)]
    assert frames[-1].line is not None and frames[-1].line.startswith("raise ValueError(")
    if traced:
        (span,) = ended
        assert span.stack is not None and ray_tracing.__file__ not in span.stack and "raise ValueError(" in span.stack
    else:
        assert not ended
