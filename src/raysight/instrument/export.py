"""Ended spans to an OTLP/HTTP endpoint from inside a Ray worker or driver, never in the way of the code traced.

:class:`SpanQueue` takes the light spans of Ray tasks (``task_spans.py``) and, as an SDK span processor, the spans
of the user's own code; adding one only appends to a bounded queue (a full queue drops the span and counts it). One
daemon thread encodes what is queued into one OTLP protobuf export and POSTs it over a kept-alive connection. It
sends a span at once when it has sent nothing for :data:`LINGER_S`, else what has ended once no span has ended for
:data:`QUIET_S` (a worker may be killed soon after its last task: with its cluster, or with the owner of its actor)
or LINGER_S after its last send, whichever comes first (at once when a batch is full): under load, one request per
LINGER_S however many spans — a second, as often as Ray's core worker reports its task events (each request costs
the worker and the server about a millisecond). An export that fails (the server down, a refusal) is dropped and
counted, after one retry of a connection the server had closed: the thread never holds spans for long, and the
process exits without waiting on it for more than :data:`EXIT_FLUSH_S`. Each export tells raysight what was dropped
since the last one that went through (`raysight doctor` shows the sum). A forked child starts an empty queue and its
own thread.

Other signals of the process ride on the same thread and connection (:meth:`SpanQueue.ride`): each rider's body is
POSTed to its own route when the rider says it is due (a worker's samples of its tasks, every few seconds:
``task_profile.py``), and at a flush (the process exiting); a rider that comes to have something wakes the thread
(:meth:`SpanQueue.nudge`), which then waits for it to be due.
"""

from __future__ import annotations

import atexit
import collections
import http.client
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from raysight import wire
from raysight.config import OWN_HEADERS
from raysight.instrument import otlp_proto, task_spans

MAX_QUEUE = 8192
BATCH = 512
LINGER_S = 1.0  # Ray's task_events_report_interval_ms
QUIET_S = 0.05
EXPORT_TIMEOUT_S = 5.0
EXIT_FLUSH_S = 1.0
GZIPPED_JSON = {"Content-Type": "application/json", "Content-Encoding": "gzip"}  # what a rider sends


@dataclass
class Counts:
    exported: int = 0
    dropped_full: int = 0  # the queue was full
    dropped_failed: int = 0  # their export failed


class Rider(Protocol):
    def due(self) -> float | None:
        """Seconds until it has a body to send (0: now), None while it has nothing."""

    def take(self) -> bytes | None:
        """A body to send now (gzipped JSON), None for none."""

    def sent(self, ok: bool) -> None:
        """Whether the body :meth:`take` gave went through."""


class SpanQueue(SpanProcessor):
    def __init__(self, url: str, resource: Callable[[], dict[str, Any]], max_queue: int = MAX_QUEUE) -> None:
        """``url``: the OTLP/HTTP traces endpoint; ``resource``: the attributes of this process's task spans (read
        at each export: a driver learns its Ray IDs after it is traced)."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.url, self.resource, self.max_queue = parts, resource, max_queue
        self.counts = Counts()
        self._riders: list[tuple[str, Rider]] = []
        self._start()
        os.register_at_fork(after_in_child=self._start)
        atexit.register(self.shutdown)

    def _start(self) -> None:
        self._queue: collections.deque[task_spans.TaskSpan | ReadableSpan] = collections.deque()
        self._wake, self._flush, self._idle = threading.Event(), threading.Event(), threading.Event()
        self._stopped, self._sent = False, 0.0  # when the last send began
        self._final = False  # the next export sends what every rider has, due or not (a flush)
        self._added = 0.0  # when the last span was queued
        self._thread: threading.Thread | None = None  # started with the first span
        self._starting = threading.Lock()
        self._connection: http.client.HTTPConnection | None = None
        self._reported = 0  # the drops the receiver was told of

    def add(self, span: task_spans.TaskSpan | ReadableSpan) -> None:
        """Queue an ended span (never blocks; drops and counts when the queue is full)."""
        if self._stopped:
            return
        if len(self._queue) >= self.max_queue:
            self.counts.dropped_full += 1
            return
        self._queue.append(span)
        self.nudge()
        if len(self._queue) >= BATCH:
            self._flush.set()

    def ride(self, path: str, rider: Rider) -> None:
        """Send what ``rider`` has at each export, to ``path`` (with its query) on the same server."""
        self._riders.append((path, rider))

    def nudge(self) -> None:
        """A rider has something to send: export it as an ended span would be (never blocks)."""
        if self._stopped:
            return
        self._added = time.monotonic()
        if self._thread is None:
            with self._starting:  # (task threads and the sampler's nudge at once)
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="raysight-spans", daemon=True)
                    self._thread.start()
        if not self._wake.is_set():
            self._wake.set()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if span.context.trace_flags.sampled:
            self.add(span)

    def _run(self) -> None:
        while True:
            woken = self._wake.wait(self._riders_due())
            if self._stopped:
                return
            if not woken:  # a rider's body is due, and no span has ended
                self._export_queued(0)
                continue
            # lingers while the last send is recent and spans keep ending; a full batch, or a flush, cuts it short
            while (wait := min(self._sent + LINGER_S, self._added + QUIET_S) - time.monotonic()) > 0:
                if self._flush.wait(wait):
                    break
            self._wake.clear()
            self._flush.clear()
            self._sent = time.monotonic()
            self._export_queued(len(self._queue))

    def _riders_due(self) -> float | None:
        """Seconds until the first rider's body is due, None while none has anything."""
        due = [d for _, rider in self._riders if (d := rider.due()) is not None]
        return min(due) if due else None

    def _export_queued(self, count: int) -> None:
        """Export the first ``count`` spans queued: those that end meanwhile wait for the next send (sending them
        at once, export after export, made one request of a few spans every few milliseconds); then the riders'
        bodies that are due (all of them in a flush)."""
        self._idle.clear()
        final, self._final = self._final, False
        try:
            while count > 0 and self._queue:
                batch = [self._queue.popleft() for _ in range(min(BATCH, count, len(self._queue)))]
                count -= len(batch)
                if self._send(batch):
                    self.counts.exported += len(batch)
                else:
                    self.counts.dropped_failed += len(batch)
            self._ride(final)
        finally:
            self._idle.set()

    def _ride(self, final: bool) -> None:
        for path, rider in self._riders:
            try:
                due = rider.due()
                body = rider.take() if due is not None and (final or due <= 0) else None
            except Exception:  # noqa: BLE001 (a rider's failure is its own: the spans go on)
                continue
            if body is not None:
                rider.sent(self._posted(path, body, GZIPPED_JSON))

    def _send(self, batch: list[task_spans.TaskSpan | ReadableSpan]) -> bool:
        try:
            body = self._encode(batch)
        except Exception:  # noqa: BLE001 (a span the encoder cannot take: dropped, the thread goes on)
            return False
        dropped = self.counts.dropped_full + self.counts.dropped_failed
        headers = {
            "Content-Type": "application/x-protobuf",
            wire.SPANS_DROPPED_HEADER: str(dropped - self._reported),  # (since the last export that went through)
        }
        path = (self.url.path or "/") + (f"?{self.url.query}" if self.url.query else "")
        if ok := self._posted(path, body, headers):
            self._reported = dropped
        return ok

    def _posted(self, path: str, body: bytes, headers: dict[str, str]) -> bool:
        """POST ``body``, once more over a new connection if the server had closed the kept one; whether it went."""
        for attempt in range(2):
            try:
                return self._post(path, body, headers)
            except (OSError, http.client.HTTPException):
                self._close()
                if attempt:
                    return False
        return False

    def _encode(self, batch: list[task_spans.TaskSpan | ReadableSpan]) -> bytes:
        ours = [span for span in batch if isinstance(span, task_spans.TaskSpan)]
        sdk = [span for span in batch if not isinstance(span, task_spans.TaskSpan)]
        body = otlp_proto.sdk_request(sdk) if sdk else b""
        return body + task_spans.encode_request(ours, self.resource()) if ours else body

    def _post(self, path: str, body: bytes, headers: dict[str, str]) -> bool:
        if self._connection is None:
            kind = http.client.HTTPSConnection if self.url.scheme == "https" else http.client.HTTPConnection
            self._connection = kind(self.url.hostname or "", self.url.port, timeout=EXPORT_TIMEOUT_S)
        self._connection.request("POST", path, body, {**headers, **OWN_HEADERS})
        reply = self._connection.getresponse()
        reply.read()
        if reply.will_close:
            self._close()
        return 200 <= reply.status < 300

    def _close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Export what is queued, waiting at most ``timeout_millis``; True if it all went (or failed) in time."""
        if self._thread is None or not self._thread.is_alive():
            return not self._queue
        self._idle.clear()
        self._final = True
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
