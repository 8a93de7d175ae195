"""Two threads between the ingest routes and the store.

The journal thread appends the POST bodies that are waiting, fsyncs once, and resolves each caller's future: the
batch is durable and may be acknowledged. The fold thread takes journalled batches in large groups, parses them
and applies them to the store in one transaction that also records the last journal record folded; it runs the
store's other writes (reindex, deletes, run exits) in order between groups. At start, the journal's unfolded
records are folded first. A backlog bound turns a stalled store into 503s instead of an unbounded journal.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from raysight.store.journal import Journal, Record
from raysight.store.store import ApplyResult, Post, Store

log = logging.getLogger("raysight.writer")

MAX_BACKLOG_BYTES = 512 * 1024 * 1024  # journalled but not yet folded
MAX_GROUP_BYTES = 48 * 1024 * 1024  # about 50k events
IDLE_S = 0.5
FOLD_NICENESS = 19
# Folding a group costs a fixed ~0.17 s of CPU (DuckDB plans two dozen statements, some large) plus ~50 µs an event,
# so POSTs journalled within this long of the first one waiting are folded together (Ray's aggregators send about
# once a second). It bounds how stale queries are (an event is queryable within about this long of arriving) and
# sets what raysight takes from a busy Ray beside it: at 2 s Ray's task throughput ran at 0.86-0.93x of a discarding
# sink, at 4 s 0.93-1.0x (benchmarks/ray_task_throughput.py).
FOLD_INTERVAL_S = 4.0
RETRY_S = 1.0
FOLD_TRIES = 3
_STOP = object()


class QueueFull(Exception):
    """The store is too far behind to accept more now."""


class Writer:
    def __init__(
        self,
        store: Store,
        on_commit: Callable[[ApplyResult, float], None] | None = None,
        fold_interval_s: float = FOLD_INTERVAL_S,
    ) -> None:
        self.store = store
        self.fold_interval_s = fold_interval_s
        folded = store.journal_folded()
        self.journal = Journal(store.data_dir / "journal", folded)
        self._to_journal: queue.Queue[Any] = queue.Queue()
        self._to_fold: queue.Queue[Any] = queue.Queue()
        self._backlog_bytes = 0
        self._backlog_batches = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._on_commit = on_commit
        for record in self.journal.replay(folded):
            self._backlog(len(record.body), 1)
            self._to_fold.put(record)
        self._threads = [
            threading.Thread(target=self._journal_loop, name="raysight-journal", daemon=True),
            threading.Thread(target=self._fold_loop, name="raysight-writer", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def backlog(self) -> dict[str, int]:
        """Batches (and their bytes) acknowledged but not yet folded into the store."""
        return {"batches": self._backlog_batches, "bytes": self._backlog_bytes}

    def submit(self, body: bytes, label: str | None = None, run_id: str | None = None) -> Future[Record]:
        """Journal a POST body; the future resolves once it is on disk (and it is folded soon after)."""
        self._backlog(len(body), 1, limit=MAX_BACKLOG_BYTES)
        future: Future[Record] = Future()
        self._to_journal.put(((label, run_id, body), future))
        return future

    def call(self, fn: Callable[[Store], Any]) -> Future[Any]:
        """Run ``fn(store)`` on the fold thread after what is queued now (reindex, deletes, run exits)."""
        future: Future[Any] = Future()
        self._to_journal.put((fn, future))  # through the journal thread, so it stays behind earlier batches
        return future

    def close(self, timeout: float = 30) -> None:
        """Stop after the group being folded; what is left unfolded stays in the journal for the next start."""
        self._stopping.set()
        self._to_journal.put(_STOP)
        for thread in self._threads:
            thread.join(timeout)
        self.journal.close()

    def _backlog(self, size: int, batches: int, limit: int | None = None) -> None:
        """Count batches in (positive) or out (negative) of the unfolded backlog; QueueFull past ``limit`` bytes."""
        with self._lock:
            if limit is not None and self._backlog_bytes + size > limit:
                raise QueueFull(f"{self._backlog_bytes} bytes are waiting to be folded into the store")
            self._backlog_bytes += size
            self._backlog_batches += batches

    # --- journal thread ----------------------------------------------------------------------------------------

    def _journal_loop(self) -> None:
        while True:
            items = [self._to_journal.get()]
            while True:
                try:
                    items.append(self._to_journal.get_nowait())
                except queue.Empty:
                    break
            pending: list[tuple[tuple[str | None, str | None, bytes], Future[Record]]] = []
            for item in items:
                if item is _STOP or callable(item[0]):
                    self._append(pending)
                    pending = []
                    self._to_fold.put(item)
                    if item is _STOP:
                        return
                else:
                    pending.append(item)
            self._append(pending)

    def _append(self, pending: list[tuple[tuple[str | None, str | None, bytes], Future[Record]]]) -> None:
        if not pending:
            return
        try:
            records = self.journal.append([batch for batch, _ in pending])
        except OSError as exc:  # the disk refused: nothing is acknowledged, Ray resends
            log.exception("journal append failed")
            self._backlog(-sum(len(body) for (_, _, body), _ in pending), -len(pending))
            for _, future in pending:
                future.set_exception(exc)
            return
        for record, (_, future) in zip(records, pending):
            self._to_fold.put(record)
            future.set_result(record)

    # --- fold thread -------------------------------------------------------------------------------------------

    def _fold_loop(self) -> None:
        # Folding can wait; the Ray workloads beside the server (often on the same machine) cannot. Acknowledging
        # (the journal thread) keeps its normal priority, so Ray is never held up.
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), FOLD_NICENESS)
        draining = False
        while True:
            try:
                item = self._to_fold.get(timeout=IDLE_S)
            except queue.Empty:
                self.store.checkpoint_if_due()  # idle: fold the WAL into the database file now, not mid-burst
                continue
            if item is _STOP or self._stopping.is_set():
                return
            if not isinstance(item, Record):
                _settle(item[1], item[0], self.store)
                continue
            group, size, after = [item], len(item.body), None
            # Behind a full group the backlog is being drained: fold what is queued now, waiting for no more.
            deadline = item.at + (0.0 if draining else self.fold_interval_s)
            while size < MAX_GROUP_BYTES and not self._stopping.is_set():
                try:
                    nxt = self._to_fold.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if not isinstance(nxt, Record):
                    after = nxt
                    break
                group.append(nxt)
                size += len(nxt.body)
            self._fold(group, size)
            draining = size >= MAX_GROUP_BYTES
            if after is _STOP or self._stopping.is_set():
                return
            if after is not None:
                _settle(after[1], after[0], self.store)

    def _fold(self, group: list[Record], size: int) -> None:
        """Parse and apply ``group`` in one transaction. It has been acknowledged, so it is never dropped: when the
        store keeps refusing it, its batches are folded one by one, and a batch the store refuses on its own (while
        it takes a quarantine row) is quarantined whole. Otherwise (a full disk) it is retried until it goes in."""
        posts = [Post(record.body, record.label, record.run_id) for record in group]
        for attempt in range(FOLD_TRIES):
            started = time.perf_counter()
            try:
                result = self.store.apply(posts, journal_seq=group[-1].seq)
                break
            except Exception as exc:
                log.exception("folding %d journalled batches failed (try %d)", len(group), attempt + 1)
                error = exc
                if self._stopping.wait(RETRY_S):
                    return  # still in the journal: folded at the next start
        else:
            if len(group) > 1:
                for record in group:
                    self._fold([record], len(record.body))
                return
            while True:
                try:
                    self.store.quarantine_batch(
                        group[0].body, f"the store could not fold this batch: {error}", group[0].seq
                    )
                    break
                except Exception:
                    log.exception("the store takes nothing; retrying")
                    if self._stopping.wait(RETRY_S):
                        return
            result = None
        self.journal.release(group[-1].seq)
        self._backlog(-size, -len(group))
        if self._on_commit and result is not None:
            self._on_commit(result, time.perf_counter() - started)


def _settle(future: Future[Any], fn: Callable[[Store], Any], store: Store) -> None:
    if not future.set_running_or_notify_cancel():
        return
    try:
        future.set_result(fn(store))
    except Exception as exc:  # noqa: BLE001 (handed to the caller through its future)
        future.set_exception(exc)
