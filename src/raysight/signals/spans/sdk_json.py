"""Spans as the OpenTelemetry SDK's ``ReadableSpan.to_json`` writes them, a JSON object a line (what Ray's own local
tracing hook, ``ray.util.tracing.setup_local_tmp_tracing``, writes to ``/tmp/spans/<pid>.txt``) → OTLP exports,
which `raysight traces import` sends to the receiver like any exporter's. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

import orjson
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span, Status

from raysight import wire
from raysight.errors import BadIngest
from raysight.ingest.otlp import key_values

KINDS = {f"SpanKind.{name.removeprefix('SPAN_KIND_')}": value for name, value in Span.SpanKind.items()}
STATUSES = {name.removeprefix("STATUS_CODE_"): value for name, value in Status.StatusCode.items()}


def exports(lines: Iterable[bytes], session: str | None, batch: int = 512) -> Iterator[tuple[bytes, int, int]]:
    """OTLP protobuf exports of at most ``batch`` spans each, with ``session`` (when given) on their resources:
    (body, spans, lines refused as not spans)."""
    request, spans, refused = ExportTraceServiceRequest(), 0, 0
    by_resource: dict[bytes, ResourceSpans] = {}
    for line in lines:
        if not line.strip():
            continue
        try:
            resource, span = parse(line)
        except BadIngest:
            refused += 1
            continue
        if session is not None:
            resource.setdefault(wire.ATTR_SESSION, session)
        key = orjson.dumps(resource, option=orjson.OPT_SORT_KEYS)
        if key not in by_resource:
            by_resource[key] = request.resource_spans.add()
            by_resource[key].resource.attributes.extend(key_values(resource))
            by_resource[key].scope_spans.add()
        by_resource[key].scope_spans[0].spans.append(span)
        spans += 1
        if spans == batch:
            yield request.SerializeToString(), spans, refused
            request, spans, refused, by_resource = ExportTraceServiceRequest(), 0, 0, {}
    if spans or refused:
        yield request.SerializeToString(), spans, refused


def parse(line: bytes) -> tuple[dict[str, Any], Span]:
    """A line's resource attributes and span; BadIngest when it is not one."""
    try:
        data = orjson.loads(line)
        context = data["context"]
        attributes = dict(data.get("attributes") or {})
        if isinstance(attributes.get("ray.pid"), str) and attributes["ray.pid"].isdigit():
            attributes[wire.ATTR_PID] = int(attributes["ray.pid"])  # (Ray's hook writes it as text)
        span = Span(
            trace_id=_id(context["trace_id"], 16),
            span_id=_id(context["span_id"], 8),
            name=str(data["name"]),
            kind=KINDS.get(data.get("kind"), Span.SpanKind.SPAN_KIND_UNSPECIFIED),  # type: ignore[arg-type]
            start_time_unix_nano=_ns(data["start_time"]),
            end_time_unix_nano=_ns(data["end_time"]),
            attributes=key_values(attributes),
        )
        if data.get("parent_id"):
            span.parent_span_id = _id(data["parent_id"], 8)
        status = data.get("status") or {}
        span.status.code = STATUSES.get(status.get("status_code"), 0)  # type: ignore[assignment]
        span.status.message = status.get("description") or ""
        for event in data.get("events") or []:
            span.events.add(
                name=str(event["name"]),
                time_unix_nano=_ns(event["timestamp"]),
                attributes=key_values(event.get("attributes") or {}),
            )
        for link in data.get("links") or []:
            span.links.add(
                trace_id=_id(link["context"]["trace_id"], 16),
                span_id=_id(link["context"]["span_id"], 8),
                attributes=key_values(link.get("attributes") or {}),
            )
        resource = dict((data.get("resource") or {}).get("attributes") or {})
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise BadIngest(f"not a span as the OpenTelemetry SDK writes it: {exc}") from None
    return resource, span


def _id(text: str, size: int) -> bytes:
    return int(text, 16).to_bytes(size, "big")


def _ns(text: str) -> int:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000
