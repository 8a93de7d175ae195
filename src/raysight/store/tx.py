"""The writer's connection as a signal writes through it: each statement timed to the SQL log, Arrow tables made
visible to SQL by name, and the ingest counters. :meth:`Store.transaction` hands one out between BEGIN and COMMIT."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any

import duckdb
import pyarrow as pa

sql_log = logging.getLogger("raysight.store.sql")

COUNTERS = (
    *("received", "stored", "deduplicated", "quarantined", "unsupported", "batches", "resent_batches"),
    *("log_lines", "log_lines_deduplicated", "log_batches", "log_gaps", "log_lines_dropped"),
    *("spans", "spans_deduplicated", "span_batches", "spans_rejected", "spans_dropped_at_source"),
    *("traces_sampled_out", "spans_sampled_out"),
    *("profile_batches", "profile_samples", "profile_samples_dropped"),
)


class Tx:
    """Statements on one connection (the writer's, unless a signal parses on another)."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con

    def run(self, sql: str, params: object = None) -> duckdb.DuckDBPyConnection:
        """Run one statement, logged with its time to ``raysight.store.sql`` at DEBUG: what a group runs, in order,
        and what each statement costs (benchmarks/ingest_inprocess.py reads it)."""
        started = time.perf_counter()
        try:
            return self.con.execute(sql, params)
        finally:
            if sql_log.isEnabledFor(logging.DEBUG):
                sql_log.debug("%.3f ms\t%s", (time.perf_counter() - started) * 1000, " ".join(sql.split()))

    def one(self, sql: str, params: object = None) -> Any:
        """The first row of ``sql``'s result (read whole: DuckDB keeps a half-read result open), or None."""
        rows = self.run(sql, params).fetchall()
        return rows[0] if rows else None

    def returning(self, sql: str, names: list[str], params: object = None) -> pa.Table:
        """Run a write with ``RETURNING names``; the rows it returns as an Arrow table to join against."""
        rows = self.run(sql, params).fetchall()
        return pa.table({name: [row[i] for row in rows] for i, name in enumerate(names)})

    @contextlib.contextmanager
    def registered(self, name: str, table: pa.Table) -> Iterator[None]:
        """``table`` visible to SQL as ``name`` within the block."""
        self.con.register(name, table)
        try:
            yield
        finally:
            with contextlib.suppress(duckdb.TransactionException):  # aborted: the rollback takes the view too
                self.con.unregister(name)

    def count(self, **deltas: int) -> None:
        """Add to the ingest counters (``raysight doctor``)."""
        unknown = set(deltas) - set(COUNTERS)
        if unknown:
            raise ValueError(f"unknown counters {sorted(unknown)}")
        self.run(
            """INSERT INTO counters SELECT unnest($1::VARCHAR[]), unnest($2::BIGINT[])
               ON CONFLICT DO UPDATE SET value = counters.value + excluded.value""",
            [list(deltas), list(deltas.values())],
        )
