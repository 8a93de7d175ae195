"""Spans forwarded to another OTLP/HTTP receiver: an OTLP exporter of the OpenTelemetry SDK (a real client) sends to a
real raysight server, which sends them on to a receiver this test runs on the SDK's protobuf types (the OpenTelemetry
Collector cannot be installed here), as well as storing them, or instead."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from starlette.testclient import TestClient

from raysight import wire
from raysight.cli import main
from raysight.cli.detach import child_args
from raysight.cli.server import server_cmd
from raysight.client import Client
from raysight.instrument import task_spans
from raysight.instrument.task_spans import TaskSpan, new_id
from raysight.server.app import create_app
from raysight.settings import Forwarding, Settings
from tests import test_inference
from tests.ray_scenarios import ServerProcess, serving, wait_folded

SESSION = "session_2026-11-24_12-00-00_000000_7"


class Backend(BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver: parses each export with the SDK's protobuf types; the first two answers are 503."""

    protocol_version = "HTTP/1.1"
    spans: dict[str, tuple[str, str | None]] = {}  # span ID → (name, parent span ID)
    headers_seen: list[str | None] = []
    refuse_first = 2
    lock = threading.Lock()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with Backend.lock:
            Backend.headers_seen.append(self.headers.get("x-api-key"))
            refuse = Backend.refuse_first > 0
            Backend.refuse_first -= 1
            if not refuse:
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                for resource_spans in request.resource_spans:
                    for scope_spans in resource_spans.scope_spans:
                        for span in scope_spans.spans:
                            parent = span.parent_span_id.hex() or None
                            Backend.spans[span.span_id.hex()] = (span.name, parent)
        self.send_response(503 if refuse else 200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def backend() -> Iterator[str]:
    Backend.spans, Backend.headers_seen, Backend.refuse_first = {}, [], 2
    with serving(Backend) as url:
        yield url


def send_trace(url: str) -> dict[str, tuple[str, str | None]]:
    """A parent and two children through the SDK's OTLP exporter; what was sent, as the backend keeps it."""
    provider = TracerProvider(resource=Resource.create({"ray.session_name": SESSION, "service.name": "forwarded"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=url + "/v1/traces")))
    tracer = provider.get_tracer("test")
    sent = {}
    with tracer.start_as_current_span("parent") as parent:
        for name in ("child-a", "child-b"):
            with tracer.start_as_current_span(name) as child:
                sent[f"{child.get_span_context().span_id:016x}"] = (name, f"{parent.get_span_context().span_id:016x}")
    sent[f"{parent.get_span_context().span_id:016x}"] = ("parent", None)
    provider.shutdown()
    return sent


def until(holds, what: str, timeout_s: float = 30) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not holds():
        assert time.monotonic() < deadline, f"no {what} within {timeout_s} s"
        time.sleep(0.05)


def test_spans_are_stored_and_forwarded_with_retries_and_headers(tmp_path: Path, backend: str) -> None:
    server = ServerProcess(
        tmp_path / "data", options=["--traces-forward", backend, "--traces-forward-header", "x-api-key=sekrit"]
    ).start()
    try:
        sent = send_trace(server.url)
        until(lambda: Backend.spans == sent, "forwarded spans")  # after two 503s, retried
        assert set(Backend.headers_seen) == {"sekrit"} and len(Backend.headers_seen) >= 3
        with Client(server.url) as client:
            until(lambda: client.doctor()["counters"].get("spans") == 3, "stored spans")
            forward = client.doctor()["traces_forward"]
            assert forward["url"] == backend + "/v1/traces" and forward["store"] is True
            assert forward["forwarded"] == 3 and forward["dropped"] == forward["refused"] == 0  # one export a span
            (trace,) = client.traces(session=SESSION)["traces"]
            assert trace["spans"] == 3 and trace["root"] == "parent"
        doctor = CliRunner().invoke(main, ["doctor", "--server", server.url]).output
        assert f"Spans forwarded to {backend}/v1/traces: 3 exports sent, 0 queued, 0 refused, 0 dropped" in doctor
    finally:
        server.stop()


def test_no_traces_store_only_forwards(tmp_path: Path, backend: str) -> None:
    Backend.refuse_first = 0
    server = ServerProcess(tmp_path / "data", options=["--traces-forward", backend, "--no-traces-store"]).start()
    try:
        sent = send_trace(server.url)
        until(lambda: Backend.spans == sent, "forwarded spans")
        with Client(server.url) as client:
            assert client.doctor()["counters"].get("spans", 0) == 0
            assert client.doctor()["traces_forward"]["store"] is False
    finally:
        server.stop()


def send_serve_request(url: str, request_id: str) -> None:
    """A Serve request's spans as Ray Serve 2.60 makes them (proxy.py, router.py): the proxy's, and its router's
    call of the ingress deployment, with Serve's attributes, through the SDK's OTLP exporter."""
    provider = TracerProvider(resource=Resource.create({"ray.session_name": SESSION, "service.name": "serve"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=url + "/v1/traces")))
    tracer = provider.get_tracer("ray.serve")
    served = {wire.ATTR_SERVE_REQUEST_ID: request_id, "deployment": "Greeter", "app": "greeter"}
    proxy = {"request_type": "http", "request_method": "GET", "request_route_path": "/greet", "http.status_code": 200}
    with tracer.start_as_current_span("proxy_http_request Greeter GET /greet", attributes=served | proxy):
        routed = served | {"call_method": "__call__", "route": "/greet"}
        with tracer.start_as_current_span("route_to_replica Greeter __call__", attributes=routed):
            pass
    provider.shutdown()


def test_serve_s_request_spans_reach_an_otlp_platform_as_they_are_with_their_attributes(tmp_path: Path) -> None:
    """What docs/serve.md shows for ML-observability platforms (Arize and others take OTLP/HTTP): a raysight that
    forwards every span it receives, here into a second raysight standing for the platform."""
    platform = ServerProcess(tmp_path / "platform").start()
    try:
        header = "space_id=my-space"
        server = ServerProcess(
            tmp_path / "data", options=["--traces-forward", platform.url, "--traces-forward-header", header]
        ).start()
        try:
            send_serve_request(server.url, "raysight-forwarded")
            with Client(platform.url) as client:
                until(lambda: client.doctor()["counters"].get("spans") == 2, "the request's spans at the platform")
                (trace,) = client.traces(session=SESSION, request="raysight-forwarded")["traces"]
                spans = client.trace(trace["trace_id"])["spans"]
        finally:
            server.stop()
    finally:
        platform.stop()
    assert [s["name"] for s in spans] == ["proxy_http_request Greeter GET /greet", "route_to_replica Greeter __call__"]
    for span in spans:
        assert span["attributes"]["deployment"] == "Greeter" and span["attributes"]["app"] == "greeter", span
    assert spans[0]["attributes"]["request_route_path"] == "/greet"


def attempt_spans(session: str, tasks: list[dict[str, Any]], raises: bool = False) -> bytes:
    """raysight's span of each of these task attempts, as the instrumentation in their workers exports it: ended,
    having returned, or raised."""
    spans = []
    for task in tasks:
        attributes = {wire.ATTR_TASK_ID: task["task_id"], wire.ATTR_ATTEMPT: task["attempt_number"]}
        span = TaskSpan(new_id(128), new_id(64), None, task["name"], test_inference.RUN_ENDED_NS - 10**9, attributes)
        span.end_ns = test_inference.RUN_ENDED_NS - 10**8
        if raises:
            span.fail(ValueError(f"{task['name']} raised on purpose"), span.end_ns)
        spans.append(span)
    return task_spans.encode_request(spans, {wire.ATTR_SESSION: session})


def test_an_attempt_whose_end_ray_lost_ends_as_raysights_span_of_it_says(
    tmp_path: Path, ray_batches: list[list[dict[str, Any]]], backend: str
) -> None:
    """The owner's end of three children was lost (outcome unknown); their spans come after that was inferred, to a
    server that forwards spans without keeping them, and a reindex rebuilds every task from Ray's events alone."""
    Backend.refuse_first = 0
    forwarding = Forwarding(f"{backend}/v1/traces", store=False)
    with TestClient(
        create_app(Settings(tmp_path).replace(fold_linger_s=0, fold_rest=0, spans_linger_s=0, forwarding=forwarding))
    ) as app:
        test_inference.record(app, ray_batches, "?cluster=rec&run=run-1")
        test_inference.end_run(app, "run-1")
        unknown = [t for t in test_inference.rows(app, "tasks") if t["name"] == "child" and t["state"] == "NIL"]
        assert len(unknown) >= 2, "the recording has children whose owner never sent their end"
        (session,) = [s["session"] for s in test_inference.sessions(app)]
        for body in (attempt_spans(session, unknown[:1]), attempt_spans(session, unknown[1:], raises=True)):
            reply = app.post("/v1/traces", content=body, headers={"Content-Type": "application/x-protobuf"})
            assert reply.status_code == 200, reply.text
        wait_folded(app)
        assert app.get("/api/raysight/traces").json()["traces"] == []  # no span kept

        def children() -> dict[str, dict[str, Any]]:
            return {
                t["task_id"]: t
                for t in test_inference.rows(app, "tasks")
                if t["task_id"] in {u["task_id"] for u in unknown}
            }

        now = children()
        returned, raised = now[unknown[0]["task_id"]], [now[t["task_id"]] for t in unknown[1:]]
        assert (returned["state"], returned["reported_state"], returned["error_type"]) == ("FINISHED", "RUNNING", None)
        assert returned["inferred_reason"].startswith("raysight's span of this attempt (span ")
        assert "it could still have failed storing the returned value" in returned["inferred_reason"]
        for task in raised:
            assert (task["state"], task["error_type"]) == ("FAILED", "TASK_EXECUTION_EXCEPTION")
            assert task["error_message"].endswith("\nValueError: child raised on purpose")
        groups = app.get("/api/raysight/errors").json()["groups"]
        (group,) = [g for g in groups if g["error"] == "ValueError: child raised on purpose"]
        assert (group["error_type"], group["count"]) == ("TASK_EXECUTION_EXCEPTION", len(raised))
        reindexed = app.post("/api/raysight/reindex", json={})
        assert reindexed.status_code == 200, reindexed.text
        assert children() == now


def test_forwarding_options_are_checked_and_kept_by_a_detached_server(backend: str) -> None:
    result = CliRunner().invoke(server_cmd, ["--no-traces-store"])
    assert result.exit_code == 2 and "--traces-forward" in result.output
    result = CliRunner().invoke(server_cmd, ["--traces-forward", backend, "--traces-forward-header", "novalue"])
    assert result.exit_code == 2 and "NAME=VALUE" in result.output
    ctx = server_cmd.make_context(
        "server", ["--traces-forward", backend, "--traces-forward-header", "a=b", "--no-traces-store"]
    )
    args, env = child_args(server_cmd, ctx.params)
    assert "--no-traces-store" in args and args[args.index("--traces-forward-header") :][:2] == [
        "--traces-forward-header",
        "a=b",
    ]
    assert env["RAYSIGHT_TRACES_FORWARD"] == backend
