"""The embedded DuckDB store: opening and upgrading it, transactions, readers and counters.

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
import pyarrow as pa

from raysight import os_thread
from raysight.settings import DB_FILE, StoreSettings
from raysight.signals.registry import SIGNALS, every_table
from raysight.signals.signal import forget_by_session
from raysight.sql_literals import sql_str
from raysight.store import (
    catalog,
    schema,
)
from raysight.store.tx import Tx

_INSERTED = "inserted_keys"  # the keys an upsert inserted (an Arrow table), which its merge leaves out

REINDEX_CHUNK = 100_000
WAL_LIMIT = "1GB"
DB_ALIAS = "store"
STAGING = "staging"
ROW_GROUP_ROWS = 16_384
STORAGE_VERSION = "latest"
REWRITE_SUFFIX = ".rewrite"
IDLE_CHECKPOINT_BYTES = 32 * 1024 * 1024
T = TypeVar("T")


def _connect(path: Path, niceness: int, threads: int, memory_limit: str) -> duckdb.DuckDBPyConnection:
    """Open the database from a thread at ``niceness``, so that DuckDB's worker threads, which it starts then and
    which do most of the folding, inherit it (Linux niceness is per thread)."""
    opened: list[duckdb.DuckDBPyConnection | BaseException] = []

    def open_niced() -> None:
        try:
            os_thread.settle(niceness)  # DuckDB's workers inherit both
            # DuckDB checkpoints when the WAL passes a threshold, rewriting every index each time; a higher
            # threshold and checkpoints while idle (the writer's) keep that out of ingest bursts. DuckDB would size
            # its pool by the machine's cores; pinned to fewer (taskset, a cgroup) it runs that many threads. Past
            # ``memory_limit`` DuckDB spills to the temporary directory beside the file (the one it would pick for the
            # file itself: the database is attached to an in-memory one, which would have none), or fails (and the
            # writer folds the group batch by batch). A new file takes the newest storage format (DuckDB before 2.0
            # wrote v0.10.2's by default, which cannot keep the raw bodies with zstd); an existing one keeps its own
            # until :meth:`Store._rewrite` copies it.
            config: dict[str, str | bool | int | float | list[str]] = {
                "checkpoint_threshold": WAL_LIMIT,
                "memory_limit": memory_limit,
                "threads": threads,
                "storage_compatibility_version": STORAGE_VERSION,
                "temp_directory": f"{path}.tmp",
            }
            con = duckdb.connect(config=config)
            # A fold appends whole row groups of this size straight to the file, compressed, and only their place
            # to the WAL (smaller ones go to the WAL whole, and are written again at the next checkpoint).
            con.execute(f"ATTACH {sql_str(str(path))} AS {DB_ALIAS} (ROW_GROUP_SIZE {ROW_GROUP_ROWS})")
            con.execute(f"USE {DB_ALIAS}")
            opened.append(con)
        except BaseException as exc:  # noqa: BLE001 (handed to the opening thread, which raises it)
            opened.append(exc)

    thread = threading.Thread(target=open_niced, name="raysight-duckdb")
    thread.start()
    thread.join()
    if isinstance(opened[0], BaseException):
        raise opened[0]
    return opened[0]


def _wal(path: Path) -> Path:
    return path.with_name(path.name + ".wal")


def _fsync(path: Path) -> None:
    """Flush a file's (or a folder's entries') writes to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
        self.con = self._open()
        self._reader_lock = threading.Lock()
        self._folds, self._folds_lock = 0, threading.Lock()  # connections folding or parsing now (one_thread)
        self._parts: dict[str, Any] = {}  # what each signal keeps beside the store (Store.part)
        try:
            self._migrate()
        except BaseException:
            self.con.close()  # a failed open holds nothing open
            raise

    def _open(self) -> duckdb.DuckDBPyConnection:
        con = _connect(self.path, self._niceness, self.threads, self._memory_limit)
        con.execute("SET enable_progress_bar = false")  # long migrations must not draw on the server's terminal
        con.execute(f"ATTACH ':memory:' AS {STAGING}")  # what a signal parses ahead hands to the writer's connection
        return con

    def _migrate(self) -> None:
        """Create the schema, or upgrade an older one (recorded in ``meta.schema_version``): in place, then, below
        :data:`schema.REWRITE_BELOW`, by a rewrite into a new file; the oldest are refolded from their raw events."""
        self.con.execute(schema.META.ddl())
        row = self._one("SELECT value FROM meta WHERE key = 'schema_version'")
        found = int(row[0]) if row else None
        if found is not None and found > schema.SCHEMA_VERSION:
            raise RuntimeError(
                f"the store at {self.path} has schema version {found}, newer than this raysight "
                f"({schema.SCHEMA_VERSION}); upgrade raysight"
            )
        refold = found is not None and found < schema.REFOLD_BELOW
        rewrite = found is not None and found < schema.REWRITE_BELOW
        reached = schema.REWRITE_BELOW - 1 if rewrite else schema.SCHEMA_VERSION
        if refold:  # entity tables are folds: dropped, and rebuilt from the raw events
            statements = [f"DROP TABLE IF EXISTS {name}" for name in schema.FOLD_TABLE_NAMES]
        else:
            versions = range(reached + 1 if found is None else found + 1, reached + 1)
            statements = [sql for version in versions for sql in schema.MIGRATIONS.get(version, [])]
        with self.transaction() as tx:
            for statement in statements + schema.all_ddl(self.tables):
                # An old storage format refuses zstd (v0.10.2's, DuckDB's default before 2.0): in place, the DDL goes
                # without it, and the rewrite adds it.
                tx.run(statement.replace(schema.ZSTD, "") if rewrite else statement)
            for statement in catalog.created():  # (after the tables, which DuckDB binds a macro's body to)
                tx.run(statement)
            tx.run("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", [str(reached)])
        if rewrite:
            self._rewrite()
            self._migrate()  # on from REWRITE_BELOW, in place
        if refold:
            for signal in SIGNALS.values():
                if signal.refold is not None:
                    signal.refold(self)

    def _rewrite(self) -> None:
        """Copy every table into a new file, created with the current DDL in the current storage format (at
        :data:`schema.REWRITE_BELOW`), and put it in the old one's place.

        Crash-safe: the old file is left as it is until the new one is complete and fsynced, then replaced by an
        atomic rename; a half-written new file is discarded by the next open, which rewrites again.
        """
        new = self.path.with_name(self.path.name + REWRITE_SUFFIX)
        for leftover in (new, _wal(new)):
            leftover.unlink(missing_ok=True)
        (old,) = self._one("SELECT current_database()")
        self.con.execute("CHECKPOINT")  # everything in the old file itself, so that closing it leaves no WAL
        self.con.execute(f"ATTACH {sql_str(str(new))} AS rewrite (STORAGE_VERSION '{STORAGE_VERSION}')")
        try:
            self.con.execute("USE rewrite")
            for statement in schema.all_ddl(self.tables):
                self.con.execute(statement)
            self.con.execute(f'USE "{old}"')
            tables = self.con.execute(
                "SELECT table_name FROM duckdb_tables() WHERE database_name = ? AND schema_name = 'main'", [old]
            ).fetchall()
            with self.transaction() as tx:
                for (name,) in tables:  # the columns the current DDL keeps (raw_events' key went in schema 6)
                    (columns,) = self._one(
                        """SELECT string_agg('"' || column_name || '"', ', ') FROM duckdb_columns()
                           WHERE database_name = ? AND schema_name = 'main' AND table_name = ? AND column_name IN (
                               SELECT column_name FROM duckdb_columns()
                               WHERE database_name = 'rewrite' AND schema_name = 'main' AND table_name = ?)""",
                        [old, name, name],
                    )
                    tx.run(f'INSERT INTO rewrite.main.{name} BY NAME SELECT {columns} FROM "{old}".main.{name}')
                tx.run(
                    "UPDATE rewrite.main.meta SET value = ? WHERE key = 'schema_version'", [str(schema.REWRITE_BELOW)]
                )
            self.con.execute("CHECKPOINT rewrite")
        finally:
            self.con.execute(f'USE "{old}"')
            self.con.execute("DETACH rewrite")
        _fsync(new)
        self.con.close()
        if _wal(self.path).exists() or _wal(new).exists():
            self.con = self._open()
            raise RuntimeError(f"a write-ahead log was left beside {self.path} while rewriting it; not replaced")
        os.replace(new, self.path)
        _fsync(self.data_dir)
        self.con = self._open()

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

    def _registered(self, name: str, table: pa.Table, con: duckdb.DuckDBPyConnection | None = None) -> Any:
        """``table`` visible to SQL (of ``con``, else the writer's connection) as ``name`` within the block."""
        return (self.tx if con is None else Tx(con)).registered(name, table)

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
        wal = _wal(self.path)
        if wal.exists() and wal.stat().st_size > IDLE_CHECKPOINT_BYTES:
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

    def _run(
        self, sql: str, params: object = None, con: duckdb.DuckDBPyConnection | None = None
    ) -> duckdb.DuckDBPyConnection:
        """Run one statement of the write path (timed: :meth:`Tx.run`) with ``con``, else the writer's connection."""
        return (self.tx if con is None else Tx(con)).run(sql, params)

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
