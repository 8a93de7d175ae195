"""A span processor that puts the process's Ray IDs (session, job, node, worker, pid) on every span it starts, unless
the provider's resource holds them already, and on a span started inside a task by the user's own code the task's
ID, so that each span leads to its task, worker and log lines."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from raysight import wire
from raysight.instrument.ray_tracing import core_worker, process_attributes


class RayIds(SpanProcessor):
    def __init__(self, resource: Mapping[str, Any] | None = None) -> None:
        """``resource``: the attributes of the provider's resource, whose Ray IDs no span repeats (a provider made in
        a connected worker holds them: five attributes fewer on each span to set, send and store)."""
        self.resource = resource or {}

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        try:
            ids = process_attributes()
            if any(self.resource.get(key) != value for key, value in ids.items()):  # (a driver's, a forked child's)
                span.set_attributes(ids)
            if span.attributes is not None and wire.ATTR_TASK_ID not in span.attributes:
                from ray._private import worker

                if worker.global_worker.mode == worker.WORKER_MODE:
                    span.set_attribute(wire.ATTR_TASK_ID, core_worker().get_current_task_id().hex())
        except Exception:  # noqa: BLE001 (a span without its IDs rather than an error in the user's code)
            pass

    def on_end(self, span: ReadableSpan) -> None:
        pass
