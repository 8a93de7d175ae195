"""OTLP/HTTP trace exports (``ExportTraceServiceRequest``, protobuf or JSON) → span rows. Pure.

A row is what the store keeps of a span: its IDs in lowercase hex, name, kind, times, status, its attributes, events
and links as JSON text, and the Ray IDs read from its attributes or its resource's (``wire.py``), by
which a span leads to its task, worker and logs. A resource's attributes are kept once, under their digest, which
each of its spans names (``resource_id``): a resource is any size, and a thousand spans of one must not copy it a
thousand times. A span the receiver cannot keep (an ID of the wrong size, an end before its start) is rejected alone,
as OTLP's partial success says; a body that is not an export, or of more than :data:`MAX_SPANS`, is refused whole.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import orjson
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from raysight import wire
from raysight.ingest.otlp import INT64_MAX, SCOPE_MAX, attributes, decoded, encoded, text_id
from raysight.tables import Table, columns

KINDS = {v: k.removeprefix("SPAN_KIND_").lower() for k, v in Span.SpanKind.items()}
STATUSES = {v: k.removeprefix("STATUS_CODE_").lower() for k, v in Status.StatusCode.items()}
NAME_MAX = 1024
MAX_SPANS = 65_536  # in one export, resources and scopes counted too: 128 of the SDK's batches, 8 of a collector's
ID_COLUMNS = {  # column ← attribute (of the span, else of its resource)
    "session": wire.ATTR_SESSION,
    "job_id": wire.ATTR_JOB_ID,
    "node_id": wire.ATTR_NODE_ID,
    "worker_id": wire.ATTR_WORKER_ID,
    "task_id": wire.ATTR_TASK_ID,
    "actor_id": wire.ATTR_ACTOR_ID,
    "request_id": wire.ATTR_SERVE_REQUEST_ID,
}
_COLUMN_OF = {name: column for column, name in ID_COLUMNS.items()}
# Trace spans as OTLP brought them (raw input): each once, however often it was sent
SPANS = Table(
    "spans",
    columns(
        trace_id="VARCHAR",
        span_id="VARCHAR",
        parent_span_id="VARCHAR",
        name="VARCHAR",
        kind="VARCHAR",
        start_ns="BIGINT",
        end_ns="BIGINT",
        status="VARCHAR",
        status_message="VARCHAR",
        service="VARCHAR",
        session="VARCHAR",
        job_id="VARCHAR",
        node_id="VARCHAR",
        worker_id="VARCHAR",
        pid="BIGINT",
        task_id="VARCHAR",
        attempt="INTEGER",
        actor_id="VARCHAR",
        request_id="VARCHAR",
        attributes="JSON",
        events="JSON",
        links="JSON",
        resource_id="VARCHAR",
        scope="VARCHAR",
    ),
    key=("trace_id", "span_id"),
)
# Each resource's attributes once, by the digest its spans name (:func:`resource_id`)
SPAN_RESOURCES = Table("span_resources", columns(resource_id="VARCHAR", attributes="JSON"), key=("resource_id",))
# How each task attempt's execution ended, as raysight's span of it says: when, and the error it raised, if it did
# ("Type: message"); what its outcome is inferred from when Ray never sent it (``signals/ray_events/reconcile.py``).
# Raw input, kept apart from the spans, which tail sampling may delete and a server may not keep at all.
ATTEMPT_ENDS = Table(
    "attempt_ends",
    columns(
        session="VARCHAR",
        task_id="VARCHAR",
        attempt="INTEGER",
        trace_id="VARCHAR",
        span_id="VARCHAR",
        end_ns="BIGINT",
        error="VARCHAR",
    ),
    key=("session", "task_id", "attempt"),
)


def attempt_ends_sql(spans: str) -> str:
    """SQL: the ``attempt_ends`` rows of the spans in ``spans`` (a table of span rows): raysight's spans of task
    attempts (its instrumentation's scope, kind consumer) that name their session, task and attempt."""
    return f"""SELECT session, task_id, attempt, trace_id, span_id, end_ns,
                      CASE WHEN status = 'error' THEN coalesce(status_message, '') END AS error
               FROM {spans}
               WHERE scope = '{wire.TASK_SCOPE}' AND kind = 'consumer'
                 AND session IS NOT NULL AND task_id IS NOT NULL AND attempt IS NOT NULL"""


@dataclass(frozen=True)
class Export:
    spans: list[dict[str, Any]]
    resources: dict[str, str]  # each resource's attributes as JSON, by the ``resource_id`` its spans name
    rejected: int  # spans refused alone
    reason: str | None  # why the first of them was

    def journalled(self, keep_spans: bool = True) -> bytes | None:
        """What the store folds (``apply.apply_spans``): the spans and, once each, their resources; or, for a server
        that keeps no span (``keep_spans`` False), raysight's spans of task attempts alone, of which the store keeps
        how each attempt ended (None when there is none)."""
        if keep_spans:
            return orjson.dumps({"resources": self.resources, "spans": self.spans})
        attempts = [span for span in self.spans if span["scope"] == wire.TASK_SCOPE]
        return orjson.dumps({"resources": {}, "spans": attempts, "keep": False}) if attempts else None


def parse(body: bytes, json: bool, limit: int = MAX_SPANS) -> Export:
    """The spans of an OTLP export, protobuf (``json`` False) or OTLP/JSON; TooMany past ``limit`` spans
    (counted before any is decoded)."""
    request = decoded(ExportTraceServiceRequest(), body, json, limit)
    spans: list[dict[str, Any]] = []
    resources: dict[str, str] = {}
    rejected, reason = 0, None
    for resource_spans in request.resource_spans:
        resource = _Resource.of(attributes(resource_spans.resource.attributes))
        for scope_spans in resource_spans.scope_spans:
            scope = scope_spans.scope.name[:SCOPE_MAX] or None
            for span in scope_spans.spans:
                try:
                    spans.append(row(span, resource, scope))
                except ValueError as exc:
                    rejected += 1
                    reason = reason or str(exc)
        resources[resource.id] = resource.json
    return Export(spans, resources, rejected, reason)


@dataclass(frozen=True)
class _Resource:
    """What the spans of one resource share: its attributes as JSON and their digest, and the columns they give."""

    json: str
    id: str
    columns: dict[str, Any]  # the ID columns, service and pid, where a span's own attributes do not say

    @classmethod
    def of(cls, attributes: dict[str, Any]) -> _Resource:
        columns = {column: text_id(attributes.get(name)) for column, name in ID_COLUMNS.items()}
        columns["service"] = text_id(attributes.get("service.name"))
        columns["pid"] = attributes.get(wire.ATTR_PID)
        text = orjson.dumps(attributes, option=orjson.OPT_SORT_KEYS)
        return cls(text.decode(), resource_id(text), columns)


def resource_id(attributes_json: bytes) -> str:
    """The key a resource's attributes (as JSON) are kept under (as ``schema.RESOURCE_ID_SQL``)."""
    return hashlib.md5(attributes_json, usedforsecurity=False).hexdigest()[:16]


def row(span: Span, resource: _Resource, scope: str | None) -> dict[str, Any]:
    """A span as the store keeps it; ValueError when it cannot be kept. (Each field is read once: a read of a
    protobuf message's field makes a Python object each time.)"""
    trace_id, span_id, parent_id, name = span.trace_id, span.span_id, span.parent_span_id, span.name
    start_ns, end_ns = span.start_time_unix_nano, span.end_time_unix_nano
    if len(trace_id) != 16 or not any(trace_id):
        raise ValueError(f"span {name[:80]!r}: a trace ID is 16 bytes, not all zero")
    if len(span_id) != 8 or not any(span_id):
        raise ValueError(f"span {name[:80]!r}: a span ID is 8 bytes, not all zero")
    if parent_id and len(parent_id) != 8:
        raise ValueError(f"span {name[:80]!r}: a parent span ID is 8 bytes")
    if end_ns < start_ns:
        raise ValueError(f"span {name[:80]!r} ends before it starts")
    if end_ns > INT64_MAX:
        raise ValueError(f"span {name[:80]!r} ends past the year 2262")
    attrs = attributes(span.attributes)
    columns = dict(resource.columns)
    for key, value in attrs.items():
        if (column := _COLUMN_OF.get(key)) is not None:
            columns[column] = text_id(value)
    pid, attempt = attrs.get(wire.ATTR_PID, columns["pid"]), attrs.get(wire.ATTR_ATTEMPT)
    if type(pid) is not int or not 0 <= pid <= INT64_MAX:
        pid = None
    if type(attempt) is not int or not 0 <= attempt < 2**31:
        attempt = None
    status, events, links = span.status, span.events, span.links
    return {
        "trace_id": trace_id.hex(),
        "span_id": span_id.hex(),
        "parent_span_id": parent_id.hex() if any(parent_id) else None,
        "name": name[:NAME_MAX],
        "kind": KINDS.get(span.kind, "unspecified"),
        "start_ns": start_ns,
        "end_ns": end_ns,
        "status": STATUSES.get(status.code, "unset"),
        "status_message": status.message or None,
        **columns,
        "pid": pid,
        "attempt": attempt,
        "attributes": orjson.dumps(attrs).decode(),
        "events": orjson.dumps(
            [{"name": e.name, "ns": e.time_unix_nano, "attributes": attributes(e.attributes)} for e in events]
        ).decode()
        if events
        else None,
        "links": orjson.dumps([_link(link) for link in links]).decode() if links else None,
        "resource_id": resource.id,
        "scope": scope,
    }


def _link(link: Span.Link) -> dict[str, Any]:
    return {"trace_id": link.trace_id.hex(), "span_id": link.span_id.hex(), "attributes": attributes(link.attributes)}


def rejected_spans(answer: bytes) -> int:
    """The spans a receiver's protobuf answer says it refused."""
    response = ExportTraceServiceResponse()
    response.ParseFromString(answer)
    return response.partial_success.rejected_spans


def response(rejected: int, reason: str | None, json: bool) -> bytes:
    """The export's answer: empty, or the partial success that counts the spans refused."""
    answer = ExportTraceServiceResponse()
    if rejected:
        answer.partial_success.rejected_spans = rejected
        answer.partial_success.error_message = reason or ""
    return encoded(answer, json)
