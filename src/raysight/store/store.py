"""The embedded DuckDB store: opening and upgrading it, applying batches in one transaction, and reindexing.

A group of POST bodies goes in whole, through the stages of :mod:`raysight.store.event_stages` in the order of
:mod:`raysight.store.pipeline`: DuckDB explodes and parses them, the raw events are inserted (only first sightings are
folded), task events are folded in SQL and the cluster-level events by their Python folds
(:mod:`raysight.ingest.ray_events`), all in one transaction.
Only the server process opens the store. Writes go through :class:`raysight.store.writer.Writer`, one thread;
readers take their own cursor (:meth:`Store.reader`) and see committed data only.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import orjson
import pyarrow as pa

from raysight import os_thread
from raysight.ingest.ray_events import HANDLERS, Key, Patch, fold_payload
from raysight.settings import DB_FILE, StoreSettings
from raysight.signals.polls.parse import driver_patch
from raysight.signals.registry import SIGNALS, every_table
from raysight.signals.signal import forget_by_session
from raysight.sql_literals import sql_str
from raysight.store import (
    catalog,
    schema,
)
from raysight.store import event_stages as stage
from raysight.store.event_stages import SUPPORTED_TYPES
from raysight.store.fold import fold
from raysight.store.reconcile import reconcile
from raysight.store.statements import Stage
from raysight.store.tx import Tx
from raysight.tables import arrow_rows

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


@dataclass(frozen=True)
class Post:
    """One POST body (a JSON array of Ray events) and the ingest URL's cluster label and run ID."""

    body: bytes | str
    label: str | None = None
    run_id: str | None = None


@dataclass(frozen=True)
class Parsed:
    """POST bodies parsed apart from the store's transaction (:meth:`Store.parse`): the table of their events (as
    ``batch_events`` would hold them), and the patches of the Python-folded types."""

    table: str  # in the staging database, dropped by apply
    patches: dict[int, list[tuple[str, Key, Patch]]]


@dataclass(frozen=True)
class ApplyResult:
    received: int
    stored: int
    deduplicated: int
    quarantined: int
    unsupported: int


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
        self._merges: dict[tuple[str, tuple[str, ...]], str] = {}
        self._staged: dict[str, Stage] = {}  # the staging relations made, by name
        self._folds, self._folds_lock = 0, threading.Lock()  # connections folding or parsing now (_one_thread)
        self._parser: duckdb.DuckDBPyConnection | None = None  # Store.parse's, made on first use
        self._parts: dict[str, Any] = {}  # what each signal keeps beside the store (Store.part)
        self._parses = 0
        try:
            self._migrate()
        except BaseException:
            self.con.close()  # a failed open holds nothing open
            raise

    def _open(self) -> duckdb.DuckDBPyConnection:
        con = _connect(self.path, self._niceness, self.threads, self._memory_limit)
        con.execute("SET enable_progress_bar = false")  # long migrations must not draw on the server's terminal
        con.execute(f"ATTACH ':memory:' AS {STAGING}")  # what Store.parse hands to the writer's connection
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
            self.reindex()

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
        with self._one_thread(self.con), self.transaction() as tx:
            yield tx
            if journal_seq is not None:
                self._mark_folded(journal_seq)

    @contextlib.contextmanager
    def _one_thread(self, con: duckdb.DuckDBPyConnection) -> Iterator[None]:
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
        if self._parser is not None:
            self._parser.close()
        self.con.close()

    # --- writes (writer thread only) -------------------------------------------------------------------------

    def apply(self, posts: Sequence[Post], journal_seq: int | None = None, parsed: Parsed | None = None) -> ApplyResult:
        """Write POST bodies durably: raw events, quarantine, entity folds, inference and counters, in one transaction.

        Only events the store had not seen are folded, so a resent batch changes nothing but the counters.
        ``journal_seq`` is the last journal record the posts hold; it is recorded in the same transaction.
        ``parsed`` is what :meth:`parse` made of the same posts, if it was called (else they are parsed here).
        """
        try:
            return self._apply(posts, journal_seq, parsed)
        finally:
            if parsed is not None:  # after the transaction, which writes to the store's database only
                with contextlib.suppress(duckdb.Error):  # (the connection a failure left unusable will not)
                    self._run(f"DROP TABLE IF EXISTS {parsed.table}")

    def _apply(self, posts: Sequence[Post], journal_seq: int | None, parsed: Parsed | None) -> ApplyResult:
        with self.folding(journal_seq):
            if parsed is None:
                with self._registered(stage.POSTED, posts_table(posts)):
                    patches = self._parse(stage.POSTS)
            else:
                self._stage(stage.parsed(parsed.table))
                patches = parsed.patches
            received, unsupported = self._one(stage.RECEIVED.sql)
            (quarantined,) = self._one(stage.QUARANTINE.sql)
            self._stage(stage.SEEN)  # a resend, or an event twice in the group: fold each first sighting once
            self._stage(stage.FRESH)
            (stored,) = self._one(stage.INSERT_RAW.sql)
            self._fold(patches)
            result = ApplyResult(
                received=received,
                stored=stored,
                deduplicated=received - stored - quarantined,
                quarantined=quarantined,
                unsupported=unsupported,
            )
            self.count(**asdict(result), batches=1)
            self._drop_staging()
        return result

    def parse(self, posts: Sequence[Post]) -> Parsed:
        """Parse POST bodies for :meth:`apply` with a connection of this method's own, into a table of the staging
        database: on another thread, while the writer's connection writes the group before (one thread at a time
        calls this). :meth:`apply` drops the table; a parse that is never applied leaves it until the store closes."""
        if self._parser is None:
            self._parser = self.reader()
        self._parses += 1
        table = f"{STAGING}.parsed_{self._parses}"
        with self._one_thread(self._parser), self._registered(stage.POSTED, posts_table(posts), self._parser):
            try:
                patches = self._parse(stage.POSTS, self._parser, into=table)
            except BaseException:
                self._parser.execute(f"DROP TABLE IF EXISTS {table}")
                raise
            finally:
                self._parser.execute(stage.POSTS.drop)
        return Parsed(table, patches)

    def _stage(self, made: Stage, con: duckdb.DuckDBPyConnection | None = None) -> None:
        """Make one stage's relation (see :mod:`raysight.store.pipeline`) with ``con`` (the writer's connection, which
        drops it at the end of the group, unless another is given)."""
        self._run(made.sql, con=con)
        if con is None:
            self._staged[made.name] = made

    def _run(
        self, sql: str, params: object = None, con: duckdb.DuckDBPyConnection | None = None
    ) -> duckdb.DuckDBPyConnection:
        """Run one statement of the write path (timed: :meth:`Tx.run`) with ``con``, else the writer's connection."""
        return (self.tx if con is None else Tx(con)).run(sql, params)

    def _drop_staging(self) -> None:
        """Let go of the group's staging relations (a 48 MB group's parsed events hold several times that)."""
        for made in self._staged.values():
            self._run(made.drop)
        self._staged.clear()

    def _parse(
        self, incoming: Stage, con: duckdb.DuckDBPyConnection | None = None, into: str | None = None
    ) -> dict[int, list[tuple[str, Key, Patch]]]:
        """Parse the events of ``incoming`` into ``batch_events``, or the table ``into`` (with ``con``, else the
        writer's connection); returns the patches of the Python-folded types (whose malformed events get their
        ``reason`` here)."""
        self._stage(incoming, con)
        if into is None:
            self._stage(stage.EVENTS)
        else:
            self._run(f"CREATE TABLE {into} AS {stage.EVENTS.select}", con=con)
        events = into or stage.EVENTS.name
        patches: dict[int, list[tuple[str, Key, Patch]]] = {}
        reasons: list[tuple[int, str]] = []
        rows = self._run(
            f"SELECT seq, session, event_type, body FROM {events} "
            "WHERE reason IS NULL AND list_contains($1, event_type)",
            [list(HANDLERS)],
            con,
        ).fetchall()
        for seq, session, event_type, body in rows:
            try:
                patches[seq] = fold_payload(event_type, session, orjson.loads(body))
            except (ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:
                reasons.append((seq, f"{type(exc).__name__}: {exc}"[:500]))
        if reasons:
            self._run(
                f"UPDATE {events} SET reason = r.reason FROM (SELECT unnest($1::BIGINT[]) AS seq, "
                f"unnest($2::VARCHAR[]) AS reason) r WHERE {events}.seq = r.seq",
                [[seq for seq, _ in reasons], [why for _, why in reasons]],
                con,
            )
        return patches

    def _fold(self, patches: dict[int, list[tuple[str, Key, Patch]]]) -> None:
        """Fold ``fresh`` (events first seen) into the entity tables: tasks in SQL, the rest from ``patches``; session
        spans come from all of ``batch_events``."""
        for made in (stage.TRANSITIONS, stage.PROFILE, stage.TASKS):
            self._stage(made)
        self._upsert("tasks", stage.TASKS.name)
        for appended in stage.APPENDED:
            self._run(appended.sql)
        seqs = self._run(stage.PATCHED.sql).fetchall()
        self._upsert_patches(p for (seq,) in seqs for p in patches[seq])
        self._stage(stage.SESSIONS)
        self._upsert("sessions", stage.SESSIONS.name)
        sessions = [row[0] for row in self._run(f"SELECT session FROM {stage.SESSIONS.name} ORDER BY 1").fetchall()]
        reconcile(self._run, sessions)

    def _upsert_patches(self, patches: Iterable[tuple[str, Key, Patch]]) -> None:
        """Fold ``patches`` (in arrival order) into their entity tables."""
        for name, folded in fold(patches).items():
            staged = arrow_rows(folded, schema.FOLDED_TABLES[name].arrow_schema())
            with self._registered(f"arrow_{name}", staged):
                self._upsert(name, f"arrow_{name}")

    def _upsert(self, name: str, staged: str) -> None:
        """Insert the rows of relation ``staged`` with new keys, then merge the others into the stored rows (two
        cheap statements, not one: DuckDB's ON CONFLICT DO UPDATE costs per column it sets)."""
        table = schema.FOLDED_TABLES[name]
        inserted = self.tx.returning(table.insert_sql(staged), [c.name for c in table.keys])
        (total,) = self._one(f"SELECT count(*) FROM {staged}")
        if inserted.num_rows == total:
            return
        keys = ", ".join(c.name for c in table.keys)
        with self._registered(_INSERTED, inserted):
            merging = Stage("merging", f"SELECT * FROM {staged} ANTI JOIN {_INSERTED} USING ({keys})")
            self._stage(merging)
        counts = self._one("SELECT " + ", ".join(f"count({c.name})" for c in table.columns) + f" FROM {merging.name}")
        columns = tuple(c.name for c, n in zip(table.columns, counts) if n)
        sql = self._merges.get((name, columns))
        if sql is None:
            sql = self._merges[(name, columns)] = table.merge_sql(merging.name, list(columns))
        self._run(sql).fetchall()

    def count(self, **deltas: int) -> None:
        """Add to the ingest counters (``raysight doctor``) on their own."""
        self.tx.count(**deltas)

    def write(self, write: Callable[[Tx], T]) -> T:
        """``write`` (a signal's, written at once: not journalled) in one transaction; what it returns."""
        with self.transaction() as tx:
            return write(tx)

    def reindex(self) -> int:
        """Rebuild every entity table from the raw events; returns how many events were refolded.

        An event this raysight's parser rejects (kept by an older one) is left out of the folds, not fatal.
        """
        with self.transaction() as tx:
            for name in schema.FOLD_TABLE_NAMES:
                tx.run(f"DELETE FROM {name}")
            tx.run("UPDATE sessions SET first_ns = NULL, last_ns = NULL, events = NULL, raw_bytes = NULL")
            (last,) = self._one("SELECT coalesce(max(rowid) + 1, 0) FROM raw_events")
            total = 0
            for start in range(0, last, REINDEX_CHUNK):
                self._run("SET VARIABLE chunk_start = ?", [start])
                self._run("SET VARIABLE chunk_end = ?", [start + REINDEX_CHUNK])
                patches = self._parse(stage.RAW_CHUNK)
                self._stage(stage.NONE_SEEN)
                self._stage(stage.FRESH)
                self._fold(patches)
                total += self._one(f"SELECT count(*) FROM {stage.FRESH.name}")[0]
            self._refold_drivers()
            tx.run("UPDATE raw_events SET supported = list_contains($1, event_type)", [SUPPORTED_TYPES])
            self._drop_staging()
        return total

    def _refold_drivers(self) -> None:
        """Fold the drivers the poller kept (``polled``) into the workers table again: the raw events hold none."""
        rows = self._run(
            """SELECT session, row, coalesce(list_filter(history, lambda h: h.state = 'DEAD')[1].ts, last_ns)
               FROM polled WHERE resource = 'drivers'"""
        ).fetchall()
        self._upsert_patches(driver_patch(session, orjson.loads(row), dead_ns) for session, row, dead_ns in rows)
        reconcile(self._run, sorted({row[0] for row in rows}))

    def delete_session(self, session: str) -> bool:
        """Delete what the store holds of ``session``: each signal's rows of it, then the store's own."""
        with self.transaction() as tx:
            found = tx.one("SELECT count(*) FROM sessions WHERE session = ?", [session])
            for signal in SIGNALS.values():
                signal.forget_session(self, tx, session)
            forget_by_session(schema.OWN_TABLES)(self, tx, session)
        return bool(found and found[0])


def posts_table(posts: Sequence[Post]) -> pa.Table:
    """``staged_posts``: the POST bodies, numbered, with their URL's label and run ID."""
    return pa.table(
        {
            "post": pa.array(range(len(posts)), pa.int32()),
            "label": pa.array([p.label for p in posts], pa.string()),
            "run_id": pa.array([p.run_id for p in posts], pa.string()),
            "body": pa.array([p.body for p in posts], pa.string()),
        }
    )
