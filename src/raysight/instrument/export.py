"""Ended spans to an OTLP/HTTP endpoint from inside a Ray worker or driver, never in the way of the code traced.

:class:`SpanQueue` is a span processor whose ``on_end`` only appends to a bounded queue (a full queue drops the span
and counts it); one daemon thread exports the queue in batches through the OpenTelemetry SDK's OTLP/HTTP exporter.
The thread sends a span at once when it has sent nothing for :data:`LINGER_S` (a worker may be killed soon after its
last task: with its cluster, or with the owner of its actor), else what has ended until LINGER_S after its last send
(at once when a batch is full): at most one request per LINGER_S, however many spans. An export that
fails (the server down, a refusal) is dropped and counted: the thread never holds spans for long, and the process
exits without waiting on it for more than :data:`EXIT_FLUSH_S`. A forked child starts an empty queue and its own
thread.
"""

from __future__ import annotations

import atexit
import collections
import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

MAX_QUEUE = 8192
BATCH = 512
LINGER_S = 0.05
EXPORT_TIMEOUT_S = 5.0
EXIT_FLUSH_S = 1.0

log = logging.getLogger("raysight.instrument")


@dataclass
class Counts:
    exported: int = 0
    dropped_full: int = 0  # the queue was full
    dropped_failed: int = 0  # their export failed


class SpanQueue(SpanProcessor):
    def __init__(self, exporter: SpanExporter, max_queue: int = MAX_QUEUE) -> None:
        self.exporter, self.max_queue = exporter, max_queue
        self.counts = Counts()
        self._start()
        os.register_at_fork(after_in_child=self._start)
        atexit.register(self.shutdown)

    def _start(self) -> None:
        self._queue: collections.deque[ReadableSpan] = collections.deque()
        self._wake, self._flush, self._idle = threading.Event(), threading.Event(), threading.Event()
        self._stopped, self._sent = False, 0.0  # when the last send began
        self._thread: threading.Thread | None = None  # started with the first span

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if self._stopped or not span.context.trace_flags.sampled:
            return
        if len(self._queue) >= self.max_queue:
            self.counts.dropped_full += 1
            return
        self._queue.append(span)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="raysight-spans", daemon=True)
            self._thread.start()
        if not self._wake.is_set():
            self._wake.set()
        if len(self._queue) >= BATCH:
            self._flush.set()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            if self._stopped:
                return
            # lingers while the last send is recent; a full batch, or a flush, cuts it short
            self._flush.wait(max(0.0, self._sent + LINGER_S - time.monotonic()))
            self._wake.clear()
            self._flush.clear()
            self._sent = time.monotonic()
            self._export_queued()

    def _export_queued(self) -> None:
        self._idle.clear()
        try:
            while self._queue:
                batch = [self._queue.popleft() for _ in range(min(BATCH, len(self._queue)))]
                self._export(batch)
        finally:
            self._idle.set()

    def _export(self, batch: Sequence[ReadableSpan]) -> None:
        try:
            result = self.exporter.export(batch)
        except Exception:  # noqa: BLE001 (an exporter's bug must not end the thread)
            result = SpanExportResult.FAILURE
        if result is SpanExportResult.SUCCESS:
            self.counts.exported += len(batch)
        else:
            self.counts.dropped_failed += len(batch)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Export what is queued, waiting at most ``timeout_millis``; True if it all went (or failed) in time."""
        if self._thread is None or not self._thread.is_alive():
            return not self._queue
        self._idle.clear()
        self._flush.set()
        self._wake.set()
        return self._idle.wait(timeout_millis / 1000) and not self._queue

    def shutdown(self) -> None:
        """Flush for at most EXIT_FLUSH_S, then stop: what is left is dropped, and counted."""
        if self._stopped:
            return
        self.force_flush(int(EXIT_FLUSH_S * 1000))
        self._stopped = True
        self.counts.dropped_failed += len(self._queue)
        self._queue.clear()
        self._wake.set()
