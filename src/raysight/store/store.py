"""The embedded DuckDB store: opening and upgrading it, applying batches in one transaction, and reindexing.

Only the server process opens the store. Writes go through :class:`raysight.store.writer.Writer`, one thread;
readers take their own cursor (:meth:`Store.reader`) and see committed data only.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, astuple, dataclass
from pathlib import Path

import duckdb
import orjson
import pyarrow as pa

from raysight.ingest.ray_events import HANDLERS, Batch, Parsed, parse_event
from raysight.ingest.ray_metrics import RaySample
from raysight.store import schema
from raysight.store.fold import fold
from raysight.store.reconcile import reconcile

DB_FILE = "raysight.duckdb"
REINDEX_CHUNK = 20_000
WAL_LIMIT = "1GB"
IDLE_CHECKPOINT_BYTES = 32 * 1024 * 1024
COUNTERS = ("received", "stored", "deduplicated", "quarantined", "unsupported", "batches", "resent_batches")


@dataclass(frozen=True)
class ApplyResult:
    received: int
    stored: int
    deduplicated: int
    quarantined: int
    unsupported: int


class Store:
    """One DuckDB database file in ``data_dir``."""

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.data_dir / DB_FILE
        # DuckDB checkpoints when the WAL passes a threshold, rewriting every index each time; a higher threshold
        # and checkpoints while idle (the writer's) keep that out of ingest bursts.
        self.con = duckdb.connect(str(self.path), config={"checkpoint_threshold": WAL_LIMIT})
        self.con.execute("SET enable_progress_bar = false")  # long migrations must not draw on the server's terminal
        self._reader_lock = threading.Lock()
        self._inserts = {name: t.insert_sql(f"staged_{name}") for name, t in schema.FOLDED_TABLES.items()}
        self._merges: dict[tuple[str, tuple[str, ...]], str] = {}
        self._migrate()

    def _migrate(self) -> None:
        """Create the schema, or upgrade an older one (recorded in ``meta.schema_version``) and refold it."""
        for statement in schema.MACROS:
            self.con.execute(statement)
        self.con.execute(schema.RAW_DDL[0])
        row = self.con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        found = int(row[0]) if row else None
        if found is not None and found > schema.SCHEMA_VERSION:
            raise RuntimeError(
                f"the store at {self.path} has schema version {found}, newer than this raysight "
                f"({schema.SCHEMA_VERSION}); upgrade raysight"
            )
        refold = found is not None and found < schema.REFOLD_BELOW
        with self._transaction() as con:
            if refold:
                for name in schema.FOLD_TABLE_NAMES:  # entity tables are folds: drop and rebuild from raw events
                    con.execute(f"DROP TABLE IF EXISTS {name}")
            elif found is not None:
                for version in range(found + 1, schema.SCHEMA_VERSION + 1):
                    for statement in schema.MIGRATIONS.get(version, []):
                        con.execute(statement)
            for statement in schema.all_ddl():
                con.execute(statement)
            con.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", [str(schema.SCHEMA_VERSION)])
        if refold:
            self.reindex()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """BEGIN … COMMIT, or ROLLBACK when anything in the block raises."""
        self.con.execute("BEGIN")
        try:
            yield self.con
        except BaseException:
            self.con.execute("ROLLBACK")
            raise
        self.con.execute("COMMIT")

    def _mark_folded(self, journal_seq: int) -> None:
        """Record the last journal record folded (inside the transaction that folded it)."""
        self.con.execute("INSERT OR REPLACE INTO meta VALUES ('journal_folded', ?)", [str(journal_seq)])

    def reader(self) -> duckdb.DuckDBPyConnection:
        """A cursor for one thread's reads."""
        with self._reader_lock:
            return self.con.cursor()

    def quarantine_batch(self, body: bytes, reason: str, journal_seq: int) -> None:
        """Keep a whole journalled batch the store could not fold (with why), and move past it."""
        text = body.decode()
        with self._transaction() as con:
            con.execute(
                "INSERT INTO quarantine VALUES (md5(?), NULL, ?, now(), ?) ON CONFLICT DO NOTHING",
                [text, reason[:500], text],
            )
            self.count(quarantined=1)
            self._mark_folded(journal_seq)

    def journal_folded(self) -> int:
        """The last journal record folded into the store (0 before any)."""
        row = self.con.execute("SELECT value FROM meta WHERE key = 'journal_folded'").fetchone()
        return int(row[0]) if row else 0

    def checkpoint_if_due(self) -> None:
        """Checkpoint when the WAL has grown past :data:`IDLE_CHECKPOINT_BYTES` (writer thread)."""
        wal = self.path.with_name(self.path.name + ".wal")
        if wal.exists() and wal.stat().st_size > IDLE_CHECKPOINT_BYTES:
            self.con.execute("CHECKPOINT")

    def close(self) -> None:
        self.con.close()

    # --- writes (writer thread only) -------------------------------------------------------------------------

    def apply(self, batch: Batch, journal_seq: int | None = None) -> ApplyResult:
        """Write one batch durably: raw events, quarantine, entity folds, inference and counters, in one transaction.

        Only events the store had not seen are folded, so a resent batch changes nothing but the counters.
        ``journal_seq`` is the last journal record the batch holds; it is recorded in the same transaction.
        """
        with self._transaction():
            fresh = self._insert_raw(batch)
            stored = len(fresh)
            quarantined = self._insert_quarantine(batch)
            self._fold(_first_sightings(batch.events, fresh), batch.sessions)
            result = ApplyResult(
                received=len(batch),
                stored=stored,
                deduplicated=len(batch.events) - stored + len(batch.quarantined) - quarantined,
                quarantined=quarantined,
                unsupported=sum(1 for e in batch.events if not e.raw.supported),
            )
            self.count(**asdict(result), batches=1)
            if journal_seq is not None:
                self._mark_folded(journal_seq)
        return result

    def _insert_raw(self, batch: Batch) -> set[tuple[str, str]]:
        """Insert the raw events; returns the (session, event_id) of those that were new."""
        if not batch.events:
            return set()
        raws = [e.raw for e in batch.events]
        staged = pa.table(
            {
                "session": pa.array([r.session for r in raws], pa.string()),
                "event_id": pa.array([r.event_id for r in raws], pa.string()),
                "event_type": pa.array([r.event_type for r in raws], pa.string()),
                "source_type": pa.array([r.source_type for r in raws], pa.string()),
                "ts_ns": pa.array([r.ts_ns for r in raws], pa.int64()),
                "node_id": pa.array([r.node_id for r in raws], pa.string()),
                "supported": pa.array([r.supported for r in raws], pa.bool_()),
                "body": pa.array([r.body for r in raws], pa.string()),
            }
        )
        rows = self._with_staged(
            "staged_raw", staged,
            f"""INSERT INTO raw_events SELECT {schema.RAW_KEY}, session, event_id, event_type, source_type, ts_ns,
                      node_id, supported, now(), body FROM staged_raw
               ON CONFLICT DO NOTHING RETURNING session, event_id""",
        ).fetchall()
        return set(rows)

    def _insert_quarantine(self, batch: Batch) -> int:
        if not batch.quarantined:
            return 0
        q = batch.quarantined
        row = self.con.execute(
            """INSERT INTO quarantine
               SELECT unnest($1::VARCHAR[]), unnest($2::VARCHAR[]), unnest($3::VARCHAR[]), now(), unnest($4::VARCHAR[])
               ON CONFLICT DO NOTHING""",
            [[x.key for x in q], [x.session for x in q], [x.reason for x in q], [x.body for x in q]],
        ).fetchone()
        return int(row[0]) if row else 0

    def _fold(self, events: Iterable[Parsed], sessions: dict[str, dict]) -> None:
        folded = fold(events)
        folded.rows["sessions"] = {(name,): {**patch, **folded.session_stats.get(name, {})}
                                   for name, patch in sessions.items()}
        for name in schema.FOLDED_TABLES:
            if rows := folded.staged(name):
                self._upsert(name, rows)
        for name, rows in folded.appends.items():
            table = schema.APPEND_TABLES[name]
            self._with_staged(f"staged_{name}", pa.Table.from_pylist(rows, schema=table.arrow_schema),
                              f"INSERT INTO {name} SELECT * FROM staged_{name}")
        reconcile(self.con, sorted(sessions))

    def _upsert(self, name: str, rows: list[dict[str, object]]) -> None:
        """Insert rows with new keys, then merge the others into the stored rows (two cheap statements, not one)."""
        table = schema.FOLDED_TABLES[name]
        staged = f"staged_{name}"
        inserted = set(self._with_staged(staged, pa.Table.from_pylist(rows, schema=table.arrow_schema),
                                         self._inserts[name]).fetchall())
        if len(inserted) == len(rows):
            return
        keys = [c.name for c in table.keys]
        rest = [r for r in rows if tuple(r[k] for k in keys) not in inserted]
        columns = tuple(c.name for c in table.columns if any(r.get(c.name) is not None for r in rest))
        sql = self._merges.get((name, columns))
        if sql is None:
            sql = self._merges[(name, columns)] = table.merge_sql(staged, list(columns))
        self._with_staged(staged, pa.Table.from_pylist(rest, schema=table.arrow_schema), sql)

    def _with_staged(self, name: str, staged: pa.Table, sql: str) -> duckdb.DuckDBPyConnection:
        """Run ``sql`` with the Arrow table ``staged`` visible as ``name``."""
        self.con.register(name, staged)
        try:
            return self.con.execute(sql)
        finally:
            self.con.unregister(name)

    def count(self, **deltas: int) -> None:
        """Add to the ingest counters (``raysight doctor``); inside :meth:`apply`'s transaction or on its own."""
        unknown = set(deltas) - set(COUNTERS)
        if unknown:
            raise ValueError(f"unknown counters {sorted(unknown)}")
        self.con.execute(
            """INSERT INTO counters SELECT unnest($1::VARCHAR[]), unnest($2::BIGINT[])
               ON CONFLICT DO UPDATE SET value = counters.value + excluded.value""",
            [list(deltas), list(deltas.values())],
        )

    def record_run_exit(self, run_id: str, driver_pid: int | None, exit_code: int, ended_ns: int) -> None:
        """Keep what `raysight run` saw of its driver's end, and re-derive the sessions it started."""
        with self._transaction() as con:
            con.execute("INSERT OR REPLACE INTO run_exits VALUES (?, ?, ?, ?)", [run_id, driver_pid, exit_code, ended_ns])
            sessions = [r[0] for r in con.execute("SELECT session FROM sessions WHERE run_id = ?", [run_id]).fetchall()]
            reconcile(con, sessions)

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

    def reindex(self) -> int:
        """Rebuild every entity table from the raw events; returns how many events were refolded."""
        with self._transaction() as con:
            for name in schema.FOLD_TABLE_NAMES:
                con.execute(f"DELETE FROM {name}")
            con.execute("UPDATE sessions SET first_ns = NULL, last_ns = NULL, events = NULL, raw_bytes = NULL")
            cursor = con.cursor()
            cursor.execute("SELECT body FROM raw_events ORDER BY session")
            total = 0
            while chunk := cursor.fetchmany(REINDEX_CHUNK):
                batch = Batch()
                for (body,) in chunk:
                    parsed = parse_event(orjson.loads(body), body)
                    batch.events.append(parsed)
                    ts = parsed.raw.ts_ns
                    batch.add_session(parsed.raw.session, {"label": None, "run_id": None, "first_ns": ts, "last_ns": ts})
                self._fold(batch.events, batch.sessions)
                total += len(chunk)
            cursor.close()
            con.execute("UPDATE raw_events SET supported = event_type IN (SELECT unnest($1::VARCHAR[]))",
                        [sorted(HANDLERS)])
        return total

    def delete_session(self, session: str) -> bool:
        with self._transaction() as con:
            found = con.execute("SELECT count(*) FROM sessions WHERE session = ?", [session]).fetchone()
            for name in ["raw_events", "quarantine", "sessions", "ray_reported", *schema.FOLD_TABLE_NAMES]:
                con.execute(f"DELETE FROM {name} WHERE session = ?", [session])
        return bool(found and found[0])


def _first_sightings(events: list[Parsed], fresh: set[tuple[str, str]]) -> Iterable[Parsed]:
    """The events whose raw row this batch inserted, each once (a group may carry one event twice)."""
    for parsed in events:
        key = (parsed.raw.session, parsed.raw.event_id)
        if key in fresh:
            fresh.discard(key)
            yield parsed
