"""A Ray task attempt's span, kept light: the span a worker makes for each task is a small record, not an
OpenTelemetry SDK span (whose start and end cost ~35 µs, a tenth of a trivial task), written as OTLP protobuf by
hand in the export thread (``otlp_proto.py``: ~5x faster than building protobuf messages). While the task runs, its
span context is the current OpenTelemetry context, so that the user's own spans (made by the SDK) and the tasks it
submits nest under it. Pure, but for the clock and random IDs."""

from __future__ import annotations

import random
import traceback
from dataclasses import dataclass
from typing import Any

from raysight import wire
from raysight.instrument.otlp_proto import FIXED64, attributes, delimited, varint

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


SPAN_KIND_CONSUMER = 5  # Span.SpanKind: the work a submitter asked for, run on its own
STATUS_CODE_ERROR = 2


def encode_request(spans: list[TaskSpan], resource: dict[str, Any]) -> bytes:
    """The task spans of one process as an ``ExportTraceServiceRequest`` (its Ray IDs once, on the resource);
    appended to another request's bytes, the two read as one."""
    scope = delimited(b"\x0a", delimited(b"\x0a", wire.TASK_SCOPE.encode()))  # ScopeSpans.scope: its name
    scope_spans = scope + b"".join(delimited(b"\x12", _span(span)) for span in spans)
    resource_spans = delimited(b"\x0a", attributes(b"\x0a", resource)) + delimited(b"\x12", scope_spans)
    return delimited(b"\x0a", resource_spans)


def _span(span: TaskSpan) -> bytes:
    parts = [
        b"\x0a\x10", span.trace_id.to_bytes(16, "big"),
        b"\x12\x08", span.span_id.to_bytes(8, "big"),
    ]  # fmt: skip
    if span.parent_id is not None:
        parts += (b"\x22\x08", span.parent_id.to_bytes(8, "big"))
    parts += (
        delimited(b"\x2a", span.name.encode()),
        b"\x30", varint(SPAN_KIND_CONSUMER),
        b"\x39", FIXED64.pack(span.start_ns),
        b"\x41", FIXED64.pack(span.end_ns),
        attributes(b"\x4a", span.attributes),
    )  # fmt: skip
    if span.error is not None:
        kind, _, text = span.error.partition(": ")
        exception = {"exception.type": kind, "exception.message": text, "exception.stacktrace": span.stack}
        event = b"\x09" + FIXED64.pack(span.error_ns) + delimited(b"\x12", b"exception")
        parts.append(delimited(b"\x5a", event + attributes(b"\x1a", exception)))  # Span.events
        status = delimited(b"\x12", span.error.encode()) + b"\x18" + varint(STATUS_CODE_ERROR)
        parts.append(delimited(b"\x7a", status))  # Span.status
    return b"".join(parts)
