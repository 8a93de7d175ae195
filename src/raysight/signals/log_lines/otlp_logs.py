"""OTLP/HTTP log exports (``ExportLogsServiceRequest``, protobuf or JSON) → batches of log lines shaped as a node
agent sends them (``parse.py``), so that they are stored, indexed and queried as every other line. Pure.

Each resource is a file of its own, ``otlp-<service>[-<pid>].log``, keyed by its attributes, to which the store
appends (``"append"``: an exporter sends no offsets, so a resent export is stored again, as OTLP's at-least-once
delivery allows). A record becomes one JSON line as Ray's JSON logging writes them — ``asctime`` (UTC),
``levelname`` (Python's), ``message``, ``name`` (its scope), ``trace_id``, ``span_id``, then its attributes — whose
level, time, trace and span the log store reads as it does theirs. The session is the resource's
``ray.session_name``, else the caller's default (the newest); a batch per host (``host.name``, else ``otlp``). A
record the store cannot keep (an ID of the wrong size, a time past 2262) is refused alone, as OTLP's partial success
says.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from raysight import wire
from raysight.ingest import otlp
from raysight.ingest.ids import SESSION_NAME

HOST = "otlp"  # the host of a resource that names none
LEVELS = ((21, "CRITICAL"), (17, "ERROR"), (13, "WARNING"), (9, "INFO"), (5, "DEBUG"), (1, "TRACE"))  # OTel's numbers
FIXED = ("asctime", "levelname", "message", "name", "trace_id", "span_id")  # a line's keys before the attributes


@dataclass
class LogsExport:
    batches: list[wire.AgentLogs] = field(default_factory=list)  # agent-shaped batches, one per host
    lines: int = 0
    rejected: int = 0  # records refused alone
    reason: str | None = None  # why the first of them was

    def refuse(self, count: int, why: str) -> None:
        self.rejected += count
        self.reason = self.reason or why


def parse(body: bytes, json: bool, default_session: str | None, now_ns: int, limit: int) -> LogsExport:
    """The log records of an OTLP export as agent batches: ``default_session`` is the session of resources that name
    none; ``now_ns`` stamps records that carry no time; TooMany past ``limit`` records (counted before any is
    decoded)."""
    request = otlp.decoded(ExportLogsServiceRequest(), body, json, limit, signal="Logs", items="logRecords")
    export = LogsExport()
    hosts: dict[str, list[wire.LogFile]] = {}
    for resource_logs in request.resource_logs:
        resource = otlp.attributes(resource_logs.resource.attributes)
        records = [
            (name, record)
            for scope in resource_logs.scope_logs
            for name in (scope.scope.name[: otlp.SCOPE_MAX],)  # (read once: each read copies it)
            for record in scope.log_records
        ]
        if not records:
            continue
        session = otlp.text_id(resource.get(wire.ATTR_SESSION)) or default_session
        if session is None:
            export.refuse(len(records), "no Ray session known yet: give the resource a ray.session_name attribute")
            continue
        if not SESSION_NAME.fullmatch(session):
            export.refuse(len(records), f"ray.session_name {session[:80]!r} is not a Ray session's name (session_…)")
            continue
        lines, times = [], []
        for scope, record in records:
            try:
                at_ns = record.time_unix_nano or record.observed_time_unix_nano or now_ns
                lines.append(line(record, scope, at_ns))
                times.append(at_ns)
            except ValueError as exc:
                export.refuse(1, str(exc))
        if lines:
            host = otlp.text_id(resource.get("host.name")) or HOST
            hosts.setdefault(host, []).append(_file(resource, session, lines, max(times)))
            export.lines += len(lines)
    export.batches = [{"host": host, "utc_offset_s": 0, "files": files} for host, files in hosts.items()]
    return export


def line(record: LogRecord, scope: str, at_ns: int) -> str:
    """A record as one JSON line (Ray's JSON logging's keys); ValueError when it cannot be kept. (Each field is read
    once, as in the spans' ``parse.row``.)"""
    trace_id, span_id, body = record.trace_id, record.span_id, record.body
    if trace_id and len(trace_id) != 16:
        raise ValueError("a log record's trace ID is 16 bytes")
    if span_id and len(span_id) != 8:
        raise ValueError("a log record's span ID is 8 bytes")
    if at_ns > otlp.INT64_MAX:
        raise ValueError("a log record's time is past the year 2262")
    stamp = datetime.fromtimestamp(at_ns // 1_000_000 / 1000, UTC)
    message = body.string_value if body.WhichOneof("value") == "string_value" else otlp.value(body)
    fields: dict[str, Any] = {
        "asctime": f"{stamp:%Y-%m-%d %H:%M:%S},{stamp.microsecond // 1000:03d}",
        "levelname": level(record.severity_number) or record.severity_text.upper() or None,
        "message": message if isinstance(message, str) or message is None else orjson.dumps(message).decode(),
        "name": scope or None,
        "trace_id": trace_id.hex() if any(trace_id) else None,
        "span_id": span_id.hex() if any(span_id) else None,
    }
    attributes = otlp.attributes(record.attributes)
    fields.update((k, v) for k, v in attributes.items() if k not in FIXED)
    return orjson.dumps({k: v for k, v in fields.items() if v is not None}).decode()


def level(severity_number: int) -> str | None:
    """OpenTelemetry's severity number as Python's level name (TRACE below DEBUG), which a line's level is read as
    rather than its text (the SDK writes WARN); None when unspecified."""
    return next((name for low, name in LEVELS if severity_number >= low), None)


def _file(resource: dict[str, Any], session: str, lines: list[str], last_ns: int) -> wire.LogFile:
    """One resource's lines as an agent batch's file, appended to what the store has of it."""
    service = otlp.text_id(resource.get("service.name")) or "unknown"
    pid = resource.get(wire.ATTR_PID)
    pid = pid if type(pid) is int and 0 < pid < 2**31 else None
    name = f"otlp-{service}" + (f"-{pid}" if pid else "") + ".log"
    key = "otlp-" + hashlib.sha256(orjson.dumps(resource, option=orjson.OPT_SORT_KEYS)).hexdigest()[:24]
    job = otlp.text_id(resource.get(wire.ATTR_JOB_ID))
    count = len(lines)
    return {
        "session": session,
        "key": key,
        "name": name[:256],
        "path": name[:256],
        "stream": "stdout",
        "worker_id": otlp.text_id(resource.get(wire.ATTR_WORKER_ID)),
        "job_id": job,
        "pid": pid,
        "append": True,
        "end": count,
        "read_ns": last_ns,
        "offsets": list(range(count)),
        "texts": lines,
        "continued": [False] * count,
        "markers": [False] * count,
        "jobs": [job] * count,
    }


def response(rejected: int, reason: str | None, json: bool) -> bytes:
    """The export's answer: empty, or the partial success that counts the records refused."""
    answer = ExportLogsServiceResponse()
    if rejected:
        answer.partial_success.rejected_log_records = rejected
        answer.partial_success.error_message = reason or ""
    return otlp.encoded(answer, json)
