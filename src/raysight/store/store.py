"""The embedded DuckDB store: opened (``opening.py``) and upgraded (``upgrade.py``), its transactions, readers and
counters.

Each signal's writes (``signals/*/apply.py``) go through its transactions: :meth:`Store.folding` for a journalled
group, :meth:`Store.write` for what is written at once; what a signal keeps beside the store is its part
(:meth:`Store.part`).
Only the server process opens the store. Writes go through :class:`raysight.store.writer.Writer`, one thread;
readers take their own cursor (:meth:`Store.reader`) and see committed data only.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import duckdb

from raysight.settings import DB_FILE, StoreSettings
from raysight.signals.registry import SIGNALS, every_table
from raysight.signals.signal import forget_by_session
from raysight.store import schema, upgrade
from raysight.store.opening import DB_ALIAS, open_database, wal
from raysight.store.tx import Tx

IDLE_CHECKPOINT_BYTES = 32 * 1024 * 1024
T = TypeVar("T")


class Store:
    """One DuckDB database file in ``data_dir``."""

    def __init__(
        self, data_dir: str | os.PathLike[str], settings: StoreSettings | None = None, worker_niceness: int = 0
    ) -> None:
        """Open (creating or upgrading) the store; DuckDB's worker threads run at ``worker_niceness`` and take at most
        the settings' ``memory_limit`` (None: the defaults); a session keeps at most their ``metrics_max_series``
        series."""
        settings = settings or StoreSettings()
        self.data_dir = Path(data_dir)
        self.metrics_max_series = settings.metrics_max_series
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.data_dir / DB_FILE
        self.threads = len(os.sched_getaffinity(0))
        self._niceness, self._memory_limit = worker_niceness, settings.memory_limit
        self.tables = every_table()  # (of the signals registered now)
        self.reopen()
        self._reader_lock = threading.Lock()
        self._folds, self._folds_lock = 0, threading.Lock()  # connections folding or parsing now (one_thread)
        self._parts: dict[str, Any] = {}  # what each signal keeps beside the store (Store.part)
        try:
            upgrade.migrate(self)
            for signal in SIGNALS.values():
                if signal.reopened is not None:
                    with self.transaction() as tx:
                        signal.reopened(tx)
        except BaseException:
            self.con.close()  # a failed open holds nothing open
            raise

    def reopen(self) -> None:
        """Open the file again as the writer's connection (after :func:`upgrade.rewrite` replaced it)."""
        self.con = open_database(self.path, self._niceness, self.threads, self._memory_limit)

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        """The writer's connection (the writer thread's alone)."""
        return self.tx.con

    @con.setter
    def con(self, con: duckdb.DuckDBPyConnection) -> None:
        self.tx = Tx(con)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Tx]:
        """BEGIN … COMMIT on the writer's connection, or ROLLBACK when anything in the block raises."""
        self.con.execute("BEGIN")
        try:
            yield self.tx
        except BaseException:
            with contextlib.suppress(duckdb.Error):  # what failed may have ended the transaction: say what it was
                self.con.execute("ROLLBACK")
            raise
        self.tx.run("COMMIT")

    @contextlib.contextmanager
    def folding(self, journal_seq: int | None) -> Iterator[Tx]:
        """The transaction a signal applies a group of its journalled batches in, its statements on one thread, that
        records ``journal_seq`` (the last journal record the group holds; None: not journalled) as folded."""
        with self.one_thread(self.con), self.transaction() as tx:
            yield tx
            if journal_seq is not None:
                self._mark_folded(journal_seq)

    @contextlib.contextmanager
    def one_thread(self, con: duckdb.DuckDBPyConnection) -> Iterator[None]:
        """Run the block's statements on one thread. A fold is two dozen short statements: split across threads
        they cost ~20 % more CPU and finish no sooner (reads meanwhile run on one thread too). DuckDB's thread count
        is the database's, not a connection's: it is back to all cores once no connection folds or parses."""
        with self._folds_lock:
            self._folds += 1
            if self._folds == 1:
                con.execute("SET threads = 1")
        try:
            yield
        finally:
            with self._folds_lock:
                self._folds -= 1
                if self._folds == 0:
                    con.execute(f"SET threads = {self.threads}")

    def _mark_folded(self, journal_seq: int) -> None:
        """Record the last journal record folded (inside the transaction that folded it)."""
        self._run("INSERT OR REPLACE INTO meta VALUES ('journal_folded', ?)", [str(journal_seq)])

    def _one(self, sql: str, params: object = None) -> Any:
        return self.tx.one(sql, params)

    def reader(self) -> duckdb.DuckDBPyConnection:
        """A cursor for one thread's reads."""
        with self._reader_lock:
            cursor = self.con.cursor()
        cursor.execute(f"USE {DB_ALIAS}")  # a cursor starts in DuckDB's in-memory database
        return cursor

    def quarantine_batch(self, body: bytes, reason: str, journal_seq: int, kept_in: Path | None = None) -> None:
        """Keep a whole journalled batch the store could not fold (with why), and move past it; one whose body was
        ``kept_in`` a file (too big for the store's memory) says where."""
        reason = reason[:500] + (f"; its body is kept in {kept_in}" if kept_in else "")
        with self.transaction():
            self._run(
                "INSERT INTO quarantine VALUES (?, NULL, ?, now(), ?) ON CONFLICT DO NOTHING",
                [hashlib.md5(body, usedforsecurity=False).hexdigest(), reason, None if kept_in else body.decode()],
            )
            self.count(quarantined=1)
            self._mark_folded(journal_seq)

    def journal_folded(self) -> int:
        """The last journal record folded into the store (0 before any)."""
        row = self._one("SELECT value FROM meta WHERE key = 'journal_folded'")
        return int(row[0]) if row else 0

    def checkpoint_if_due(self) -> None:
        """Checkpoint when the WAL has grown past :data:`IDLE_CHECKPOINT_BYTES` (writer thread)."""
        wal_file = wal(self.path)
        if wal_file.exists() and wal_file.stat().st_size > IDLE_CHECKPOINT_BYTES:
            self._run("CHECKPOINT")

    def part(self, name: str, make: Callable[[Store], T]) -> T:
        """What the signal ``name`` keeps beside this store (a cache, a connection of its own), made by ``make`` on
        first use; closed with the store, where it has a ``close()``."""
        if name not in self._parts:
            self._parts[name] = make(self)
        return self._parts[name]  # type: ignore[no-any-return]

    def close(self) -> None:
        for kept in self._parts.values():
            if callable(getattr(kept, "close", None)):
                kept.close()
        self.con.close()

    def _run(self, sql: str, params: object = None) -> duckdb.DuckDBPyConnection:
        """Run one statement of the write path (timed: :meth:`Tx.run`) on the writer's connection."""
        return self.tx.run(sql, params)

    def count(self, **deltas: int) -> None:
        """Add to the ingest counters (``raysight doctor``) on their own."""
        self.tx.count(**deltas)

    def write(self, write: Callable[[Tx], T]) -> T:
        """``write`` (a signal's, written at once: not journalled) in one transaction; what it returns."""
        with self.transaction() as tx:
            return write(tx)

    def delete_session(self, session: str) -> bool:
        """Delete what the store holds of ``session``: each signal's rows of it, then the store's own."""
        with self.transaction() as tx:
            found = tx.one("SELECT count(*) FROM sessions WHERE session = ?", [session])
            for signal in SIGNALS.values():
                signal.forget_session(self, tx, session)
            forget_by_session(schema.OWN_TABLES)(self, tx, session)
        return bool(found and found[0])
