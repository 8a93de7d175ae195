"""Spans on to another OpenTelemetry backend (Jaeger, Tempo, Honeycomb, a Collector…) over OTLP/HTTP, as well as, or
instead of, storing them: each export the receiver accepts is sent on as it came (decoded, re-compressed by nobody),
in order, from one thread. The queue is bounded; an export the backend refuses for good (4xx) or cannot take within
:data:`GIVE_UP_S` of retries (429, 5xx, no connection) is dropped; both are counted (`raysight doctor`)."""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from dataclasses import dataclass, field

import httpx

from raysight import wire
from raysight.config import OWN_HEADERS

log = logging.getLogger("raysight.forward")
MAX_QUEUE = 1000  # exports (bodies of up to --max-body each)
GIVE_UP_S = 60.0
RETRYABLE = {429, 502, 503, 504}


@dataclass(frozen=True)
class Forwarding:
    """Where the receiver's spans go: ``url`` (an OTLP/HTTP endpoint, ``/v1/traces`` appended unless given), with
    ``headers`` (an API key, say); ``store`` False: forwarded only."""

    url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    store: bool = True

    @property
    def traces_url(self) -> str | None:
        if self.url is None:
            return None
        return self.url if self.url.rstrip("/").endswith(wire.OTLP_TRACES) else self.url.rstrip("/") + wire.OTLP_TRACES


@dataclass
class ForwardCounts:
    forwarded: int = 0  # exports the backend accepted
    refused: int = 0  # refused for good (4xx)
    dropped: int = 0  # the queue was full, or retries ran out
    last_error: str | None = field(default=None)


class Forwarder:
    def __init__(self, forwarding: Forwarding, max_queue: int = MAX_QUEUE) -> None:
        assert forwarding.traces_url is not None
        self.url, self.counts = forwarding.traces_url, ForwardCounts()
        self._client = httpx.Client(headers=OWN_HEADERS, timeout=10)
        self._client.headers.update(dict(forwarding.headers))  # (the user's, a User-Agent too)
        self._queue: queue.Queue[tuple[bytes, str] | None] = queue.Queue(max_queue)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="raysight-forward", daemon=True)
        self._thread.start()

    def put(self, body: bytes, content_type: str) -> bool:
        """Queue an export to send on; False (dropped, counted) when the queue is full."""
        try:
            self._queue.put_nowait((body, content_type))
        except queue.Full:
            self.counts.dropped += 1
            return False
        return True

    def queued(self) -> int:
        return self._queue.qsize()

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            self._send(*item)

    def _send(self, body: bytes, content_type: str) -> None:
        deadline, delay = time.monotonic() + GIVE_UP_S, 0.5
        while True:
            try:
                reply = self._client.post(self.url, content=body, headers={"Content-Type": content_type})
                if reply.status_code < 300:
                    self.counts.forwarded += 1
                    return
                error = f"{reply.status_code} {reply.text[:200]}"
                if reply.status_code not in RETRYABLE:
                    self.counts.refused += 1
                    self._failed(error)
                    return
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}"
            if time.monotonic() + delay > deadline or self._stopping.wait(delay):
                self.counts.dropped += 1
                self._failed(error)
                return
            delay = min(delay * 2, 10.0)

    def _failed(self, error: str) -> None:
        if self.counts.last_error is None:
            log.warning("forwarding spans to %s failed: %s", self.url, error)
        self.counts.last_error = error

    def close(self, timeout: float = 5.0) -> None:
        """Send what is queued for up to ``timeout`` s, then stop (what is left is dropped, and counted)."""
        with contextlib.suppress(queue.Full):
            self._queue.put(None, timeout=timeout)
        self._thread.join(timeout)
        self._stopping.set()
        self._thread.join(1)
        self.counts.dropped += self._queue.qsize()
        self._client.close()
