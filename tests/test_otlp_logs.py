"""The OTLP/HTTP log receiver (`/v1/logs`): the real OpenTelemetry SDK's log exporter (Python logging through its
`LoggingHandler`) sending to a real server, protobuf and gzip; the records read back by `raysight logs` as users run
it, with their level, time, trace and span; OTLP/JSON; a session taken from the resource or the newest; records
refused alone; malformed bodies; resent exports appended; the ingest key in the path."""

from __future__ import annotations

import gzip
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.proto.resource.v1.resource_pb2 import Resource as PbResource
from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from starlette.testclient import TestClient

from raysight.cli import main
from raysight.ingest.otlp import key_values
from raysight.server.app import create_app
from raysight.server.auth import Secrets
from raysight.settings import Settings
from raysight.signals.log_lines import otlp_logs
from tests.ray_scenarios import ServerProcess, wait_folded

SESSION = "session_2026-11-24_12-00-00_000000_1"
LATER = "session_2026-11-24_13-00-00_000000_2"
AT_NS = 1_795_000_000_123_456_789  # 2026-11-18 …,123 UTC


def logs(url: str, *args: str) -> list[dict[str, Any]]:
    """`raysight logs … --format json` as a user runs it."""
    result = CliRunner().invoke(main, ["logs", "--server", url, "--format", "json", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.output.splitlines() if line.strip()]


def log_with_sdk(url: str, compression: Compression) -> tuple[str, str]:
    """Python logging through the SDK's LoggingHandler and OTLP/HTTP exporter: a warning inside a span, then an info
    outside it; the span's trace and span IDs (hex)."""
    resource = Resource.create(
        {"service.name": "shop", "process.pid": 4242, "ray.session_name": SESSION, "host.name": "shop-host"}
    )
    provider = LoggerProvider(resource=resource)
    exporter = OTLPLogExporter(endpoint=f"{url}/v1/logs", compression=compression)
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    logger = logging.getLogger(f"shop.{compression.value}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    handler = LoggingHandler(logger_provider=provider)
    logger.addHandler(handler)
    tracer = TracerProvider().get_tracer("shop")
    try:
        with tracer.start_as_current_span("checkout") as span:
            logger.warning("card declined for order %d", 17, extra={"order": 17})
            context = span.get_span_context()
        logger.info("retrying\nin a moment")  # a message of two lines stays one record
    finally:
        logger.removeHandler(handler)
        provider.shutdown()
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(tmp_path_factory.mktemp("otlp-logs") / "data") as server:
        yield server


@pytest.mark.parametrize("compression", [Compression.NoCompression, Compression.Gzip])
def test_the_sdk_s_log_records_are_lines_raysight_logs_reads_with_their_level_trace_and_span(
    server: ServerProcess, compression: Compression
) -> None:
    trace_id, span_id = log_with_sdk(server.url, compression)
    wait_folded(server.url)
    lines = [line for line in logs(server.url, "--session", SESSION, "--file", "otlp-shop-4242") if
             f"shop.{compression.value}" in line["text"]]  # fmt: skip
    assert [json.loads(line["text"])["message"] for line in lines] == [
        "card declined for order 17",
        "retrying\nin a moment",
    ]
    warning, info = lines
    assert (warning["level"], warning["trace_id"], warning["span_id"]) == ("WARNING", trace_id, span_id)
    assert json.loads(warning["text"])["order"] == 17
    assert (info["level"], info["trace_id"], info["span_id"]) == ("INFO", None, None)
    assert (warning["name"], warning["pid"], warning["host"]) == ("otlp-shop-4242.log", 4242, "shop-host")
    assert abs(warning["ts_ns"] - time.time_ns()) < 60 * 10**9  # the record's time, to the millisecond
    only = logs(server.url, "--session", SESSION, "--level", "WARNING", "--grep", f"shop.{compression.value}")
    assert [line["trace_id"] for line in only] == [trace_id]


def export_of(*records: LogRecord, resource: dict[str, Any] | None = None) -> ExportLogsServiceRequest:
    return ExportLogsServiceRequest(
        resource_logs=[
            ResourceLogs(
                resource=PbResource(attributes=key_values(resource or {"service.name": "batch"})),
                scope_logs=[ScopeLogs(log_records=list(records))],
            )
        ]
    )


def record(text: str, **fields: Any) -> LogRecord:
    return LogRecord(time_unix_nano=AT_NS, body=AnyValue(string_value=text), **fields)


def test_otlp_json_with_hex_ids_in_the_resource_s_session_and_records_refused_alone(server: ServerProcess) -> None:
    document = {
        "resourceLogs": [
            {
                "resource": {"attributes": [{"key": "ray.session_name", "value": {"stringValue": SESSION}}]},
                "scopeLogs": [
                    {
                        "scope": {"name": "json.scope"},
                        "logRecords": [
                            {
                                "timeUnixNano": str(AT_NS),
                                "severityNumber": 17,
                                "body": {"kvlistValue": {"values": [{"key": "k", "value": {"intValue": "3"}}]}},
                                "traceId": "5b8efff798038103d269b633813fc60c",
                                "spanId": "eee19b7ec3c1b174",
                            },
                            {"timeUnixNano": str(AT_NS), "body": {"stringValue": "bad"}, "traceId": "abcd"},
                        ],
                    }
                ],
            }
        ]
    }
    reply = httpx.post(f"{server.url}/v1/logs", json=document, timeout=10)
    assert reply.status_code == 200, reply.text
    assert reply.json()["partialSuccess"]["rejectedLogRecords"] == "1"
    wait_folded(server.url)
    (line,) = logs(server.url, "--session", SESSION, "--grep", "json.scope")
    assert (line["level"], line["trace_id"], line["span_id"]) == ("ERROR", "5b8efff798038103d269b633813fc60c",
                                                                   "eee19b7ec3c1b174")  # fmt: skip
    assert json.loads(json.loads(line["text"])["message"]) == {"k": 3}
    assert (line["name"], line["host"]) == ("otlp-unknown.log", otlp_logs.HOST) and line[
        "ts_ns"
    ] == AT_NS // 10**6 * 10**6


def test_a_resent_export_is_appended_and_a_resource_without_a_session_goes_to_the_newest(tmp_path: Path) -> None:
    with TestClient(create_app(Settings(tmp_path / "data").replace(fold_linger_s=0, fold_rest=0))) as client:
        nowhere = export_of(record("before any session"))
        reply = client.post("/v1/logs", content=nowhere.SerializeToString(), headers=PROTOBUF)
        answer = ExportLogsServiceResponse.FromString(reply.content)
        assert reply.status_code == 200 and answer.partial_success.rejected_log_records == 1
        assert "ray.session_name" in answer.partial_success.error_message
        for session in (SESSION, LATER):  # LATER started last: the newest
            named = export_of(record(f"in {session}"), resource={"ray.session_name": session})
            assert client.post("/v1/logs", content=named.SerializeToString(), headers=PROTOBUF).status_code == 200
        wait_folded(client)  # the sessions known
        body = gzip.compress(export_of(record("first"), record("second")).SerializeToString())
        for _ in range(2):  # an exporter's retry: stored again, after the first copy
            reply = client.post("/v1/logs", content=body, headers={**PROTOBUF, "Content-Encoding": "gzip"})
            assert reply.status_code == 200 and not ExportLogsServiceResponse.FromString(reply.content).ListFields()
        wait_folded(client)
        lines = client.get("/api/raysight/logs", params={"session": LATER}).json()["rows"]
    messages = [json.loads(line["text"])["message"] for line in lines]
    assert messages == [f"in {LATER}", "first", "second", "first", "second"]
    offsets = [line["byte_offset"] for line in lines if line["name"] == "otlp-batch.log"]
    assert offsets == [0, 1, 2, 3]


PROTOBUF = {"Content-Type": "application/x-protobuf"}


@pytest.mark.parametrize(
    ("body", "headers", "status", "says"),
    [
        (b"\xff\x00garbage", PROTOBUF, 400, "not an OTLP log export (protobuf)"),
        (b'{"resourceLogs": [{"scopeLogs": [{"logRecords": [{"traceId": "zz"}]}]}]}', {}, 400, "hex"),
        (b"[1, 2]", {"Content-Type": "application/json"}, 400, "JSON object"),
        (b"x", {**PROTOBUF, "Content-Encoding": "br"}, 415, "'br'"),
    ],
)
def test_malformed_log_exports_get_a_clear_4xx(
    tmp_path: Path, body: bytes, headers: dict, status: int, says: str
) -> None:
    headers = {"Content-Type": "application/json", **headers}
    with TestClient(create_app(Settings(tmp_path / "data").replace(fold_linger_s=0, fold_rest=0))) as client:
        reply = client.post("/v1/logs", content=body, headers=headers)
        assert reply.status_code == status and says in reply.json()["error"], reply.text
        wait_folded(client)
        assert client.get("/api/raysight/doctor").json()["counters"].get("log_lines", 0) == 0


def test_the_ingest_key_goes_in_the_path_where_the_exporter_appends_v1_logs(tmp_path: Path) -> None:
    secrets = Secrets(token="read-token", ingest_key="write-key", admin_token="admin-token")
    body = export_of(record("keyed"), resource={"ray.session_name": SESSION}).SerializeToString()
    with TestClient(
        create_app(Settings(tmp_path / "data").replace(secrets=secrets, fold_linger_s=0, fold_rest=0))
    ) as client:
        assert client.post("/v1/logs", content=body, headers=PROTOBUF).status_code == 401
        assert client.post("/ingest/otlp/wrong/v1/logs", content=body, headers=PROTOBUF).status_code == 401
        assert client.post("/ingest/otlp/write-key/v1/logs", content=body, headers=PROTOBUF).status_code == 200


def test_severity_numbers_read_as_python_s_level_names() -> None:
    assert [otlp_logs.level(n) for n in (0, 1, 5, 9, 12, 13, 17, 21, 24)] == [
        None, "TRACE", "DEBUG", "INFO", "INFO", "WARNING", "ERROR", "CRITICAL", "CRITICAL",
    ]  # fmt: skip
