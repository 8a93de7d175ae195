"""The embedded DuckDB store: opening and upgrading it, applying batches in one transaction, and reindexing.

Only the server process opens the store. Writes go through :class:`raysight.store.writer.Writer`, one thread;
readers take their own cursor (:meth:`Store.reader`) and see committed data only.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

import duckdb
import orjson

from raysight.ingest.ray_events import HANDLERS, Batch, parse_event
from raysight.store import schema
from raysight.store.reconcile import reconcile

DB_FILE = "raysight.duckdb"
REINDEX_CHUNK = 20_000
COUNTERS = ("received", "stored", "deduplicated", "quarantined", "unsupported", "batches")


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
        self.con = duckdb.connect(str(self.path))
        self._reader_lock = threading.Lock()
        self._upserts = {name: t.upsert_sql() for name, t in schema.FOLDED_TABLES.items()}
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
        self.con.execute("BEGIN")
        if found is not None and found < schema.SCHEMA_VERSION:
            for table in schema.ENTITY_TABLES:  # entity tables are folds: drop and rebuild from raw events
                self.con.execute(f"DROP TABLE IF EXISTS {table.name}")
        for statement in schema.all_ddl():
            self.con.execute(statement)
        self.con.execute(
            "INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", [str(schema.SCHEMA_VERSION)]
        )
        self.con.execute("COMMIT")
        if found is not None and found < schema.SCHEMA_VERSION:
            self.reindex()

    def reader(self) -> duckdb.DuckDBPyConnection:
        """A cursor for one thread's reads."""
        with self._reader_lock:
            return self.con.cursor()

    def close(self) -> None:
        self.con.close()

    # --- writes (writer thread only) -------------------------------------------------------------------------

    def apply(self, batch: Batch) -> ApplyResult:
        """Write one batch durably: raw events, quarantine, entity folds, inference and counters, in one transaction."""
        con = self.con
        con.execute("BEGIN")
        try:
            stored = self._insert_raw(batch)
            quarantined = self._insert_quarantine(batch)
            self._fold(batch)
            unsupported = sum(1 for r in batch.raw if not r.supported)
            result = ApplyResult(
                received=len(batch),
                stored=stored,
                deduplicated=len(batch.raw) - stored + len(batch.quarantined) - quarantined,
                quarantined=quarantined,
                unsupported=unsupported,
            )
            self._count(result)
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        return result

    def _insert_raw(self, batch: Batch) -> int:
        if not batch.raw:
            return 0
        columns = list(zip(*((r.session, r.event_id, r.event_type, r.source_type, r.ts_ns, r.node_id,
                              r.supported, r.body) for r in batch.raw)))
        row = self.con.execute(
            """INSERT INTO raw_events
               SELECT unnest($1::VARCHAR[]), unnest($2::VARCHAR[]), unnest($3::VARCHAR[]), unnest($4::VARCHAR[]),
                      unnest($5::BIGINT[]), unnest($6::VARCHAR[]), unnest($7::BOOLEAN[]), now(),
                      unnest($8::VARCHAR[])
               ON CONFLICT DO NOTHING""",
            [list(c) for c in columns],
        ).fetchone()
        return int(row[0]) if row else 0

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

    def _fold(self, batch: Batch) -> None:
        for name, rows in batch.patches.items():
            table = schema.FOLDED_TABLES[name]
            staged = [
                orjson.dumps({**dict(zip((c.name for c in table.keys), key)), **patch}).decode()
                for key, patch in rows.items()
            ]
            self.con.execute(self._upserts[name], [staged])
        reconcile(self.con, sorted({key[0] for key in batch.patches.get("sessions", {})}))

    def _count(self, result: ApplyResult) -> None:
        values = [result.received, result.stored, result.deduplicated, result.quarantined, result.unsupported, 1]
        self.con.execute(
            """INSERT INTO counters SELECT unnest($1::VARCHAR[]), unnest($2::BIGINT[])
               ON CONFLICT DO UPDATE SET value = counters.value + excluded.value""",
            [list(COUNTERS), values],
        )

    def record_run_exit(self, run_id: str, driver_pid: int | None, exit_code: int, ended_ns: int) -> None:
        """Keep what `raysight run` saw of its driver's end, and re-derive the sessions it started."""
        con = self.con
        con.execute("BEGIN")
        try:
            con.execute("INSERT OR REPLACE INTO run_exits VALUES (?, ?, ?, ?)", [run_id, driver_pid, exit_code, ended_ns])
            sessions = [r[0] for r in con.execute("SELECT session FROM sessions WHERE run_id = ?", [run_id]).fetchall()]
            reconcile(con, sessions)
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise

    def reindex(self) -> int:
        """Rebuild every entity table from the raw events; returns how many events were refolded."""
        con = self.con
        con.execute("BEGIN")
        try:
            for table in schema.ENTITY_TABLES:
                con.execute(f"DELETE FROM {table.name}")
            con.execute("UPDATE sessions SET first_ns = NULL, last_ns = NULL")
            cursor = con.cursor()
            cursor.execute("SELECT body FROM raw_events ORDER BY session")
            total = 0
            while chunk := cursor.fetchmany(REINDEX_CHUNK):
                batch = Batch()
                for (body,) in chunk:
                    raw, patches = parse_event(orjson.loads(body), body)
                    for table, key, patch in patches:
                        batch.add_patch(table, key, patch)
                    batch.add_patch("sessions", (raw.session,), {"first_ns": raw.ts_ns, "last_ns": raw.ts_ns})
                self._fold(batch)
                total += len(chunk)
            cursor.close()
            con.execute("UPDATE raw_events SET supported = event_type IN (SELECT unnest($1::VARCHAR[]))",
                        [sorted(HANDLERS)])
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        return total

    def delete_session(self, session: str) -> bool:
        con = self.con
        con.execute("BEGIN")
        try:
            found = con.execute("SELECT count(*) FROM sessions WHERE session = ?", [session]).fetchone()
            for name in ["raw_events", "quarantine", "sessions", *(t.name for t in schema.ENTITY_TABLES)]:
                con.execute(f"DELETE FROM {name} WHERE session = ?", [session])
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        return bool(found and found[0])

