"""The OTLP/HTTP trace receiver (`/v1/traces`): the real OpenTelemetry SDK exporting to a real server, protobuf and
gzip; OTLP/JSON; malformed bodies; partial success; resent exports; the ingest key; acknowledged means durable."""

from __future__ import annotations

import gzip
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import httpx
import orjson
import pytest
import requests
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from starlette.testclient import TestClient

from raysight import wire
from raysight.client import Client
from raysight.errors import UnsupportedEncoding
from raysight.server.app import create_app
from raysight.server.app_state import AppState
from raysight.server.auth import Secrets
from raysight.settings import DB_FILE, Settings
from tests.ray_scenarios import JSON, ServerProcess
from tests.test_server import counters

PROTOBUF = {"Content-Type": "application/x-protobuf"}
SESSION = "session_2026-01-02_03-04-05_678901_4242"
JOB = "02000000"
TASK = "c2668a65bda616c1ffffffffffffffffffffffff01000000"
LINKED_TRACE, LINKED_SPAN = 0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331
SCOPE = "tests.otlp_receiver"
T0 = 1_767_322_800_000_000_000  # 2026-01-02, in ns
MAX_BODY = 1024 * 1024  # conftest's `server`
SPAN_COUNTERS = ("spans", "spans_deduplicated", "span_batches", "spans_rejected")


def span_counters(client: TestClient) -> dict[str, int]:
    c = counters(client)
    return {name: c.get(name, 0) for name in SPAN_COUNTERS}


def expect(spans: int = 0, deduplicated: int = 0, batches: int = 0, rejected: int = 0) -> dict[str, int]:
    return dict(zip(SPAN_COUNTERS, (spans, deduplicated, batches, rejected)))


def raysight(client: TestClient) -> AppState:
    """The app's state: its store, writer and secrets."""
    state: AppState = client.app.state.raysight  # type: ignore[attr-defined]
    return state


def settle(client: TestClient) -> None:
    """Wait (bounded) until the writer has done all it was handed so far: folds, and the counting of rejected spans
    (a call queued behind them runs after them)."""
    writer = raysight(client).writer
    writer.call(lambda store: None).result(timeout=15)
    assert writer.backlog()["batches"] == 0, "the server did not fold what it acknowledged"


def span_rows(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """The stored spans, each with its resource's attributes (kept once, apart)."""
    cursor = con.execute(
        """SELECT s.*, r.attributes AS resource FROM spans s LEFT JOIN span_resources r USING (resource_id)
           ORDER BY trace_id, span_id"""
    )
    columns = [d[0] for d in cursor.description]
    return [dict(zip(columns, row)) for row in cursor.fetchall()]


def stored(client: TestClient) -> list[dict[str, Any]]:
    """The spans table, read through the server's own store (a cursor of its own)."""
    cursor = raysight(client).store.reader()
    try:
        return span_rows(cursor)
    finally:
        cursor.close()


def ids(rows: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(r["trace_id"], r["span_id"]) for r in rows]


def pb_span(
    name: str,
    trace: bytes = bytes(range(1, 17)),
    span: bytes = bytes(range(1, 9)),
    start: int = T0,
    end: int = T0 + 1_000,
    parent: bytes = b"",
) -> PbSpan:
    return PbSpan(
        trace_id=trace,
        span_id=span,
        parent_span_id=parent,
        name=name,
        start_time_unix_nano=start,
        end_time_unix_nano=end,
    )


def pb_export(*spans: PbSpan) -> bytes:
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    resource_spans.resource.attributes.add(key="service.name").value.string_value = "pb-test"
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.scope.name = SCOPE
    scope_spans.spans.extend(spans)
    return request.SerializeToString()


def post_traces(
    client: TestClient, body: bytes, headers: dict[str, str] | None = None, path: str = wire.OTLP_TRACES
) -> httpx.Response:
    return client.post(path, content=body, headers=PROTOBUF if headers is None else headers)


# --- the real OpenTelemetry SDK, exporting to a real server ----------------------------------------------------------


@dataclass(frozen=True)
class Sent:
    status: int
    encoding: str | None  # the request's Content-Encoding
    content_type: str  # the request's
    answer_type: str  # the response's
    answer: bytes


@dataclass(frozen=True)
class SdkRun:
    spans: dict[tuple[str, str], ReadableSpan]  # by (service, name), as the SDK ended them
    sent: list[Sent]
    counters: dict[str, int]
    sessions: list[str]
    rows: dict[tuple[str, str], dict[str, Any]]  # by (trace_id, span_id), as stored


def trace_with_sdk(url: str, compression: Compression, sent: list[Sent]) -> dict[tuple[str, str], ReadableSpan]:
    """A parent span and its child, exported one by one as each ends (SimpleSpanProcessor) over OTLP/HTTP."""
    service = f"otlp-{compression.value}"
    session = requests.Session()
    session.trust_env = False  # no proxy between the exporter and the loopback server

    def seen(response: requests.Response, *args: Any, **kwargs: Any) -> None:
        request = response.request.headers
        sent.append(
            Sent(
                response.status_code,
                None if (encoding := request.get("Content-Encoding")) is None else str(encoding),
                str(request["Content-Type"]),
                response.headers.get("content-type", ""),
                response.content,
            )
        )

    session.hooks["response"].append(seen)
    exporter = OTLPSpanExporter(endpoint=url + "/v1/traces", compression=compression, timeout=10, session=session)
    memory = InMemorySpanExporter()
    resource = Resource.create(
        {"service.name": service, "ray.session_name": SESSION, "ray.job_id": JOB, "process.pid": 4242}
    )
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer(SCOPE, "1.0")
    linked = SpanContext(LINKED_TRACE, LINKED_SPAN, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    attributes: dict[str, Any] = {
        "http.route": "/predict",
        "retries": 3,
        "cached": True,
        "tags": ("a", "b"),
        "ratio": 0.5,
    }
    with tracer.start_as_current_span(
        "request", kind=SpanKind.SERVER, attributes=attributes, links=[Link(linked, {"link.why": "retry-of"})]
    ) as parent:
        parent.add_event("checkpoint", {"step": 7})
        with tracer.start_as_current_span("query", kind=SpanKind.CLIENT) as child:
            child.set_attribute("ray.task_id", TASK)
            child.set_status(Status(StatusCode.ERROR, "the query failed"))
    provider.shutdown()
    return {(service, s.name): s for s in memory.get_finished_spans()}


@pytest.fixture(scope="module")
def sdk_run(tmp_path_factory: pytest.TempPathFactory) -> SdkRun:
    """One `raysight server` on a free loopback port; the SDK exports a trace to it uncompressed, then one gzipped;
    once all is folded, the server stops and its store is read (read-only)."""
    data_dir = tmp_path_factory.mktemp("otlp-sdk") / "data"
    server = ServerProcess(data_dir).start()
    sent: list[Sent] = []
    try:
        spans = trace_with_sdk(server.url, Compression.NoCompression, sent)
        spans |= trace_with_sdk(server.url, Compression.Gzip, sent)
        with httpx.Client(base_url=server.url, timeout=5, trust_env=False) as http:
            deadline = time.monotonic() + 15
            while http.get("/api/raysight/ping").json()["ingest_backlog"]["batches"]:
                assert time.monotonic() < deadline, "the server did not fold what it acknowledged"
                time.sleep(0.05)
            doctor = http.get("/api/raysight/doctor").json()  # read after the folds (a doctor mid-fold may not be)
            sessions = [s["session"] for s in http.get("/api/raysight/sessions").json()["sessions"]]
    finally:
        server.stop()
    with duckdb.connect(str(data_dir / DB_FILE), read_only=True) as con:
        rows = {(r["trace_id"], r["span_id"]): r for r in span_rows(con)}
    return SdkRun(spans, sent, {k: doctor["counters"].get(k, 0) for k in SPAN_COUNTERS}, sessions, rows)


def row_of(run: SdkRun, span: ReadableSpan) -> dict[str, Any]:
    return run.rows[(format(span.context.trace_id, "032x"), format(span.context.span_id, "016x"))]


def test_sdk_exports_are_answered_as_otlp_says(sdk_run: SdkRun) -> None:
    """Each span ended was one export (SimpleSpanProcessor): two plain, two gzipped, each answered 200 with an empty
    ExportTraceServiceResponse in protobuf."""
    assert [(s.status, s.encoding, s.content_type) for s in sdk_run.sent] == [
        (200, None, "application/x-protobuf"),
        (200, None, "application/x-protobuf"),
        (200, "gzip", "application/x-protobuf"),
        (200, "gzip", "application/x-protobuf"),
    ]
    for s in sdk_run.sent:
        assert s.answer_type == "application/x-protobuf"
        assert not ExportTraceServiceResponse.FromString(s.answer).HasField("partial_success")
    assert sdk_run.counters == expect(spans=4, batches=4)
    assert sdk_run.sessions == [SESSION]  # a session known by its spans alone is listed


def test_sdk_spans_are_stored_with_their_ids_times_and_tree(sdk_run: SdkRun) -> None:
    assert len(sdk_run.rows) == 4 and len(sdk_run.spans) == 4
    for service in ("otlp-none", "otlp-gzip"):  # uncompressed, and gzipped
        parent, child = sdk_run.spans[(service, "request")], sdk_run.spans[(service, "query")]
        assert parent.context.trace_id == child.context.trace_id
        stored_parent, stored_child = row_of(sdk_run, parent), row_of(sdk_run, child)
        assert stored_parent["trace_id"] == stored_child["trace_id"] == format(parent.context.trace_id, "032x")
        assert stored_parent["parent_span_id"] is None
        assert stored_child["parent_span_id"] == format(parent.context.span_id, "016x") == stored_parent["span_id"]
        for span, row in ((parent, stored_parent), (child, stored_child)):
            assert (row["name"], row["start_ns"], row["end_ns"]) == (span.name, span.start_time, span.end_time)
            assert row["start_ns"] < row["end_ns"]
            assert (row["service"], row["session"], row["job_id"], row["pid"]) == (service, SESSION, JOB, 4242)
            assert row["scope"] == SCOPE
            resource = orjson.loads(row["resource"])
            assert resource["service.name"] == service and resource["telemetry.sdk.language"] == "python"
        assert (stored_parent["kind"], stored_child["kind"]) == ("server", "client")


def test_sdk_attributes_events_links_and_status_are_kept(sdk_run: SdkRun) -> None:
    for service in ("otlp-none", "otlp-gzip"):
        parent, child = (row_of(sdk_run, sdk_run.spans[(service, name)]) for name in ("request", "query"))
        assert orjson.loads(parent["attributes"]) == {
            "http.route": "/predict",
            "retries": 3,
            "cached": True,
            "tags": ["a", "b"],
            "ratio": 0.5,
        }
        event_ns = sdk_run.spans[(service, "request")].events[0].timestamp
        assert orjson.loads(parent["events"]) == [{"name": "checkpoint", "ns": event_ns, "attributes": {"step": 7}}]
        assert orjson.loads(parent["links"]) == [
            {
                "trace_id": format(LINKED_TRACE, "032x"),
                "span_id": format(LINKED_SPAN, "016x"),
                "attributes": {"link.why": "retry-of"},
            }
        ]
        assert (parent["status"], parent["status_message"]) == ("unset", None)
        assert (child["status"], child["status_message"]) == ("error", "the query failed")
        assert child["task_id"] == TASK and parent["task_id"] is None  # a span's attribute names its Ray task
        assert child["events"] is None and child["links"] is None


# --- OTLP/JSON ------------------------------------------------------------------------------------------------------

JSON_TRACE, JSON_PARENT, JSON_CHILD = "5B8EFFF798038103D269B633813FC60C", "EEE19B7EC3C1B174", "0102030405060708"


def json_span(
    name: str, trace: str = JSON_TRACE, span: str = JSON_PARENT, start: str = str(T0), end: str = str(T0 + 5_000)
) -> dict[str, Any]:
    return {"traceId": trace, "spanId": span, "name": name, "startTimeUnixNano": start, "endTimeUnixNano": end}


def json_export(*spans: dict[str, Any]) -> bytes:
    return orjson.dumps(
        {
            "resourceSpans": [
                {
                    "resource": {
                        "attributes": [
                            {"key": "service.name", "value": {"stringValue": "json-svc"}},
                            {"key": "ray.session_name", "value": {"stringValue": SESSION}},
                            {"key": "ray.job_id", "value": {"stringValue": JOB}},
                        ]
                    },
                    "scopeSpans": [{"scope": {"name": "json-scope"}, "spans": list(spans)}],
                }
            ]
        }
    )


def test_otlp_json_hex_ids_string_times_and_integer_enums(server: TestClient) -> None:
    parent = {
        **json_span("GET /items"),
        "parentSpanId": "",  # a root, as some exporters write it
        "kind": 2,
        "attributes": [
            {"key": "http.status_code", "value": {"intValue": "503"}},
            {"key": "ok", "value": {"boolValue": False}},
            {"key": "ratio", "value": {"doubleValue": 0.25}},
            {"key": "blob", "value": {"bytesValue": "AQID"}},  # bytes stay base64: only IDs are hex in OTLP/JSON
            {"key": "list", "value": {"arrayValue": {"values": [{"stringValue": "x"}, {"intValue": "2"}]}}},
            {"key": "map", "value": {"kvlistValue": {"values": [{"key": "k", "value": {"stringValue": "v"}}]}}},
        ],
        "events": [
            {"timeUnixNano": str(T0 + 100), "name": "retry", "attributes": [{"key": "n", "value": {"intValue": 1}}]}
        ],
        "links": [{"traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "b7ad6b7169203331"}],
        "status": {"code": 2, "message": "upstream down"},
    }
    child = {
        **json_span("SELECT", span=JSON_CHILD, start=str(T0 + 10), end=str(T0 + 4_000)),
        "parentSpanId": JSON_PARENT.lower(),
        "kind": 3,
        "status": {"code": 1},
    }
    reply = server.post("/v1/traces", content=json_export(parent, child), headers=JSON)
    assert reply.status_code == 200 and reply.headers["content-type"] == "application/json"
    assert reply.json() == {}  # an ExportTraceServiceResponse with nothing refused
    settle(server)
    rows = stored(server)
    trace = JSON_TRACE.lower()  # OTLP/JSON's hex is case-insensitive; the store keeps lowercase
    assert ids(rows) == [(trace, JSON_CHILD), (trace, JSON_PARENT.lower())]
    child_row, parent_row = rows
    assert (parent_row["name"], parent_row["kind"], parent_row["parent_span_id"]) == ("GET /items", "server", None)
    assert (parent_row["start_ns"], parent_row["end_ns"]) == (T0, T0 + 5_000)
    assert (parent_row["status"], parent_row["status_message"]) == ("error", "upstream down")
    assert orjson.loads(parent_row["attributes"]) == {
        "http.status_code": 503,
        "ok": False,
        "ratio": 0.25,
        "blob": "AQID",
        "list": ["x", 2],
        "map": {"k": "v"},
    }
    assert orjson.loads(parent_row["events"]) == [{"name": "retry", "ns": T0 + 100, "attributes": {"n": 1}}]
    assert orjson.loads(parent_row["links"]) == [
        {"trace_id": "0af7651916cd43dd8448eb211c80319c", "span_id": "b7ad6b7169203331", "attributes": {}}
    ]
    assert (child_row["name"], child_row["kind"], child_row["parent_span_id"]) == (
        "SELECT",
        "client",
        "eee19b7ec3c1b174",
    )
    assert (child_row["start_ns"], child_row["end_ns"], child_row["status"]) == (T0 + 10, T0 + 4_000, "ok")
    for row in rows:
        assert (row["service"], row["session"], row["job_id"], row["scope"]) == ("json-svc", SESSION, JOB, "json-scope")
    assert span_counters(server) == expect(spans=2, batches=1)


def test_otlp_json_partial_success_is_answered_in_json(server: TestClient) -> None:
    good = json_span("good", span="1111111111111111")
    backwards = json_span("backwards", span="2222222222222222", start=str(T0 + 9), end=str(T0))
    reply = server.post("/v1/traces", content=json_export(good, backwards), headers=JSON)
    assert reply.status_code == 200 and reply.headers["content-type"] == "application/json"
    partial = reply.json()["partialSuccess"]
    assert int(partial["rejectedSpans"]) == 1  # int64: a string in proto3's JSON
    assert "'backwards'" in partial["errorMessage"] and "ends before it starts" in partial["errorMessage"]
    settle(server)
    assert ids(stored(server)) == [(JSON_TRACE.lower(), "1111111111111111")]
    assert span_counters(server) == expect(spans=1, batches=1, rejected=1)


# --- malformed input ------------------------------------------------------------------------------------------------


def metric(client: TestClient, line_start: str) -> float:
    lines = [line for line in client.get("/metrics").text.splitlines() if line.startswith(line_start + " ")]
    assert len(lines) == 1, f"no metric {line_start}"
    return float(lines[0].rsplit(" ", 1)[1])


def test_malformed_exports_get_a_clear_4xx_and_harm_nothing(server: TestClient) -> None:
    good = pb_export(pb_span("good"))
    gzipped = {**PROTOBUF, "Content-Encoding": "gzip"}
    bad: list[tuple[bytes, dict[str, str], int, str]] = [
        (b"this is not protobuf", PROTOBUF, 400, "not an OTLP trace export (protobuf)"),
        (b"[1, 2]", JSON, 400, 'a JSON object {"resourceSpans"'),
        (b"{not json", JSON, 400, "not an OTLP trace export (JSON)"),
        (b'{"resourceSpans": "many"}', JSON, 400, "not an OTLP trace export (JSON)"),
        (json_export(json_span("x", trace="zz" * 16)), JSON, 400, "an OTLP/JSON ID is hex: 'zzzz"),
        (good, gzipped, 400, "body is not gzip"),
        (b"\0" * (MAX_BODY + 1), PROTOBUF, 413, f"body over {MAX_BODY} bytes"),
        (gzip.compress(b"\0" * (MAX_BODY + 1)), gzipped, 413, f"body over {MAX_BODY} bytes decompressed"),
        (good, {"Content-Type": "text/plain"}, 415, "application/x-protobuf"),
        (good, {"Content-Type": "application/x-www-form-urlencoded"}, 415, "application/x-protobuf"),
    ]
    for body, headers, status, message in bad:
        reply = post_traces(server, body, headers)
        assert reply.status_code == status, (body[:40], headers, reply.text)
        answer = reply.json()
        assert answer["ok"] is False and answer["status"] == status and message in answer["error"], answer
    settle(server)
    assert stored(server) == [] and span_counters(server) == expect()
    assert metric(server, 'raysight_ingest_rejected_total{reason="bad_otlp"}') == 6
    assert metric(server, 'raysight_ingest_rejected_total{reason="too_large"}') == 2
    empty = post_traces(server, b"")  # an export of nothing: valid protobuf, nothing to keep
    assert (empty.status_code, empty.content) == (200, b"")
    for body, headers in ((good, PROTOBUF), (gzip.compress(pb_export(pb_span("zipped", span=b"\2" * 8))), gzipped)):
        reply = post_traces(server, body, headers)
        assert (reply.status_code, reply.content, reply.headers["content-type"]) == (200, b"", "application/x-protobuf")
    settle(server)
    assert [r["name"] for r in stored(server)] == ["good", "zipped"]
    assert span_counters(server) == expect(spans=2, batches=2)


def test_the_client_raises_the_receiver_s_415_as_unsupported_encoding(server: TestClient) -> None:
    """An export in an encoding the receiver does not read: the SDK raises its error of raysight's tree (415)."""

    def brotli(request: httpx.Request) -> httpx.Response:
        request.headers["Content-Encoding"] = "br"
        return server._transport.handle_request(request)

    refused = pytest.raises(UnsupportedEncoding, match="Content-Encoding 'br' is not supported")
    with Client("http://testserver", transport=httpx.MockTransport(brotli)) as client, refused:
        client.export_spans(pb_export(pb_span("good")), None)


# --- partial success, duplicates ------------------------------------------------------------------------------------


def test_partial_success_keeps_the_good_spans_and_counts_the_rest(server: TestClient) -> None:
    body = pb_export(
        pb_span("zero-trace", trace=bytes(16)),
        pb_span("good", span=b"\x0a" * 8, parent=b"\x0b" * 8),
        pb_span("short-span", span=b"\x01\x02\x03\x04"),
        pb_span("backwards", span=b"\x0c" * 8, start=T0 + 10, end=T0),
    )
    reply = post_traces(server, body)
    assert reply.status_code == 200 and reply.headers["content-type"] == "application/x-protobuf"
    partial = ExportTraceServiceResponse.FromString(reply.content).partial_success
    assert partial.rejected_spans == 3
    assert "'zero-trace'" in partial.error_message and "trace ID is 16 bytes" in partial.error_message  # the first
    settle(server)
    [row] = stored(server)
    assert (row["trace_id"], row["span_id"], row["parent_span_id"]) == (bytes(range(1, 17)).hex(), "0a" * 8, "0b" * 8)
    assert (row["name"], row["start_ns"], row["end_ns"], row["kind"]) == ("good", T0, T0 + 1_000, "unspecified")
    assert span_counters(server) == expect(spans=1, batches=1, rejected=3)
    # an export of refused spans only: answered, nothing journalled
    only_bad = post_traces(server, pb_export(pb_span("zero-span", span=bytes(8)), pb_span("p", parent=b"\1\2")))
    partial = ExportTraceServiceResponse.FromString(only_bad.content).partial_success
    assert only_bad.status_code == 200 and partial.rejected_spans == 2
    assert "'zero-span'" in partial.error_message and "span ID is 8 bytes" in partial.error_message
    settle(server)
    assert len(stored(server)) == 1 and span_counters(server) == expect(spans=1, batches=1, rejected=5)


def test_a_resent_export_stores_each_span_once(server: TestClient) -> None:
    body = pb_export(pb_span("a", span=b"\x0a" * 8), pb_span("b", span=b"\x0b" * 8))
    for _ in range(2):
        assert post_traces(server, body).status_code == 200
        settle(server)
    assert [r["name"] for r in stored(server)] == ["a", "b"]
    assert span_counters(server) == expect(spans=2, deduplicated=2, batches=2)
    # resent without waiting (the copies may fold together), and once within one export, and once renamed
    twice = pb_export(pb_span("c", span=b"\x0c" * 8), pb_span("c", span=b"\x0c" * 8))
    renamed = pb_export(pb_span("a renamed", span=b"\x0a" * 8))
    for copy in (twice, twice, renamed):
        assert post_traces(server, copy).status_code == 200
    settle(server)
    assert [r["name"] for r in stored(server)] == ["a", "b", "c"]  # the first copy of a span is the one kept
    assert span_counters(server) == expect(spans=3, deduplicated=2 + 3 + 1, batches=5)


# --- the ingest key -------------------------------------------------------------------------------------------------

SECRETS = Secrets(token="read-secret", ingest_key="write-secret", admin_token="admin-secret")
READ = {"Authorization": "Bearer read-secret"}


def test_beyond_loopback_otlp_takes_the_ingest_key_and_the_key_reads_nothing(tmp_path: Path) -> None:
    with TestClient(
        create_app(Settings(tmp_path / "data").replace(secrets=SECRETS, fold_linger_s=0, fold_rest=0))
    ) as client:
        span = iter(range(1, 100))

        def export() -> bytes:
            return pb_export(pb_span("s", span=bytes([next(span)]) * 8))

        refused = [
            ("/v1/traces", {}),
            ("/v1/traces", READ),  # the read token does not grant writes
            ("/v1/traces", {"Authorization": "Bearer write-secret"}),  # the key is not taken as a bearer token
            ("/v1/traces", {"x-raysight-ingest-key": "read-secret"}),
            ("/ingest/otlp/wrong-secret/v1/traces", {}),
            ("/ingest/otlp/read-secret/v1/traces", {"x-raysight-ingest-key": "write-secret"}),  # the path's key
            ("/v1/traces?key=wrong", {}),
        ]
        for path, headers in refused:
            reply = post_traces(client, export(), {**PROTOBUF, **headers}, path)
            assert reply.status_code == 401 and "ingest key" in reply.json()["error"], (path, headers, reply.text)
        granted = [
            ("/v1/traces", {"x-raysight-ingest-key": "write-secret"}),  # as an OTLP exporter's headers= sends it
            ("/v1/traces", {"X-Raysight-Ingest-Key": "write-secret"}),
            ("/ingest/otlp/write-secret/v1/traces", {}),  # for exporters that take a URL only
            ("/v1/traces?key=write-secret", {}),
        ]
        for path, headers in granted:
            reply = post_traces(client, export(), {**PROTOBUF, **headers}, path)
            assert (reply.status_code, reply.content) == (200, b""), (path, headers, reply.text)
        settle(client)
        for key in ("write-secret", None):  # the ingest key reads nothing
            auth = {"Authorization": f"Bearer {key}"} if key else {}
            assert client.get("/api/raysight/doctor", headers=auth).status_code == 401
            assert client.get("/api/raysight/sessions", headers=auth).status_code == 401
        doctor = client.get("/api/raysight/doctor", headers=READ)
        assert doctor.status_code == 200
        assert {k: doctor.json()["counters"].get(k, 0) for k in SPAN_COUNTERS} == expect(spans=4, batches=4)
        assert [r["span_id"] for r in stored(client)] == [bytes([n] * 8).hex() for n in range(8, 12)]  # the granted


# --- acknowledged means durable -------------------------------------------------------------------------------------


def test_an_acknowledged_export_survives_a_restart_before_it_is_folded(tmp_path: Path) -> None:
    """The 200 comes once the export is in the journal (on disk), before it is folded (the fold lingers 30 s here);
    the app closes meanwhile, and the next start folds it from the journal."""
    data_dir = tmp_path / "data"
    body = pb_export(pb_span("kept", span=b"\x0d" * 8), pb_span("kept too", span=b"\x0e" * 8, parent=b"\x0d" * 8))
    with TestClient(create_app(Settings(data_dir).replace(fold_linger_s=30))) as client:
        reply = post_traces(client, body)
        assert (reply.status_code, reply.content) == (200, b"")
        assert raysight(client).writer.backlog()["batches"] == 1  # acknowledged, not yet folded
        journalled = b"".join(path.read_bytes() for path in (data_dir / "journal").glob("*.log"))
        assert b'"name":"kept too"' in journalled  # on disk when answered
    with TestClient(create_app(Settings(data_dir).replace(fold_linger_s=0, fold_rest=0))) as client:
        settle(client)
        assert [(r["name"], r["parent_span_id"]) for r in stored(client)] == [("kept", None), ("kept too", "0d" * 8)]
        assert span_counters(client) == expect(spans=2, batches=1)


# --- found in review: each failed before its fix ---------------------------------------------------------------


def test_the_json_content_type_is_read_whatever_its_case(server: TestClient) -> None:
    reply = server.post(
        "/v1/traces", content=json_export(json_span("upper")), headers={"Content-Type": "Application/JSON"}
    )
    assert reply.status_code == 200, reply.text


def test_deflate_is_inflated_and_another_encoding_named(server: TestClient) -> None:
    reply = post_traces(
        server, zlib.compress(pb_export(pb_span("deflated"))), {**PROTOBUF, "Content-Encoding": "deflate"}
    )
    assert reply.status_code == 200, reply.text
    reply = post_traces(server, pb_export(pb_span("brotli")), {**PROTOBUF, "Content-Encoding": "br"})
    assert reply.status_code == 415 and "'br'" in reply.json()["error"]


def test_the_spans_an_exporter_dropped_are_counted(server: TestClient) -> None:
    """raysight's instrumentation says in each export what it dropped since its last one that went through."""
    for dropped in ("5", "2", "not-a-number", "99999999999"):
        reply = post_traces(
            server, pb_export(pb_span(f"after-{dropped}")), {**PROTOBUF, "X-Raysight-Spans-Dropped": dropped}
        )
        assert reply.status_code == 200
    settle(server)
    deadline = time.monotonic() + 10
    while server.get("/api/raysight/doctor").json()["counters"].get("spans_dropped_at_source") != 7:
        assert time.monotonic() < deadline, server.get("/api/raysight/doctor").json()["counters"]
        time.sleep(0.05)


def test_the_traces_list_is_paged_with_its_total_and_refuses_a_bad_offset_by_name(server: TestClient) -> None:
    """Five traces, the newest failed: a page of two after an offset, the total that match beside it, under each
    filter; a page past the end is empty with its total; a bad offset is a 400 that names it."""
    traces = [f"{n:032x}" for n in range(1, 6)]
    spans = [
        json_span(f"root{n}", trace=t, start=str(T0 + n * 1_000), end=str(T0 + n * 1_000 + 500))
        for n, t in enumerate(traces)
    ]
    spans[-1]["status"] = {"code": 2, "message": "it failed"}
    assert server.post("/v1/traces", content=json_export(*spans), headers=JSON).status_code == 200
    settle(server)

    def listed(**params: Any) -> tuple[int, list[str]]:
        answer = server.get("/api/raysight/traces", params={"session": SESSION, **params}).json()
        return answer["total"], [t["trace_id"] for t in answer["traces"]]

    newest_first = traces[::-1]
    assert listed() == (5, newest_first)
    assert listed(limit=2, offset=2) == (5, newest_first[2:4])
    assert listed(limit=2, offset=4) == (5, newest_first[4:])
    assert listed(limit=2, offset=9) == (5, [])
    assert listed(error="true", limit=1) == (1, [traces[-1]])
    assert listed(name="root1") == (1, [traces[1]])
    for offset in ("-1", "two"):
        reply = server.get("/api/raysight/traces", params={"session": SESSION, "offset": offset})
        assert reply.status_code == 400 and "offset" in reply.json()["error"], reply.text


def test_a_resource_kept_once_is_kept_again_after_the_session_that_held_it_is_deleted(server: TestClient) -> None:
    """The server inserts a process's resource once (not with each of its exports); deleting the session whose spans
    named it deletes it, and the next export that names it stores it again."""

    def export(span: bytes) -> bytes:
        request = ExportTraceServiceRequest()
        resource_spans = request.resource_spans.add()
        resource_spans.resource.attributes.add(key="ray.session_name").value.string_value = SESSION
        resource_spans.scope_spans.add().spans.extend([pb_span("work", span=span)])
        return request.SerializeToString()

    for span in (b"\x01" * 8, b"\x02" * 8):
        assert post_traces(server, export(span)).status_code == 200
        settle(server)
    assert [r["resource"] is not None for r in stored(server)] == [True, True]
    assert raysight(server).writer.call(lambda store: store.delete_session(SESSION)).result(timeout=15)
    assert stored(server) == []
    assert post_traces(server, export(b"\x03" * 8)).status_code == 200
    settle(server)
    (again,) = stored(server)
    assert SESSION in again["resource"], again
