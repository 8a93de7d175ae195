"""A Ray task attempt's span, kept light: the span a worker makes for each task is a small record, not an
OpenTelemetry SDK span (whose start and end cost ~35 µs, a tenth of a trivial task), written as OTLP protobuf by
hand in the export thread (~5x faster than building protobuf messages). While the task runs, its span context is the
current OpenTelemetry context, so that the user's own spans (made by the SDK) and the tasks it submits nest under it.
Pure, but for the clock and random IDs."""

from __future__ import annotations

import random
import struct
import traceback
from dataclasses import dataclass
from typing import Any

from raysight import wire

_random = random.Random()


def new_id(bits: int) -> int:
    """A random nonzero ID of ``bits`` bits (trace: 128, span: 64)."""
    while not (value := _random.getrandbits(bits)):
        pass
    return value


@dataclass(slots=True)
class TaskSpan:
    trace_id: int
    span_id: int
    parent_id: int | None
    name: str
    start_ns: int
    attributes: dict[str, Any]  # the task's: ID, attempt, actor, function, kind
    end_ns: int = 0
    error: str | None = None  # "Type: message"
    stack: str | None = None  # its traceback
    error_ns: int = 0

    def fail(self, exc: BaseException, at_ns: int) -> None:
        self.error = f"{type(exc).__name__}: {exc}"
        self.stack = "".join(traceback.format_exception(exc))
        self.error_ns = at_ns


# --- OTLP protobuf (opentelemetry/proto/trace/v1/trace.proto and common.proto), written by hand ------------------
# A field's tag is its number << 3 | its wire type (0 varint, 1 fixed 64 bits, 2 length-delimited).
_FIXED64 = struct.Struct("<Q")
_DOUBLE = struct.Struct("<d")
SPAN_KIND_CONSUMER = 5  # Span.SpanKind: the work a submitter asked for, run on its own
STATUS_CODE_ERROR = 2


def encode_request(spans: list[TaskSpan], resource: dict[str, Any]) -> bytes:
    """The task spans of one process as an ``ExportTraceServiceRequest`` (its Ray IDs once, on the resource);
    appended to another request's bytes, the two read as one."""
    scope = _delimited(b"\x0a", _delimited(b"\x0a", wire.TASK_SCOPE.encode()))  # ScopeSpans.scope: its name
    scope_spans = scope + b"".join(_delimited(b"\x12", _span(span)) for span in spans)
    resource_spans = _delimited(b"\x0a", _attributes(b"\x0a", resource)) + _delimited(b"\x12", scope_spans)
    return _delimited(b"\x0a", resource_spans)


def _span(span: TaskSpan) -> bytes:
    parts = [
        b"\x0a\x10", span.trace_id.to_bytes(16, "big"),
        b"\x12\x08", span.span_id.to_bytes(8, "big"),
    ]  # fmt: skip
    if span.parent_id is not None:
        parts += (b"\x22\x08", span.parent_id.to_bytes(8, "big"))
    parts += (
        _delimited(b"\x2a", span.name.encode()),
        b"\x30", _varint(SPAN_KIND_CONSUMER),
        b"\x39", _FIXED64.pack(span.start_ns),
        b"\x41", _FIXED64.pack(span.end_ns),
        _attributes(b"\x4a", span.attributes),
    )  # fmt: skip
    if span.error is not None:
        kind, _, text = span.error.partition(": ")
        exception = {"exception.type": kind, "exception.message": text, "exception.stacktrace": span.stack}
        event = b"\x09" + _FIXED64.pack(span.error_ns) + _delimited(b"\x12", b"exception")
        parts.append(_delimited(b"\x5a", event + _attributes(b"\x1a", exception)))  # Span.events
        status = _delimited(b"\x12", span.error.encode()) + b"\x18" + _varint(STATUS_CODE_ERROR)
        parts.append(_delimited(b"\x7a", status))  # Span.status
    return b"".join(parts)


_known: dict[tuple[bytes, str, Any], bytes] = {}  # encoded attributes, by tag, key and value: most repeat
KNOWN_MAX = 4096


def _attributes(tag: bytes, attributes: dict[str, Any]) -> bytes:
    """Each attribute as a ``KeyValue`` field ``tag`` (a None value left out)."""
    parts = []
    for key, value in attributes.items():
        if value is None:
            continue
        known = (tag, key, value) if type(value) in (str, int) else None
        if known is None or (encoded := _known.get(known)) is None:
            encoded = _delimited(tag, _delimited(b"\x0a", str(key).encode()) + _delimited(b"\x12", _any_value(value)))
            if known is not None:
                if len(_known) >= KNOWN_MAX:
                    _known.clear()
                _known[known] = encoded
        parts.append(encoded)
    return b"".join(parts)


def _any_value(value: Any) -> bytes:
    """An ``AnyValue``: a bool, int or float as one, a list as an array, anything else as text."""
    if isinstance(value, bool):
        return b"\x10" + _varint(int(value))
    if isinstance(value, int) and -(2**63) <= value < 2**63:
        return b"\x18" + _varint(value & 0xFFFFFFFFFFFFFFFF)
    if isinstance(value, float):
        return b"\x21" + _DOUBLE.pack(value)
    if isinstance(value, (list, tuple)):
        return _delimited(b"\x2a", b"".join(_delimited(b"\x0a", _any_value(v)) for v in value))
    return _delimited(b"\x0a", str(value).encode(errors="replace"))


def _delimited(tag: bytes, payload: bytes) -> bytes:
    return tag + _varint(len(payload)) + payload


def _varint(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)
