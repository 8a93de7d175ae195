"""OTLP protobuf written by hand (``opentelemetry/proto/trace/v1/trace.proto``, ``common.proto``), for the export
thread of a traced process: the SDK's encoder builds a protobuf message of every span, attribute and value first
(~57 µs a span of Serve's twenty attributes); writing the bytes at once, each repeated attribute from a cache, costs
a fraction of that. :func:`sdk_request` writes what ``encode_spans(spans).SerializeToString()`` does, field for
field (the tests parse both and compare them). Pure.

A field's tag is its number << 3 | its wire type (0 varint, 1 fixed 64 bits, 2 length-delimited, 5 fixed 32 bits).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind

FIXED32 = struct.Struct("<I")
FIXED64 = struct.Struct("<Q")
DOUBLE = struct.Struct("<d")
KINDS = {kind: kind.value + 1 for kind in SpanKind}  # the SDK's kinds, INTERNAL first; OTLP's begin with UNSPECIFIED
HAS_IS_REMOTE, IS_REMOTE = 0x100, 0x200  # SpanFlags: what a span's or link's flags say of its parent's context
KNOWN_MAX = 4096


def sdk_request(spans: Sequence[ReadableSpan]) -> bytes:
    """SDK spans as one ``ExportTraceServiceRequest``: grouped by resource, then by instrumentation scope, in the order
    they came, as the SDK's encoder groups them."""
    grouped: dict[Resource, dict[InstrumentationScope | None, list[bytes]]] = {}
    for span in spans:
        scopes = grouped.setdefault(span.resource, {})
        scopes.setdefault(span.instrumentation_scope or None, []).append(_span(span))
    request = []
    for resource, scopes in grouped.items():
        body = [delimited(b"\x0a", attributes(b"\x0a", resource.attributes))]  # ResourceSpans.resource
        for scope, encoded in scopes.items():
            scope_spans = [delimited(b"\x0a", _scope(scope)), *(delimited(b"\x12", span) for span in encoded)]
            if scope is not None and scope.schema_url:
                scope_spans.append(delimited(b"\x1a", scope.schema_url.encode()))
            body.append(delimited(b"\x12", b"".join(scope_spans)))
        if resource.schema_url:
            body.append(delimited(b"\x1a", resource.schema_url.encode()))
        request.append(delimited(b"\x0a", b"".join(body)))
    return b"".join(request)


def _scope(scope: InstrumentationScope | None) -> bytes:
    if scope is None:
        return b""
    parts = [delimited(b"\x0a", scope.name.encode())] if scope.name else []
    if scope.version:
        parts.append(delimited(b"\x12", scope.version.encode()))
    parts.append(attributes(b"\x1a", scope.attributes))
    return b"".join(parts)


def _span(span: ReadableSpan) -> bytes:
    context, parent = span.get_span_context(), span.parent
    assert context is not None and span.start_time is not None and span.end_time is not None  # (an ended span's)
    parts = [b"\x0a\x10", context.trace_id.to_bytes(16, "big"), b"\x12\x08", context.span_id.to_bytes(8, "big")]
    if state := ",".join(f"{key}={value}" for key, value in context.trace_state.items()):
        parts.append(delimited(b"\x1a", state.encode()))
    if parent is not None:
        parts += (b"\x22\x08", parent.span_id.to_bytes(8, "big"))
    if span.name:
        parts.append(delimited(b"\x2a", span.name.encode()))
    parts += (
        b"\x30", varint(KINDS[span.kind]),
        b"\x39", FIXED64.pack(span.start_time),
        b"\x41", FIXED64.pack(span.end_time),
        attributes(b"\x4a", span.attributes),
    )  # fmt: skip
    if span.dropped_attributes:
        parts += (b"\x50", varint(span.dropped_attributes))
    for event in span.events:
        encoded = [b"\x09", FIXED64.pack(event.timestamp)]
        if event.name:
            encoded.append(delimited(b"\x12", event.name.encode()))
        encoded.append(attributes(b"\x1a", event.attributes))
        if event.dropped_attributes:
            encoded += (b"\x20", varint(event.dropped_attributes))
        parts.append(delimited(b"\x5a", b"".join(encoded)))
    if span.dropped_events:
        parts += (b"\x60", varint(span.dropped_events))
    for link in span.links:
        encoded = [b"\x0a\x10", link.context.trace_id.to_bytes(16, "big")]
        encoded += (b"\x12\x08", link.context.span_id.to_bytes(8, "big"), attributes(b"\x22", link.attributes))
        if link.dropped_attributes:
            encoded += (b"\x28", varint(link.dropped_attributes))
        encoded += (b"\x35", FIXED32.pack(_flags(link.context)))
        parts.append(delimited(b"\x6a", b"".join(encoded)))
    if span.dropped_links:
        parts += (b"\x70", varint(span.dropped_links))
    status = delimited(b"\x12", span.status.description.encode()) if span.status.description else b""
    if code := span.status.status_code.value:
        status += b"\x18" + varint(code)
    parts += (delimited(b"\x7a", status), b"\x85\x01", FIXED32.pack(_flags(parent)))
    return b"".join(parts)


def _flags(parent: SpanContext | None) -> int:
    return HAS_IS_REMOTE | (IS_REMOTE if parent is not None and parent.is_remote else 0)


_known: dict[tuple[bytes, str, Any], bytes] = {}  # encoded attributes, by tag, key and value: most repeat


def attributes(tag: bytes, values: Mapping[str, Any] | None) -> bytes:
    """Each attribute as a ``KeyValue`` field ``tag`` (a None value left out)."""
    parts = []
    for key, value in (values or {}).items():
        if value is None:
            continue
        known = (tag, key, value) if type(value) in (str, int) else None
        if known is None or (encoded := _known.get(known)) is None:
            encoded = delimited(tag, delimited(b"\x0a", str(key).encode()) + delimited(b"\x12", any_value(value)))
            if known is not None:
                if len(_known) >= KNOWN_MAX:
                    _known.clear()
                _known[known] = encoded
        parts.append(encoded)
    return b"".join(parts)


def any_value(value: Any) -> bytes:
    """An ``AnyValue``: a bool, int, float or bytes as one, a sequence as an array, a mapping as a list of key-values,
    anything else as text."""
    if isinstance(value, bool):
        return b"\x10" + varint(int(value))
    if isinstance(value, int) and -(2**63) <= value < 2**63:
        return b"\x18" + varint(value & 0xFFFFFFFFFFFFFFFF)
    if isinstance(value, float):
        return b"\x21" + DOUBLE.pack(value)
    if isinstance(value, bytes):
        return delimited(b"\x3a", value)
    if isinstance(value, (list, tuple)):
        return delimited(b"\x2a", b"".join(delimited(b"\x0a", any_value(v)) for v in value))
    if isinstance(value, Mapping):
        return delimited(b"\x32", attributes(b"\x0a", value))
    return delimited(b"\x0a", str(value).encode(errors="replace"))


def delimited(tag: bytes, payload: bytes) -> bytes:
    return tag + varint(len(payload)) + payload


def varint(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)
