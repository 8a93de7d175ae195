"""A Ray task attempt's span, kept light: the span a worker makes for each task is a small record, not an
OpenTelemetry SDK span (whose start and end cost ~35 µs, a tenth of a trivial task), encoded to OTLP with the others
in the export thread. While the task runs, its span context is the current OpenTelemetry context, so that the user's
own spans (made by the SDK) and the tasks it submits nest under it. Pure, but for the clock and random IDs."""

from __future__ import annotations

import random
import traceback
from dataclasses import dataclass
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from raysight.ingest.otlp import key_values

SCOPE = "raysight.ray"
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


def encode(spans: list[TaskSpan], resource: dict[str, Any]) -> ResourceSpans:
    """The task spans of one process as OTLP: its Ray IDs once, on the resource."""
    return ResourceSpans(
        resource=Resource(attributes=key_values(resource)),
        scope_spans=[ScopeSpans(scope=InstrumentationScope(name=SCOPE), spans=[_span(s) for s in spans])],
    )


def _span(span: TaskSpan) -> Span:
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
        event = Span.Event(name="exception", time_unix_nano=span.error_ns, attributes=key_values(exception))
        message.events.append(event)
    return message
