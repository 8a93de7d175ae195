"""An older store brought up to this raysight's schema (``schema.MIGRATIONS``): in place; below
``schema.REWRITE_BELOW`` by a rewrite into a new file in the current storage format; below ``schema.REFOLD_BELOW``
its folded tables dropped and each signal's refolded from what it keeps raw."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from raysight.signals.registry import SIGNALS
from raysight.sql_literals import sql_str
from raysight.store import catalog, schema
from raysight.store.opening import STORAGE_VERSION, fsync, wal

if TYPE_CHECKING:
    from raysight.store.store import Store

REWRITE_SUFFIX = ".rewrite"


def migrate(store: Store) -> None:
    """Create the schema, or upgrade an older one (recorded in ``meta.schema_version``): in place, then, below
    :data:`schema.REWRITE_BELOW`, by a rewrite into a new file; the oldest are refolded from their raw events."""
    store.con.execute(schema.META.ddl())
    row = store.tx.one("SELECT value FROM meta WHERE key = 'schema_version'")
    found = int(row[0]) if row else None
    if found is not None and found > schema.SCHEMA_VERSION:
        raise RuntimeError(
            f"the store at {store.path} has schema version {found}, newer than this raysight "
            f"({schema.SCHEMA_VERSION}); upgrade raysight"
        )
    refold = found is not None and found < schema.REFOLD_BELOW
    rewriting = found is not None and found < schema.REWRITE_BELOW
    reached = schema.REWRITE_BELOW - 1 if rewriting else schema.SCHEMA_VERSION
    if refold:  # entity tables are folds: dropped, and rebuilt from the raw events
        statements = [f"DROP TABLE IF EXISTS {name}" for name in schema.FOLD_TABLE_NAMES]
    else:
        versions = range(reached + 1 if found is None else found + 1, reached + 1)
        statements = [sql for version in versions for sql in schema.MIGRATIONS.get(version, [])]
    with store.transaction() as tx:
        for statement in statements + schema.all_ddl(store.tables):
            # An old storage format refuses zstd (v0.10.2's, DuckDB's default before 2.0): in place, the DDL goes
            # without it, and the rewrite adds it.
            tx.run(statement.replace(schema.ZSTD, "") if rewriting else statement)
        for statement in catalog.created():  # (after the tables, which DuckDB binds a macro's body to)
            tx.run(statement)
        tx.run("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", [str(reached)])
    if rewriting:
        rewrite(store)
        migrate(store)  # on from REWRITE_BELOW, in place
    if refold:
        for signal in SIGNALS.values():
            if signal.refold is not None:
                signal.refold(store)


def rewrite(store: Store) -> None:
    """Copy every table into a new file, created with the current DDL in the current storage format (at
    :data:`schema.REWRITE_BELOW`), and put it in the old one's place.

    Crash-safe: the old file is left as it is until the new one is complete and fsynced, then replaced by an
    atomic rename; a half-written new file is discarded by the next open, which rewrites again.
    """
    new = store.path.with_name(store.path.name + REWRITE_SUFFIX)
    for leftover in (new, wal(new)):
        leftover.unlink(missing_ok=True)
    (old,) = store.tx.one("SELECT current_database()")
    store.con.execute("CHECKPOINT")  # everything in the old file itself, so that closing it leaves no WAL
    store.con.execute(f"ATTACH {sql_str(str(new))} AS rewrite (STORAGE_VERSION '{STORAGE_VERSION}')")
    try:
        store.con.execute("USE rewrite")
        for statement in schema.all_ddl(store.tables):
            store.con.execute(statement)
        store.con.execute(f'USE "{old}"')
        tables = store.con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = ? AND schema_name = 'main'", [old]
        ).fetchall()
        with store.transaction() as tx:
            for (name,) in tables:  # the columns the current DDL keeps (raw_events' key went in schema 6)
                (columns,) = tx.one(
                    """SELECT string_agg('"' || column_name || '"', ', ') FROM duckdb_columns()
                       WHERE database_name = ? AND schema_name = 'main' AND table_name = ? AND column_name IN (
                           SELECT column_name FROM duckdb_columns()
                           WHERE database_name = 'rewrite' AND schema_name = 'main' AND table_name = ?)""",
                    [old, name, name],
                )
                tx.run(f'INSERT INTO rewrite.main.{name} BY NAME SELECT {columns} FROM "{old}".main.{name}')
            tx.run("UPDATE rewrite.main.meta SET value = ? WHERE key = 'schema_version'", [str(schema.REWRITE_BELOW)])
        store.con.execute("CHECKPOINT rewrite")
    finally:
        store.con.execute(f'USE "{old}"')
        store.con.execute("DETACH rewrite")
    fsync(new)
    store.con.close()
    if wal(store.path).exists() or wal(new).exists():
        store.reopen()
        raise RuntimeError(f"a write-ahead log was left beside {store.path} while rewriting it; not replaced")
    os.replace(new, store.path)
    fsync(store.data_dir)
    store.reopen()
