"""A span processor that puts the process's Ray IDs (session, job, node, worker, pid) on every span it starts, and
on a span started inside a task by the user's own code the task's ID, so that each span leads to its task, worker
and log lines."""

from __future__ import annotations

from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from raysight.instrument import semconv
from raysight.instrument.ray_tracing import core_worker, process_attributes

WORKER_MODE = 1  # ray._private.worker.WORKER_MODE


class RayIds(SpanProcessor):
    def __init__(self) -> None:
        self._attributes: dict[str, Any] = {}

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        try:
            if semconv.SESSION not in self._attributes:  # (until the process is connected to Ray)
                self._attributes = process_attributes()
            span.set_attributes(self._attributes)
            if span.attributes is not None and semconv.TASK_ID not in span.attributes:
                import ray

                if ray._private.worker.global_worker.mode == WORKER_MODE:
                    span.set_attribute(semconv.TASK_ID, core_worker().get_current_task_id().hex())
        except Exception:  # noqa: BLE001 (a span without its IDs rather than an error in the user's code)
            pass

    def on_end(self, span: ReadableSpan) -> None:
        pass
