"""The DuckDB file as the store opens it: attached from a niced thread, with the settings every connection shares,
and the staging database a signal parses ahead into."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import duckdb

from raysight import os_thread
from raysight.sql_literals import sql_str

WAL_LIMIT = "1GB"
DB_ALIAS = "store"
STAGING = "staging"
ROW_GROUP_ROWS = 16_384
STORAGE_VERSION = "latest"


def connect(path: Path, niceness: int, threads: int, memory_limit: str) -> duckdb.DuckDBPyConnection:
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
            # until ``upgrade.rewrite`` copies it.
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


def wal(path: Path) -> Path:
    return path.with_name(path.name + ".wal")


def fsync(path: Path) -> None:
    """Flush a file's (or a folder's entries') writes to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def open_database(path: Path, niceness: int, threads: int, memory_limit: str) -> duckdb.DuckDBPyConnection:
    """The store's file, opened as the writer's connection: no progress bar (a long migration must not draw on the
    server's terminal), and the in-memory staging database attached."""
    con = connect(path, niceness, threads, memory_limit)
    con.execute("SET enable_progress_bar = false")
    con.execute(f"ATTACH ':memory:' AS {STAGING}")  # what a signal parses ahead hands to the writer's connection
    return con
