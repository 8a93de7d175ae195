"""The single writer: a thread that group-commits queued batches and resolves each caller's future on commit.

Callers (the ingest routes) await the future with a deadline; a batch that misses it is still committed later,
and the resend it provokes is deduplicated. The queue is bounded by events, so a stalled store sheds load with
503s instead of memory.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from raysight.ingest.ray_events import Batch
from raysight.store.store import ApplyResult, Store

log = logging.getLogger("raysight.writer")

MAX_QUEUED_EVENTS = 500_000
MAX_GROUP_EVENTS = 50_000
IDLE_S = 0.5
_STOP = object()


class QueueFull(Exception):
    """The writer is too far behind to accept more now."""


class Writer:
    def __init__(self, store: Store, on_commit: Callable[[ApplyResult, float], None] | None = None) -> None:
        self.store = store
        self._queue: queue.Queue[Any] = queue.Queue()
        self._queued_events = 0
        self._lock = threading.Lock()
        self._on_commit = on_commit
        self._thread = threading.Thread(target=self._run, name="raysight-writer", daemon=True)
        self._thread.start()

    @property
    def queued_events(self) -> int:
        return self._queued_events

    def submit(self, batch: Batch) -> Future[ApplyResult]:
        """Queue a batch; the future resolves once it is committed."""
        with self._lock:
            if self._queued_events + len(batch) > MAX_QUEUED_EVENTS:
                raise QueueFull(f"{self._queued_events} events are waiting to be written")
            self._queued_events += len(batch)
        future: Future[ApplyResult] = Future()
        self._queue.put((batch, future))
        return future

    def call(self, fn: Callable[[Store], Any]) -> Future[Any]:
        """Run ``fn(store)`` on the writer thread, between batches (reindex, deletes, run exits)."""
        future: Future[Any] = Future()
        self._queue.put((fn, future))
        return future

    def close(self, timeout: float = 30) -> None:
        self._queue.put(_STOP)
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            try:
                item = self._queue.get(timeout=IDLE_S)
            except queue.Empty:
                self.store.checkpoint_if_due()  # idle: fold the WAL into the database file now, not mid-burst
                continue
            if item is _STOP:
                return
            work, future = item
            if callable(work):
                _settle(future, work, self.store)
                continue
            group = [(work, future)]
            size = len(work)
            pending_call = None
            while size < MAX_GROUP_EVENTS:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is _STOP or callable(nxt[0]):
                    pending_call = nxt
                    break
                group.append(nxt)
                size += len(nxt[0])
            self._commit(group, size)
            if pending_call is None:
                continue
            if pending_call is _STOP:
                return
            _settle(pending_call[1], pending_call[0], self.store)

    def _commit(self, group: list[tuple[Batch, Future[ApplyResult]]], size: int) -> None:
        merged = Batch()
        for batch, future in group:
            merged.extend(batch)  # written even when its caller has given up: the resend will find it
            future.set_running_or_notify_cancel()
        started = time.perf_counter()
        try:
            result = self.store.apply(merged)
        except Exception as exc:  # the store refused the whole group: every caller gets the error, none is acked
            log.exception("writing %d events failed", size)
            for _, future in group:
                if not future.cancelled():
                    future.set_exception(exc)
        else:
            if self._on_commit:
                self._on_commit(result, time.perf_counter() - started)
            for _, future in group:
                if not future.cancelled():
                    future.set_result(result)
        finally:
            with self._lock:
                self._queued_events -= size


def _settle(future: Future[Any], fn: Callable[[Store], Any], store: Store) -> None:
    if not future.set_running_or_notify_cancel():
        return
    try:
        future.set_result(fn(store))
    except Exception as exc:
        future.set_exception(exc)
