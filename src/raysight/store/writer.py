"""Three threads between the ingest routes and the store.

The journal thread appends the POST bodies that are waiting, fsyncs once, and resolves each caller's future: the
batch is durable and may be acknowledged. The gather thread makes groups of journalled batches, one a signal, and,
when the machine has several cores, parses each (its signal's ``prepare``) while the group before is written. The fold
thread applies each group to the store in one transaction that also records the journal record before which none is
left unfolded; it runs the store's other writes in order between groups (reindex, deletes) or as soon as it can (the
signals written at once: scrapes, polls, run exits). At start, the journal's unfolded records are folded first. A
backlog bound turns a stalled store into 503s instead of an unbounded journal.

On a quiet server a batch is folded (queryable) a fraction of a second after it is acknowledged, having waited only
its signal's linger (:data:`raysight.settings.FOLD_LINGER_S`) for POSTs arriving with it (several nodes'
aggregators). After each round of groups the fold thread rests ``fold_rest`` (:data:`raysight.settings.FOLD_REST`)
times as long as the round took: under load, what arrives of every signal while one round folds and rests makes the
next round's groups, so groups grow with the rate, the fixed cost of a group is spread over more items the busier the
server is, and folding (at the lowest priority) is under way at most about a quarter of the time beside a busy Ray,
however the signals interleave. Past a burst, sustained folding rests longer, to keep to ``fold_share`` of the time
(:class:`FoldBudget`). A backlog that fills a group is drained without resting or waiting.

A group that fails to fold is never dropped, nor allowed to stop the folding of what follows it: on any error it is
folded batch by batch. A batch whose content the store refuses is quarantined (its body kept with the reason); an
environmental failure (a full disk, an I/O error) is retried with back-off until it passes, as it does by itself once
space returns (``raysight doctor`` says why it waits); a batch that runs out of memory alone, or fails with an error
that is neither, is retried a few times, then quarantined: one poison batch must not stop all that follows it, nor
every start after it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import duckdb

from raysight import os_thread
from raysight.errors import BadIngest, QueueFull
from raysight.settings import JOURNAL_DIR, WriterSettings
from raysight.signals.registry import SIGNALS
from raysight.signals.signal import fold_linger
from raysight.store.journal import RAY_EVENTS, Batch, Journal, Record
from raysight.store.store import Store

log = logging.getLogger("raysight.writer")

MAX_BACKLOG_BYTES = 512 * 1024 * 1024  # journalled but not yet folded
MAX_GROUP_BYTES = 48 * 1024 * 1024  # about 50k events
MAX_GROUP_EVENTS = 50_000  # however small: folding takes ~800 bytes of memory an event (a group may hold one POST more)
IDLE_S = 0.5
BUSY_POLL_S = 0.01  # how often the gather thread, draining a backlog, looks whether the fold thread is done
FOLD_NICENESS = 19
MAX_REST_S = 4.0  # the longest rest after a group (FoldBudget)
RETRY_S = 1.0  # back-off after an environmental failure, doubling up to MAX_RETRY_S
MAX_RETRY_S = 10.0
PRUNE_EVERY_S = 60.0  # between applications of the retentions, when there are (the first at start)
# What the store raises for content it cannot take (a value out of range or of the wrong type, a broken constraint,
# malformed input): retrying cannot help, so the batch is quarantined at once.
CONTENT_ERRORS: tuple[type[Exception], ...] = (
    BadIngest,  # an agent's batch of log lines that is not well formed (checked before it was journalled)
    duckdb.DataError,  # ConversionException, OutOfRangeException, TypeMismatchException
    duckdb.IntegrityError,  # ConstraintException
    duckdb.InvalidInputException,
    ValueError,
    TypeError,
    LookupError,
)
# What the machine causes, not the batch: retried until it passes. DuckDB's OperationalError covers IOException (and
# HTTPException), OutOfMemoryException, TransactionException, ConnectionException, SerializationException and
# ResourceInUseException; FatalException is what DuckDB raises once a failed write has invalidated the database.
ENVIRONMENTAL_ERRORS: tuple[type[Exception], ...] = (
    OSError,
    MemoryError,
    duckdb.OperationalError,
    duckdb.FatalException,
)
UNFORESEEN_TRIES = 5  # an error that is neither (InternalException, BinderException, …): tries before quarantine
# Out of memory, folded alone: another fold or a big query may have held the memory, so it is tried again, but a
# batch that cannot fit within the store's memory limit never will (tries before quarantine)
MEMORY_ERRORS: tuple[type[Exception], ...] = (MemoryError, duckdb.OutOfMemoryException)
MEMORY_TRIES = 3
_STOP = object()


@dataclass(frozen=True)
class _Group:
    """Journalled batches to fold in one transaction, parsed already or not."""

    records: list[Record]
    parsed: Any  # what its signal parsed ahead (None: not)


@dataclass(frozen=True)
class Stall:
    """Folding waits on an environmental failure: what it was, since when, and how many tries have failed."""

    error: str
    since: float  # time.time()
    tries: int


class _Unfolded:
    """The seqs of the journal records not yet folded, by kind, each kind's in the order they fold: what a fold may
    record as folded while other kinds' records before it wait (journal thread and fold thread)."""

    def __init__(self, folded: int) -> None:
        self._lock = threading.Lock()
        self._seqs: dict[str, deque[int]] = {}
        self._last = folded  # the last record journalled

    def add(self, record: Record) -> None:
        with self._lock:
            self._seqs.setdefault(record.kind, deque()).append(record.seq)
            self._last = record.seq

    def watermark(self, group: Sequence[Record]) -> int:
        """The last journal record before which none will be unfolded once ``group`` (the first records of its kind
        unfolded) is: a fold records it, and a restart folds what follows it again (which each signal's apply
        stores once)."""
        kind, folding = group[0].kind, len(group)
        with self._lock:
            heads = [
                seqs[folding if k == kind else 0]
                for k, seqs in self._seqs.items()
                if len(seqs) > (folding if k == kind else 0)
            ]
            return min(heads) - 1 if heads else self._last

    def done(self, group: Sequence[Record]) -> None:
        with self._lock:
            seqs = self._seqs[group[0].kind]
            for _ in group:
                seqs.popleft()


class FoldBudget:
    """The fold thread's time, as a token bucket: after a round it rests ``rest`` times as long as the round took (it
    folds a quarter of the time at most), and once it has folded ``burst_s`` more than ``share`` of the time allows,
    as long as that share needs (a twentieth of the time by default): a burst of work is queryable within a fraction
    of a second, and a sustained load beside Ray costs a small, fixed share of a core, its groups growing instead
    (shown later, at most :data:`MAX_REST_S` after a round). ``rest`` 0: no rest at all."""

    def __init__(self, rest: float, share: float, burst_s: float) -> None:
        self.rest_factor, self.share, self.burst_s = rest, share, burst_s
        self.tokens, self._at = burst_s, time.monotonic()  # seconds of folding the share has yet to pay for

    def spend(self, seconds: float, now: float) -> None:
        """The fold thread has worked ``seconds`` until ``now``."""
        self.tokens = min(self.burst_s, self.tokens + (now - self._at) * self.share) - seconds
        self._at = now

    def rest(self, round_s: float) -> float:
        """How long to rest after a round that has taken ``round_s`` so far."""
        if not self.rest_factor:
            return 0.0
        owed = -self.tokens / self.share if self.tokens < 0 else 0.0
        return min(max(self.rest_factor * round_s, owed), MAX_REST_S)


class Writer:
    def __init__(
        self,
        store: Store,
        on_commit: Callable[[Any, float], None] | None = None,
        settings: WriterSettings | None = None,
    ) -> None:
        """Fold what is journalled into ``store`` (``on_commit`` told what each group's apply returned, once committed,
        where it returned anything), as ``settings`` say (None: the defaults)."""
        self.store, self.settings = store, settings or WriterSettings()
        self._prune_after = 0.0  # monotonic time of the next application of the retention
        folded = store.journal_folded()
        self.journal = Journal(store.data_dir / JOURNAL_DIR, folded)
        self._unfolded = _Unfolded(folded)
        self._to_journal: queue.Queue[Any] = queue.Queue()
        self._to_fold: queue.Queue[Any] = queue.Queue()
        self._to_apply: queue.Queue[Any] = queue.Queue()  # groups gathered (and parsed), calls, _STOP
        self._unfinished = 0  # items handed to the fold thread that it has not finished
        self._finished = threading.Condition()
        self._rest_until = 0.0  # when the fold thread's rest after its last round ends
        self._round_s = 0.0  # how long the groups of the round being folded have taken so far
        self._budget = FoldBudget(self.settings.fold_rest, self.settings.fold_share, self.settings.fold_burst_s)
        self._backlog_bytes = 0
        self._backlog_batches = 0
        self._lock = threading.Lock()
        self._together: dict[Callable[..., Any], list[tuple[Any, Future[Any]]]] = {}  # waiting (call_together)
        self._stopping = threading.Event()
        self._on_commit = on_commit
        self.stall: Stall | None = None
        self.fold_retries = 0  # environmental failures of folding since start
        self._checkpoint_after = 0.0  # monotonic time before which no checkpoint is tried (after one failed)
        for record in self.journal.replay(folded):
            self._backlog(len(record.body), 1)
            self._unfolded.add(record)
            self._to_fold.put(record)
        self._threads = [
            threading.Thread(target=self._journal_loop, name="raysight-journl", daemon=True),
            threading.Thread(target=self._gather_loop, name="raysight-gather", daemon=True),
            threading.Thread(target=self._fold_loop, name="raysight-fold", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def backlog(self) -> dict[str, int]:
        """Batches (and their bytes) acknowledged but not yet folded into the store."""
        return {"batches": self._backlog_batches, "bytes": self._backlog_bytes}

    def folding(self) -> dict[str, Any]:
        """Whether folding keeps up or waits on an environmental failure (with why), and the journal's damage."""
        stall = self.stall
        waiting = (
            {} if stall is None else {"error": stall.error, "since_ms": int(stall.since * 1000), "tries": stall.tries}
        )
        return {
            "state": "ok" if stall is None else "retrying",
            **waiting,
            "retries": self.fold_retries,
            "journal_damage": {**self.journal.damage(), "kept_in": str(self.journal.quarantine)},
        }

    def submit(
        self,
        body: bytes,
        label: str | None = None,
        run_id: str | None = None,
        events: int = 0,
        kind: str = RAY_EVENTS,
    ) -> Future[Record]:
        """Journal a POST body (Ray's: a JSON array of ``events`` elements; an agent's logs: ``events`` lines); the
        future resolves once it is on disk (and it is folded soon after)."""
        self._backlog(len(body), 1, limit=MAX_BACKLOG_BYTES)
        future: Future[Record] = Future()
        self._to_journal.put(((label, run_id, body, events, kind), future))
        return future

    def call(self, fn: Callable[[Store], Any], ordered: bool = True) -> Future[Any]:
        """Run ``fn(store)`` on the fold thread after what is queued now (reindex, deletes), or, not ``ordered``, as
        soon as the fold thread is free (a write that depends on no journalled batch: a scrape, a poll), without
        ending the round of groups being gathered."""
        future: Future[Any] = Future()
        if ordered:
            self._to_journal.put((fn, future))  # through the journal thread, so it stays behind earlier batches
        else:
            self._hand((fn, future))
        return future

    def call_together(self, write: Callable[[Store, list[Any]], list[Any]], item: Any) -> Future[Any]:
        """Run ``write(store, items)`` on the fold thread for ``item`` and whatever else is handed with the same
        ``write`` meanwhile (the scrapes that wait, kept in one transaction); the future's result is ``item``'s, of the
        list it returns. Where that fails, each is written alone: one the store refuses must not fail the others."""
        future: Future[Any] = Future()
        with self._lock:
            waiting = self._together.setdefault(write, [])
            waiting.append((item, future))
            first = len(waiting) == 1
        if first:
            self.call(lambda store: self._write_together(store, write), ordered=False)
        return future

    def _write_together(self, store: Store, write: Callable[[Store, list[Any]], list[Any]]) -> None:
        with self._lock:
            waiting = [(item, f) for item, f in self._together.pop(write) if f.set_running_or_notify_cancel()]
        try:
            results = write(store, [item for item, _ in waiting])
        except Exception:  # noqa: BLE001 (one item the store refuses must not fail the others: each alone)
            for item, future in waiting:
                try:
                    future.set_result(write(store, [item])[0])
                except Exception as exc:  # noqa: BLE001 (handed to the sender through its future)
                    future.set_exception(exc)
            return
        for (_, future), result in zip(waiting, results, strict=True):
            future.set_result(result)

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
                why = f" (folding waits: {self.stall.error})" if self.stall else ""
                raise QueueFull(f"{self._backlog_bytes} bytes are waiting to be folded into the store{why}")
            self._backlog_bytes += size
            self._backlog_batches += batches

    # --- journal thread ----------------------------------------------------------------------------------------

    def _journal_loop(self) -> None:
        os_thread.settle()
        while True:
            items = [self._to_journal.get()]
            while True:
                try:
                    items.append(self._to_journal.get_nowait())
                except queue.Empty:
                    break
            pending: list[tuple[Batch, Future[Record]]] = []
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

    def _append(self, pending: list[tuple[Batch, Future[Record]]]) -> None:
        if not pending:
            return
        try:
            records = self.journal.append([batch for batch, _ in pending])
        except OSError as exc:  # the disk refused, and the journal rolled the append back: Ray resends
            log.error("journal append failed: %s", exc)
            self._backlog(-sum(len(batch[2]) for batch, _ in pending), -len(pending))
            for _, future in pending:
                future.set_exception(exc)
            return
        for record, (_, future) in zip(records, pending):
            self._unfolded.add(record)
            self._to_fold.put(record)
            future.set_result(record)

    # --- gather thread -----------------------------------------------------------------------------------------

    def _gather_loop(self) -> None:
        """Make groups of journalled batches for the fold thread, in order with the calls between them. With several
        cores, a group gathered while the fold thread is busy (a backlog being drained) is parsed here meanwhile."""
        os_thread.settle(FOLD_NICENESS)
        try:
            self._gather()
        finally:
            self._to_apply.put(_STOP)  # however gathering ends, the fold thread stops after what it was given

    def _gather(self) -> None:
        draining = False
        while True:
            item = self._to_fold.get()
            if item is _STOP or self._stopping.is_set():
                return
            if not isinstance(item, Record):
                self._hand(item)
                continue
            # Gather what arrives with the first POST, and while the fold thread finishes what it has and rests
            # after its last round. Behind a full group the backlog is being drained: gather while the fold thread
            # writes the group before, and no longer.
            if not draining and not self._until_unfinished(0):
                return
            self._round_s = 0.0  # (the fold thread is done with the round before, or drains: no rest)
            groups, draining, after = self._round(item, draining)
            for group in groups:
                if not self._until_unfinished(1):  # at most one group parsed ahead of the one being folded
                    return
                # the fold thread is busy: parse the group meanwhile, where its signal parses ahead (Ray's events)
                signal = SIGNALS.get(group[0].kind)
                ahead = self._unfinished > 0 and self.store.threads > 1 and signal is not None and signal.prepare
                self._hand(_Group(group, self._parse(group) if ahead else None))
            if after is _STOP:
                return
            if after is not None:
                self._hand(after)

    def _round(self, first: Record, draining: bool) -> tuple[list[list[Record]], bool, Any]:
        """The groups (one a kind, in the order each kind first came) of what arrives until the round's deadline:
        the latest of each kind's first record's linger and the end of the fold thread's rest (none while
        ``draining``: as soon as the fold thread is free); whether a group filled, which ends the round early; and
        the ordered call that ended it, if one did, to be handed after its groups."""
        groups: dict[str, list[Record]] = {}
        filled: dict[str, tuple[int, int]] = {}  # a group's bytes and items
        deadline = None if draining else self._rest_until
        record = first
        while True:
            group = groups.setdefault(record.kind, [])
            group.append(record)
            size, items = filled.get(record.kind, (0, 0))
            filled[record.kind] = size, items = size + len(record.body), items + record.events
            if len(group) == 1 and deadline is not None:
                signal = SIGNALS.get(record.kind)  # (one no longer registered: its records are quarantined)
                deadline = max(deadline, record.at + (signal.linger if signal else fold_linger)(self.settings))
            full = size >= MAX_GROUP_BYTES or items >= MAX_GROUP_EVENTS
            if full or self._stopping.is_set():
                return list(groups.values()), full, None
            nxt = self._next(deadline)
            if not isinstance(nxt, Record):
                return list(groups.values()), False, nxt
            record = nxt

    def _next(self, deadline: float | None) -> Any:
        """What the journal thread hands next before ``deadline`` (None: as soon as the fold thread is free), or
        None."""
        while True:
            if deadline is None:
                timeout = BUSY_POLL_S if self._unfinished else 0.0
            else:
                timeout = max(0.0, deadline - time.monotonic())
            try:
                return self._to_fold.get(timeout=timeout)
            except queue.Empty:
                if deadline is None and self._unfinished:
                    continue
                return None

    def _parse(self, group: list[Record]) -> Any:
        """``group`` parsed ahead by its signal for the fold thread, or None (it parses the group itself, and says
        what is wrong)."""
        try:
            return SIGNALS[group[0].kind].prepare(self.store, group)  # type: ignore[misc]
        except Exception:  # noqa: BLE001 (the fold thread meets the same error, and handles it)
            return None

    def _hand(self, item: Any) -> None:
        """Give the fold thread a group or a call."""
        with self._finished:
            self._unfinished += 1
        self._to_apply.put(item)

    def _until_unfinished(self, most: int) -> bool:
        """Wait until the fold thread has at most ``most`` items unfinished; False if the writer stops meanwhile."""
        with self._finished:
            while self._unfinished > most:
                if self._stopping.is_set():
                    return False
                self._finished.wait(IDLE_S)
        return True

    # --- fold thread -------------------------------------------------------------------------------------------

    def _fold_loop(self) -> None:
        # Folding can wait; the Ray workloads beside the server (often on the same machine) cannot. Acknowledging
        # (the journal thread) keeps its normal priority, so Ray is never held up.
        os_thread.settle(FOLD_NICENESS)
        while True:
            try:
                item = self._to_apply.get(timeout=IDLE_S)
            except queue.Empty:
                if self._stopping.is_set():
                    return
                self._prune_if_due()
                self._checkpoint_if_due()
                continue
            if item is _STOP or self._stopping.is_set():
                return
            started = time.monotonic()
            if isinstance(item, _Group):
                self._fold(item.records, item.parsed)
            else:
                _settle(item[1], item[0], self.store)
            ended = time.monotonic()
            self._budget.spend(ended - started, ended)  # (a call's time too: it is folding's)
            if isinstance(item, _Group):
                self._round_s += ended - started
                self._rest_until = ended + self._budget.rest(self._round_s)
            with self._finished:
                self._unfinished -= 1
                self._finished.notify_all()
            self._prune_if_due()  # (a server never idle prunes too)

    def _prune_if_due(self) -> None:
        """Make each signal's upkeep (the log and metrics retentions, the traces' tail sampling, the metrics'
        downsampling, where the settings ask for them), at most every PRUNE_EVERY_S; a failure is tried again then."""
        if time.monotonic() < self._prune_after:
            return
        self._prune_after = time.monotonic() + PRUNE_EVERY_S
        for upkeep in (upkeep for signal in SIGNALS.values() for upkeep in signal.upkeep):
            try:
                if said := upkeep.run(self.store, self.settings):
                    log.info("%s: %s", upkeep.name, said)
            except Exception as exc:  # noqa: BLE001 (environmental: a full disk, say; all stays until next time)
                log.warning("%s failed, will try again in %.0f s: %s", upkeep.name, PRUNE_EVERY_S, exc)

    def _checkpoint_if_due(self) -> None:
        """Idle: fold the WAL into the database file now, not mid-burst (a full disk defers it by MAX_RETRY_S)."""
        if time.monotonic() < self._checkpoint_after:
            return
        try:
            self.store.checkpoint_if_due()
        except Exception as exc:  # noqa: BLE001 (environmental: tried again later)
            log.warning("checkpoint failed, will try again in %.0f s: %s", MAX_RETRY_S, exc)
            self._checkpoint_after = time.monotonic() + MAX_RETRY_S

    def _fold(self, group: list[Record], parsed: Any = None) -> None:
        """Parse and apply ``group`` in one transaction, and release it from the journal. It has been acknowledged,
        so it is never dropped, and it must not hold up what follows: a group that fails in any way is folded batch
        by batch. A batch whose content the store refuses is quarantined whole; an environmental failure is retried
        with back-off until it passes; out of memory :data:`MEMORY_TRIES` times, or an error that is neither
        :data:`UNFORESEEN_TRIES` times, and it is quarantined."""
        delays, tries = _delays(), 0
        while True:
            started = time.perf_counter()
            tries += 1
            try:
                signal = SIGNALS.get(group[0].kind)
                if signal is None or signal.apply is None:
                    raise LookupError(f"no signal registered journals records of kind {group[0].kind!r}")
                result = signal.apply(self.store, group, parsed, self._unfolded.watermark(group))
            except Exception as exc:  # noqa: BLE001 (split, quarantined or retried: never dropped)
                parsed = None  # dropped by the failed apply: what follows parses again
                if len(group) > 1:
                    log.warning("folding %d batches as one failed (%s); folding them one by one", len(group), exc)
                    for record in group:
                        if self._stopping.is_set():
                            return
                        self._fold([record])
                elif isinstance(exc, CONTENT_ERRORS):
                    self._quarantine(group[0], exc)
                elif isinstance(exc, MEMORY_ERRORS) and tries >= MEMORY_TRIES:
                    self._quarantine(group[0], exc, why=f"out of memory {tries} times, within --memory-limit")
                elif not isinstance(exc, ENVIRONMENTAL_ERRORS) and tries >= UNFORESEEN_TRIES:
                    self._quarantine(group[0], exc, why=f"an error not foreseen, {tries} tries", unforeseen=True)
                elif self._wait(exc, next(delays)):
                    continue
                return  # done, or stopping: what is unfolded stays in the journal for the next start
            self._done(group, result, time.perf_counter() - started)
            return

    def _quarantine(self, record: Record, exc: Exception, why: str | None = None, unforeseen: bool = False) -> None:
        """Keep a batch the store could not fold in the quarantine table with the reason (and ``why``: what was
        tried), retried like a fold; an ``unforeseen`` error is logged with its traceback, since it may be raysight's
        own bug."""
        error = str(exc).partition("\n")[0]  # (DuckDB's go on with advice)
        reason = f"the store could not fold this batch: {type(exc).__name__}: {error}" + (f" ({why})" if why else "")
        log.error("journal record %d quarantined: %s", record.seq, reason, exc_info=exc if unforeseen else None)
        delays, kept_in = _delays(), None
        while True:
            try:
                if isinstance(exc, MEMORY_ERRORS) and kept_in is None:  # the table may not hold it either
                    kept_in = self.journal.keep_aside(f"{record.seq:016d}.batch", record.body)
                self.store.quarantine_batch(record.body, reason, self._unfolded.watermark([record]), kept_in)
            except Exception as failure:  # noqa: BLE001 (environmental: retried)
                if self._wait(failure, next(delays)):
                    continue
                return
            self._done([record], None, 0.0)
            return

    def _done(self, group: list[Record], result: Any, seconds: float) -> None:
        self.stall = None
        self.journal.release(self._unfolded.watermark(group))
        self._unfolded.done(group)
        self._backlog(-sum(len(r.body) for r in group), -len(group))
        if self._on_commit and result is not None:
            self._on_commit(result, seconds)

    def _wait(self, exc: Exception, delay: float) -> bool:
        """Record and log a failure to be retried, then wait ``delay``; False if the writer stops meanwhile."""
        self.fold_retries += 1
        error = f"{type(exc).__name__}: {exc}"
        since, tries = (self.stall.since, self.stall.tries) if self.stall else (time.time(), 0)
        self.stall = Stall(error, since, tries + 1)
        log.warning(  # with the traceback at a stall's first failure: an unforeseen error is retried too
            "folding failed (%s); the batches stay journalled, retrying in %.1f s", error, delay, exc_info=tries == 0
        )
        return not self._stopping.wait(delay)


def _delays() -> Iterator[float]:
    """Back-off: RETRY_S, doubling up to MAX_RETRY_S."""
    delay = RETRY_S
    while True:
        yield delay
        delay = min(delay * 2, MAX_RETRY_S)


def _settle(future: Future[Any], fn: Callable[[Store], Any], store: Store) -> None:
    if not future.set_running_or_notify_cancel():
        return
    try:
        future.set_result(fn(store))
    except Exception as exc:  # noqa: BLE001 (handed to the caller through its future)
        future.set_exception(exc)
