"""A span processor that puts the process's Ray IDs (session, job, node, worker, pid) on every span it starts, unless
the provider's resource holds them already, and on a span started inside a task by the user's own code the task's
ID, so that each span leads to its task, worker and log lines."""

from __future__ import annotations

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from raysight import wire
from raysight.instrument.ray_tracing import core_worker, process_attributes


class RayIds(SpanProcessor):
    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        try:
            ids, resource = process_attributes(), span.resource.attributes
            # (raysight's provider, made in a connected worker, holds them: five attributes fewer on each span to
            # set, send and store; a driver's, a forked child's or a user's provider does not)
            if any(resource.get(key) != value for key, value in ids.items()):
                span.set_attributes(ids)
            if span.attributes is not None and wire.ATTR_TASK_ID not in span.attributes:
                from ray._private import worker

                if worker.global_worker.mode == worker.WORKER_MODE:
                    span.set_attribute(wire.ATTR_TASK_ID, core_worker().get_current_task_id().hex())
        except Exception:  # noqa: BLE001 (a span without its IDs rather than an error in the user's code)
            pass

    def on_end(self, span: ReadableSpan) -> None:
        pass
