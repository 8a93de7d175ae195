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
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import astuple, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import pyarrow as pa

from raysight import os_thread
from raysight.ingest import agent_logs, prom_text
from raysight.ingest.prom_text import Scrape
from raysight.ingest.ray_metrics import RaySample
from raysight.ingest.ray_state import KINDS, Poll
from raysight.settings import DB_FILE, Downsampling, Retention, StoreSettings
from raysight.signals.ray_events.parse import Key, Patch
from raysight.signals.registry import SIGNALS, every_table
from raysight.signals.signal import forget_by_session
from raysight.sql_literals import sql_str
from raysight.store import (
    catalog,
    log_index,
    log_retention,
    metric_downsample,
    metric_retention,
    schema,
)
from raysight.store.reconcile import reconcile
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
MAX_TARGETS = 4096  # scraped targets whose series the store knows by their lines, in memory
MAX_KNOWN_LINES = 500_000  # lines of those targets' last scrapes, all together (~180 MB of Ray's, 362 bytes each)
MALFORMED = -1  # a line whose labels are not well formed (a label named twice): no series, parsed again each scrape
SAMPLES_SCHEMA = prom_text.METRIC_SAMPLES.arrow_schema()
T = TypeVar("T")


@dataclass
class _Target:
    """What the store knows of a scraped target: its last scrape's time, and the series of each line that scrape
    exposed (the line up to its value → the series' number; None: refused past the session's limit). Only the last
    scrape's: a line the target no longer exposes is forgotten, refused or not (it is parsed again if it comes back)."""

    last_ms: int | None
    series: dict[str, int | None] = field(default_factory=dict)


def key_of(scrape: Scrape) -> dict[str, str]:
    return {"session": scrape.session, "instance": scrape.instance, "job": scrape.job}


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
        self._targets: dict[tuple[str, str, str, tuple[tuple[str, str], ...]], _Target] = {}  # scraped targets, LRU
        self._known_lines = 0  # the lines of self._targets, all together
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

    def apply_logs(self, bodies: Sequence[bytes], journal_seq: int | None = None) -> int:
        """Store node agents' batches of log lines (``ingest/agent_logs.py``) in one transaction: each line once,
        however often its batch was sent (a file's lines before what is stored of it are skipped), and the lines of
        files appended to (the OTLP receiver's) after what is stored of them; the lines stored."""
        batches = [agent_logs.parse(body, agent_logs.MAX_LOG_LINES) for body in bodies]
        if appended := {b.files["file_key"][row] for b in batches for row, _, _ in b.appends}:
            ends = {
                (session, host, key): end
                for session, host, key, end in self.con.execute(
                    "SELECT session, host, file_key, end_offset FROM log_files WHERE file_key IN (SELECT unnest(?))",
                    [sorted(appended)],
                ).fetchall()
            }
            batches = [agent_logs.placed(batch, ends) for batch in batches]
        lines, files, gaps = (pa.concat_tables(tables) for tables in zip(*(batch.tables() for batch in batches)))
        lines = lines.append_column("ord", pa.array(range(lines.num_rows), pa.int64()))
        fields = ", ".join(f"{sql} AS {name}" for name, sql in agent_logs.LINE_FIELDS.items())
        with self.folding(journal_seq):
            (first,) = self._one(schema.LAST_LOG_SEQ_SQL)
            with self._registered("staged_lines", lines):
                (stored,) = self._one(
                    f"""INSERT INTO log_lines BY NAME
                        SELECT {first} + row_number() OVER (ORDER BY ord) AS seq,
                               * EXCLUDE (ord, read_ns, utc_offset_s, stamped, raw),
                               {agent_logs.LINE_TIME} AS ts_ns, from_base64(raw) AS raw, {fields}
                        FROM (SELECT l.*, {agent_logs.STAMPED_NS} AS stamped
                              FROM staged_lines l LEFT JOIN log_files f USING (session, host, file_key)
                              WHERE l.byte_offset >= coalesce(f.end_offset, 0)
                              QUALIFY row_number() OVER (PARTITION BY session, host, file_key, byte_offset
                                                         ORDER BY ord) = 1)"""
                )
            with self._registered("staged_files", files):
                self._run(
                    """INSERT INTO log_files
                       SELECT session, host, file_key, arg_min(name, end_offset), arg_max(path, end_offset),
                              arg_min(stream, end_offset), arg_min(worker_id, end_offset), arg_min(job_id, end_offset),
                              arg_min(pid, end_offset), max(end_offset), min(read_ns), max(read_ns)
                       FROM staged_files GROUP BY ALL
                       ON CONFLICT DO UPDATE SET end_offset = greatest(end_offset, excluded.end_offset),
                           path = excluded.path, last_ns = greatest(last_ns, excluded.last_ns)"""
                )
                # a session known by its logs alone (its events never sent, or yet to come) is still listed
                self._run(
                    "INSERT INTO sessions (session) SELECT DISTINCT session FROM staged_files ON CONFLICT DO NOTHING"
                )
            with self._registered("staged_gaps", gaps):
                (new_gaps,) = self._one("INSERT INTO log_gaps SELECT *, now() FROM staged_gaps ON CONFLICT DO NOTHING")
            self._index_lines(first)
            self._run(f"INSERT OR REPLACE INTO meta VALUES ('{schema.LOG_SEQ_KEY}', ?)", [str(first + stored)])
            self.count(
                log_lines=stored,
                log_lines_deduplicated=lines.num_rows - stored,
                log_batches=len(bodies),
                log_gaps=new_gaps,
            )
        return int(stored)

    def _index_lines(self, first: int) -> None:
        """Index the lines stored after ``first`` (``store/log_index.py``): their blocks' trigrams, and the blocks of
        their files."""
        block = log_index.BLOCK_LINES
        new_lines = self.con.sql(f"SELECT seq, text FROM log_lines WHERE seq > {first} ORDER BY seq")
        with self._registered("staged_blocks", log_index.block_grams(new_lines.to_arrow_table())):
            self._run(
                """INSERT INTO log_blocks SELECT block, grams::BIT FROM staged_blocks
                   ON CONFLICT DO UPDATE SET grams = grams | excluded.grams"""
            )
        self._run(
            f"""INSERT INTO log_file_blocks
                SELECT session, host, file_key, seq // {block}, count(*), min(byte_offset), max(byte_offset),
                       min(ts_ns), max(ts_ns), sum(strlen(text))
                FROM log_lines WHERE seq > {first} GROUP BY ALL
                ON CONFLICT DO UPDATE SET lines = lines + excluded.lines, bytes = bytes + excluded.bytes,
                    first_offset = least(first_offset, excluded.first_offset),
                    last_offset = greatest(last_offset, excluded.last_offset),
                    first_ns = least(first_ns, excluded.first_ns), last_ns = greatest(last_ns, excluded.last_ns)"""
        )

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

    def record_poll(self, poll: Poll) -> int:
        """Keep what a poll of a live cluster's dashboard found (``ingest/ray_state.py``): each entity's newest row,
        its state's changes appended to its history (a poll older than what is kept changes nothing), a sampled
        resource's rows replaced by the newest poll's; and how each resource's poll went. Returns the rows kept."""
        from raysight.signals.ray_events.apply import upsert_patches  # (which imports the store)

        sampled = [r for r in poll.polled if r in KINDS and KINDS[r].sample]
        with self.transaction():
            stale = [  # a sampled resource polled since: this poll's rows of it are out of date
                row[0]
                for row in self._run(
                    """SELECT DISTINCT resource FROM polled
                       WHERE session = $1 AND list_contains($2, resource) AND last_ns > $3""",
                    [poll.session, sampled, poll.polled_ns],
                ).fetchall()
            ]
            self._run(  # else only this poll's rows of it stand
                "DELETE FROM polled WHERE session = $1 AND list_contains($2, resource)",
                [poll.session, [r for r in sampled if r not in stale]],
            )
            with self._registered("staged_poll", poll.rows):
                self._run(
                    """INSERT INTO polled
                       SELECT $1, resource, id, $2, $2, state, row, [{'ts': $2, 'state': state}] FROM staged_poll
                       WHERE NOT list_contains($3, resource)
                       ON CONFLICT DO UPDATE SET
                           first_ns = least(polled.first_ns, excluded.first_ns),
                           last_ns = greatest(polled.last_ns, excluded.last_ns),
                           row = CASE WHEN excluded.last_ns >= polled.last_ns THEN excluded.row ELSE polled.row END,
                           state = CASE WHEN excluded.last_ns >= polled.last_ns THEN excluded.state
                                        ELSE polled.state END,
                           history = CASE WHEN excluded.last_ns > polled.last_ns
                                               AND excluded.state IS DISTINCT FROM polled.state
                                          THEN list_append(polled.history, excluded.history[1])
                                          ELSE polled.history END""",
                    [poll.session, poll.polled_ns, stale],
                )
                self._run(
                    """INSERT INTO polls
                       SELECT $1, r.resource, CASE WHEN r.ok THEN $2 END, CASE WHEN r.ok THEN coalesce(c.n, 0) END,
                              r.error, CASE WHEN r.ok THEN NULL ELSE $2 END
                       FROM (SELECT unnest($3::VARCHAR[]) AS resource, true AS ok, NULL::VARCHAR AS error
                             UNION ALL SELECT unnest($4::VARCHAR[]), false, unnest($5::VARCHAR[])) r
                       LEFT JOIN (SELECT resource, count(*) AS n FROM staged_poll GROUP BY resource) c USING (resource)
                       ON CONFLICT DO UPDATE SET
                           last_ok_ns = coalesce(greatest(polls.last_ok_ns, excluded.last_ok_ns), polls.last_ok_ns),
                           rows = CASE WHEN excluded.last_ok_ns >= coalesce(polls.last_ok_ns, 0) THEN excluded.rows
                                       ELSE polls.rows END,
                           last_error = coalesce(excluded.last_error, polls.last_error),
                           last_error_ns = coalesce(excluded.last_error_ns, polls.last_error_ns)""",
                    [poll.session, poll.polled_ns, poll.polled, list(poll.errors), list(poll.errors.values())],
                )
            if poll.cluster_status is not None:
                self._run(
                    "INSERT OR REPLACE INTO cluster_status VALUES (?, ?, ?)",
                    [poll.session, poll.polled_ns, poll.cluster_status],
                )
            self._run("INSERT INTO sessions (session) VALUES (?) ON CONFLICT DO NOTHING", [poll.session])
            if changed := self._changed_drivers(poll):  # workers, as their events would be (a driver outliving its
                upsert_patches(self, self.tx, changed)  # session is inferred dead)
                reconcile(self._run, [poll.session])
        return poll.rows.num_rows

    def _changed_drivers(self, poll: Poll) -> list[tuple[str, Key, Patch]]:
        """The drivers of ``poll`` that would change what is kept (a driver lives once: alive, then dead). One polled
        again as it was changes nothing, and costs no re-derivation of its session."""
        ids = [key[1] for _, key, _ in poll.drivers]
        kept = {
            worker_id: (node_id, pid, {h["state"] for h in history or []})
            for worker_id, node_id, pid, history in self._run(
                "SELECT worker_id, node_id, pid, history FROM workers "
                "WHERE session = ? AND list_contains(?, worker_id)",
                [poll.session, ids],
            ).fetchall()
        }

        def known(key: Key, patch: Patch) -> bool:
            node_id, pid, states = kept.get(key[1], (None, None, set()))
            return (node_id, pid) == (patch["node_id"], patch["pid"]) and states >= {
                h["state"] for h in patch["history"] or []
            }

        return [(table, key, patch) for table, key, patch in poll.drivers if not known(key, patch)]

    def record_scrape(self, scrape: Scrape) -> int:
        """:meth:`record_scrapes` of one scrape."""
        return self.record_scrapes([scrape])[0]

    def record_scrapes(self, scrapes: Sequence[Scrape]) -> list[int]:
        """Keep scrapes of Prometheus targets (``ingest/prom_text.py``), in one transaction: their samples, the
        series new to the store (their labels parsed once), each scrape itself (a series the target no longer exposes
        is stale from then on) and each metric's type and help. A scrape not newer than its target's last changes
        nothing (Prometheus too refuses samples out of order). Returns the samples kept of each.

        Each target's series are known by the lines of its last scrape (:class:`_Target`, in memory, at most
        :data:`MAX_TARGETS` targets and :data:`MAX_KNOWN_LINES` lines, the least recently scraped forgotten first:
        found again from their labels), so a scrape parses only its new lines' labels; the samples go in as one Arrow
        table."""
        kept_of: list[int] = []
        staged: dict[Any, _Target] = {}  # what the transaction adds to the targets, theirs once it commits
        samples: dict[str, list[Any]] = {name: [] for name in SAMPLES_SCHEMA.names}
        done: list[tuple[str, str, str, int, int]] = []
        refused: dict[str, list[int]] = {}  # session -> [series refused, samples dropped, last scrape's ms]
        with self.transaction():
            for scrape in scrapes:
                key = (scrape.session, scrape.instance, scrape.job, tuple(scrape.labels.items()))
                known = staged.get(key) or self._targets.get(key) or self._target(scrape)
                if known.last_ms is not None and known.last_ms >= scrape.scraped_ms:
                    kept_of.append(0)
                    continue
                page = scrape.page
                new = [i for i, head in enumerate(page.heads) if head not in known.series]
                found = self._record_new_series(scrape, page, new) if new else {}
                lines = {**known.series, **found} if found else known.series
                numbers = [lines.get(head, MALFORMED) for head in page.heads]
                if len(lines) != len(page.heads):  # (the lines gone from the page forgotten: no more than it has)
                    lines = {head: number for head, number in zip(page.heads, numbers) if number != MALFORMED}
                staged[key] = _Target(scrape.scraped_ms, lines)
                dropped = numbers.count(None)  # (refused past the session's limit)
                ts_ms, values = page.ts_ms, page.values  # (the page's own lists left whole: it may be kept again)
                if dropped or MALFORMED in numbers:
                    kept = [i for i, number in enumerate(numbers) if number is not None and number != MALFORMED]
                    numbers = [numbers[i] for i in kept]
                    ts_ms, values = [ts_ms[i] for i in kept], [values[i] for i in kept]
                samples["series_no"] += numbers
                samples["ts_ms"] += ts_ms
                samples["value"] += values
                done.append((scrape.session, scrape.instance, scrape.job, scrape.scraped_ms, len(numbers)))
                kept_of.append(len(numbers))
                if dropped:
                    counts = refused.setdefault(scrape.session, [0, 0, 0])
                    counts[0] += sum(1 for number in found.values() if number is None)
                    counts[1] += dropped
                    counts[2] = max(counts[2], scrape.scraped_ms)
            if samples["series_no"]:
                self.con.from_arrow(pa.table(samples, schema=SAMPLES_SCHEMA)).insert_into("metric_samples")
            if done:
                rows = ", ".join(["(?, ?, ?, ?, ?)"] * len(done))
                self._run(f"INSERT INTO metric_scrapes VALUES {rows}", [v for row in done for v in row])
            for session, (series, dropped, last_ms) in refused.items():
                added = {"session": session, "series": series, "samples": dropped, "ts_ms": last_ms}
                self._run(metric_retention.COUNT_REFUSED, added)
        for key, target in staged.items():  # (only once committed)
            self._forget(key)
            self._targets[key] = target  # (the most recently used last)
            self._known_lines += len(target.series)
        while len(self._targets) > MAX_TARGETS or self._known_lines > MAX_KNOWN_LINES:
            self._forget(next(iter(self._targets)))
        return kept_of

    def _forget(self, key: tuple[str, str, str, tuple[tuple[str, str], ...]]) -> None:
        if (target := self._targets.pop(key, None)) is not None:
            self._known_lines -= len(target.series)

    def _target(self, scrape: Scrape) -> _Target:
        """A target not in memory: its last scrape, as stored (its series are found again by their labels)."""
        (last,) = self._one(
            "SELECT max(ts_ms) FROM metric_scrapes WHERE session = $session AND instance = $instance AND job = $job",
            key_of(scrape),  # type: ignore[arg-type]
        )
        return _Target(last)

    def _record_new_series(self, scrape: Scrape, page: prom_text.Lines, new: list[int]) -> dict[str, int | None]:
        """Keep the series of the page's ``new`` lines (their labels parsed, under their canonical IDs) while the
        session has room for them, the type and help of the scrape's metrics, and the session; each new line's head
        → its series (None: refused past the session's limit; a line whose labels are not well formed is left out)."""
        split = [prom_text.name_and_labels(page.heads[i]) for i in new]
        lines = pa.table(
            {
                "line": pa.array(new, pa.int32()),
                "name": [name for name, _ in split],
                "labels_text": [labels for _, labels in split],
            }
        )
        self.con.register("new_lines", lines)
        try:
            self._run(f"CREATE OR REPLACE TEMP TABLE new_series AS {prom_text.SERIES}", scrape.target)
        finally:
            self.con.unregister("new_lines")
        self._run(
            """CREATE OR REPLACE TEMP TABLE fresh_series AS
               SELECT DISTINCT ON (series_id) * FROM new_series ANTI JOIN metric_series USING (series_id)"""
        )
        (fresh,) = self._one("SELECT count(*) FROM fresh_series")
        (held,) = self._one("SELECT count(*) FROM metric_series WHERE session = ?", [scrape.session])
        room = max(0, min(fresh, self.metrics_max_series - held))
        self._run(
            """INSERT INTO metric_series
               SELECT nextval('metric_series_no'), series_id, $session, name, labels, $instance, $job
               FROM fresh_series ORDER BY name, series_id LIMIT $room""",
            {**key_of(scrape), "room": room},
        )
        numbers = dict(
            self._run(
                "SELECT n.line, s.series_no FROM new_series n LEFT JOIN metric_series s USING (series_id)"
            ).fetchall()
        )
        self._run(
            f"INSERT OR REPLACE INTO metric_metadata SELECT $session, name, type, help FROM ({prom_text.METADATA})",
            {"session": scrape.session, "text": scrape.text},
        )
        self._run("INSERT INTO sessions (session) VALUES (?) ON CONFLICT DO NOTHING", [scrape.session])
        for staged in ("new_series", "fresh_series"):
            self._run(f"DROP TABLE {staged}")
        return {page.heads[i]: numbers[i] for i in new if i in numbers}

    def downsample_metrics(self, downsampling: Downsampling, now_ms: int | None = None) -> int:
        """Thin old samples (``store/metric_downsample.py``); the samples dropped."""
        with self.one_thread(self.con), self.transaction():
            return metric_downsample.downsample(self._run, downsampling, _or_now(now_ms, 1_000_000))

    def prune_metrics(self, retention: Retention, now_ms: int | None = None) -> int:
        """Drop the samples ``retention`` no longer keeps, leaving markers (``store/metric_retention.py``); how many."""
        with self.one_thread(self.con), self.transaction():
            return metric_retention.prune(self._run, retention, _or_now(now_ms, 1_000_000))

    def prune_logs(self, retention: Retention, now_ns: int | None = None) -> int:
        """Drop the log lines ``retention`` no longer keeps, leaving markers (``store/log_retention.py``); how many."""
        with self.one_thread(self.con), self.transaction():
            dropped = log_retention.prune(self._run, retention, _or_now(now_ns))
            if dropped:
                self.count(log_lines_dropped=dropped)
        return dropped

    def record_ray_metrics(self, samples: Sequence[RaySample]) -> int:
        """Keep what Ray's aggregators reported (one statement, so one transaction); returns the samples written.

        Counters only grow within one agent process (a sample's ``source``), so a counter keeps its greatest value
        and a late or repeated scrape never lowers it; a gauge takes the newest.
        """
        if not samples:
            return 0
        self.con.execute(
            """INSERT INTO ray_reported
               SELECT unnest($1::VARCHAR[]), unnest($2::VARCHAR[]), unnest($3::VARCHAR[]), unnest($4::VARCHAR[]),
                      unnest($5::VARCHAR[]), unnest($6::DOUBLE[]), now()
               ON CONFLICT DO UPDATE SET
                   value = CASE WHEN excluded.kind = 'counter' THEN greatest(ray_reported.value, excluded.value)
                                ELSE excluded.value END,
                   kind = excluded.kind, updated_at = excluded.updated_at""",
            [list(column) for column in zip(*(astuple(s) for s in samples))],
        )
        return len(samples)

    def forget_targets(self, session: str) -> None:
        """Let go of what is known in memory of ``session``'s scraped targets (its series are being deleted)."""
        self._targets = {key: target for key, target in self._targets.items() if key[0] != session}

    def delete_session(self, session: str) -> bool:
        """Delete what the store holds of ``session``: each signal's rows of it, then the store's own."""
        with self.transaction() as tx:
            found = tx.one("SELECT count(*) FROM sessions WHERE session = ?", [session])
            for signal in SIGNALS.values():
                signal.forget_session(self, tx, session)
            forget_by_session(schema.OWN_TABLES)(self, tx, session)
        return bool(found and found[0])


def _or_now(given: int | None, unit_ns: int = 1) -> int:
    """``given`` (the epoch, 0, too), else now, in units of ``unit_ns``."""
    return time.time_ns() // unit_ns if given is None else given
