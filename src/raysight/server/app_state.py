"""What every route shares: the store, its writer, the secrets and the server's own metrics."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import duckdb
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection

from raysight.errors import Unavailable
from raysight.server.auth import Secrets
from raysight.server.capture_queue import CaptureQueue
from raysight.server.debug_relay import Relay
from raysight.server.forward import Forwarder
from raysight.server.resends import Resends
from raysight.settings import DB_FILE, Forwarding, QueryLimits
from raysight.signals.ray_events.apply import ApplyResult
from raysight.store.store import Store
from raysight.store.tx import Tx
from raysight.store.writer import Writer

T = TypeVar("T")


class Metrics:
    """The server's own Prometheus metrics (``/metrics``)."""

    def __init__(self, store: Store) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.received = Counter("raysight_events_received", "Ray events received", registry=r)
        self.stored = Counter("raysight_events_stored", "Ray events newly stored", registry=r)
        self.deduplicated = Counter("raysight_events_deduplicated", "Ray events already stored", registry=r)
        self.quarantined = Counter("raysight_events_quarantined", "Malformed events quarantined", registry=r)
        self.unsupported = Counter("raysight_events_unsupported", "Events of types raysight does not fold", registry=r)
        self.resends = Counter("raysight_ingest_resends", "Resent batches answered from the first copy", registry=r)
        self.rejected = Counter("raysight_ingest_rejected", "Ingest requests refused", ["reason"], registry=r)
        self.latency = Histogram(
            "raysight_ingest_latency_seconds",
            "Time from request to durable commit",
            registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        )
        self.commit = Histogram("raysight_store_commit_seconds", "Time to commit one group of batches", registry=r)
        self.store_bytes = Gauge("raysight_store_bytes", "Size of the store's files", registry=r)
        self.store_bytes.set_function(lambda: _size(store))

    def watch(self, writer: Writer) -> None:
        """Gauges read from the writer when scraped: the backlog, whether folding waits, the journal's damage."""
        r = self.registry
        gauges: dict[str, tuple[str, Callable[[], float]]] = {
            "raysight_ingest_backlog_batches": (
                "Batches acknowledged, not yet folded",
                lambda: writer.backlog()["batches"],
            ),
            "raysight_ingest_backlog_bytes": ("Bytes acknowledged, not yet folded", lambda: writer.backlog()["bytes"]),
            "raysight_fold_retrying": (
                "1 while folding waits on an environmental failure (full disk, I/O error, no memory) and retries",
                lambda: writer.stall is not None,
            ),
            "raysight_fold_retries": (
                "Environmental failures of folding since start, each retried",
                lambda: writer.fold_retries,
            ),
            "raysight_journal_corrupt": (
                "Corrupt stretches of the ingest journal skipped and kept aside (records after them were replayed)",
                lambda: writer.journal.damage()["corrupt"],
            ),
        }
        for name, (doc, read) in gauges.items():
            Gauge(name, doc, registry=r).set_function(read)

    def events_received(self) -> int:
        """Events received since the server started (counted as they are folded, resends included)."""
        return int(self.registry.get_sample_value("raysight_events_received_total") or 0)

    def resent(self, events: int) -> None:
        """A resend of a batch already committed, acknowledged without writing."""
        self.received.inc(events)
        self.deduplicated.inc(events)
        self.resends.inc()

    def committed(self, result: Any, seconds: float) -> None:
        """What a group's apply returned once committed: Ray events' counts, and how long their group took."""
        if not isinstance(result, ApplyResult):
            return
        self.received.inc(result.received)
        self.stored.inc(result.stored)
        self.deduplicated.inc(result.deduplicated)
        self.quarantined.inc(result.quarantined)
        self.unsupported.inc(result.unsupported)
        self.commit.observe(seconds)


def _size(store: Store) -> float:
    return float(sum(p.stat().st_size for p in store.data_dir.glob(f"{DB_FILE}*") if p.is_file()))


class BodyBudget:
    """Bytes of request bodies the server holds at once (being read, or read and not yet answered).

    Each body is bounded (``--max-body``) and so are connections (``--max-connections``), but not their product: a
    thousand connections each sending 16 MiB would hold 16 GB. Past the budget a body is refused with 503 before it
    is read (Ray resends it). Touched only from the event loop, so no lock.
    """

    def __init__(self, limit: int) -> None:
        self.limit, self.held = limit, 0

    def take(self, size: int) -> None:
        if self.held + size > self.limit:
            raise Unavailable(f"busy: {self.held:,} bytes of request bodies are being read; retry")
        self.held += size

    def give(self, size: int) -> None:
        self.held -= size


@dataclass
class AppState:
    store: Store
    writer: Writer
    secrets: Secrets
    metrics: Metrics
    max_body: int
    max_events: int
    bodies: BodyBudget
    forwarding: Forwarding = field(default_factory=Forwarding)
    forwarder: Forwarder | None = None  # spans sent on to another backend (``forwarding``)
    resends: Resends = field(default_factory=Resends)
    query_limits: QueryLimits = field(default_factory=QueryLimits)  # each PromQL query's (``raysight/promql/``)
    queries: asyncio.Semaphore = field(init=False)  # the PromQL queries evaluated at once
    pauses: Relay = field(default_factory=Relay)  # the debugger's live pauses (``debug_routes.py``)
    captures: CaptureQueue = field(default_factory=CaptureQueue)  # on-demand profiles under way (``capture_routes.py``)
    # Serve's memray captures read one at a time (``serve_capture_routes.py``): memray's reader takes a core and the
    # file's memory; those waiting hold no thread
    memray_reads: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(1))

    def __post_init__(self) -> None:
        self.queries = asyncio.Semaphore(self.query_limits.max_concurrency)

    async def read(self, fn: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
        """Run a read on a thread with its own cursor. A read the store has no memory for now (the writer holding
        most of ``--memory-limit``) is a 503 its caller retries, not a failure of the server."""

        def run() -> T:
            cursor = self.store.reader()
            try:
                return fn(cursor)
            except duckdb.OutOfMemoryException as e:
                raise Unavailable(
                    "the store has no memory for this read now (--memory-limit): retry", headers={"Retry-After": "1"}
                ) from e
            finally:
                cursor.close()

        return await run_in_threadpool(run)

    async def write(self, write: Callable[[Tx], None]) -> None:
        """``write`` committed at once, on the writer's fold thread (unordered: for what depends on no journalled
        batch); written still where the handler is cancelled meanwhile (its server stopping), which would cancel a
        future not shielded."""
        await asyncio.shield(asyncio.wrap_future(self.writer.call(lambda store: store.write(write), ordered=False)))


def app_state(request: HTTPConnection) -> AppState:
    state: Any = request.app.state.raysight
    return state
