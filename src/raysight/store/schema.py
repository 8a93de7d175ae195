"""The store's schema: every table it holds, made from their declarations (``tables.py``: the signals' tables are
declared beside their parsers in ``signals/``, the store's own here), the macros their SQL uses, and the migrations
that bring an older store up to them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from raysight.signals.log_lines.parse import (
    ACCESS,
    LOG_FILES,
    LOG_LINES,
    SERVE_COLUMNS,
    SERVE_FIELDS,
    SERVE_FILE,
    SERVE_REQUESTS,
    read_lines,
    serve_requests_sql,
)
from raysight.signals.ray_events.parse import APPEND_TABLES, ENTITY_TABLES, RAW_EVENTS, SESSION
from raysight.signals.spans.parse import ATTEMPT_ENDS, SPAN_RESOURCES, SPANS, attempt_ends_sql
from raysight.tables import Column, FoldedTable, Table, columns

SCHEMA_VERSION = 19


# DuckDB macros used by the derived columns. ``merge_list`` is the union that keeps histories sorted by time.
MACROS = [
    "CREATE OR REPLACE MACRO merge_list(a, b) AS "
    "list_sort(list_distinct(list_concat(coalesce(a, []), coalesce(b, []))))",
    "CREATE OR REPLACE MACRO first_of(h, s) AS list_filter(h, lambda x: x.state = s)[1]",
    "CREATE OR REPLACE MACRO last_of(h, s) AS list_filter(h, lambda x: x.state = s)[-1]",
]


# Ray's task IDs, as SQL over a hex task ID: 16 digits of the task's own, then the 32 of the actor ID it belongs to,
# whose last 8 are its job ID. A driver's task is 40 f's and its job ID; an actor creation task's, 16 f's and its
# actor's ID; a normal task's actor part is 24 f's (no actor) and its job ID. When the owner's definition never
# came (a driver without the export variables), the ID still tells the task's type, actor and job.
def task_kind_sql(task_id: str) -> str:
    return f"""CASE WHEN {task_id} LIKE repeat('f', 40) || '%' THEN 'DRIVER_TASK'
        WHEN substr({task_id}, 17, 24) = repeat('f', 24) THEN 'NORMAL_TASK'
        WHEN {task_id} LIKE repeat('f', 16) || '%' THEN 'ACTOR_CREATION_TASK' ELSE 'ACTOR_TASK' END"""


def task_actor_id_sql(task_id: str) -> str:
    return f"substr({task_id}, 17, 32)"


def task_job_id_sql(task_id: str) -> str:
    return f"substr({task_id}, 41, 8)"


def driver_task_id_sql(job_id: str) -> str:
    return f"repeat('f', 40) || {job_id}"


# Every session the store knows (each signal adds those it names), folded from its Ray events: the cluster label and
# run ID of the ingest URL they came by, their span, and how many were stored.
SESSIONS = FoldedTable(
    "sessions",
    keys=[SESSION],
    columns=[
        Column("label", "VARCHAR", "keep"),
        Column("run_id", "VARCHAR", "keep"),
        Column("first_ns", "BIGINT", "least"),
        Column("last_ns", "BIGINT", "greatest"),
        Column("events", "BIGINT", "sum"),  # raw events stored, and their bytes: `raysight sessions` without a scan
        Column("raw_bytes", "BIGINT", "sum"),
    ],
)


FOLDED_TABLES = {t.name: t for t in ENTITY_TABLES + [SESSIONS]}
# Everything folded from raw events (sessions aside, which also hold labels): dropped and rebuilt by a reindex.
FOLD_TABLE_NAMES = [t.name for t in ENTITY_TABLES] + list(APPEND_TABLES)

# The store's own tables: what it knows of itself (its schema version, the last journal record folded, …), the batches
# it could not fold, what `raysight run` saw of a driver it started (its exit code, when it ended, and the session it
# joined, when it joined one it did not start: raw input, never folded away), and its ingest counters.
META = Table("meta", columns(key="VARCHAR", value="VARCHAR"), key=("key",))
QUARANTINE = Table(
    "quarantine",
    columns(key="VARCHAR", session="VARCHAR", reason="VARCHAR", received_at="TIMESTAMPTZ")
    + [Column("body", "VARCHAR", compression="zstd")],
    key=("key",),
)
COUNTERS = Table("counters", columns(name="VARCHAR", value="BIGINT"), key=("name",))

OWN_TABLES: list[Table | FoldedTable] = [META, QUARANTINE, COUNTERS, SESSIONS]  # (each signal's: theirs)

ZSTD = "USING COMPRESSION zstd"  # (what an old storage format refuses: see upgrade.migrate)
RAW_COLUMNS = ", ".join(RAW_EVENTS.names)
RAW_EVENTS_V4_DDL = f"""CREATE TABLE raw_events_v4 (
        key UHUGEINT PRIMARY KEY, session VARCHAR, event_id VARCHAR, event_type VARCHAR, source_type VARCHAR,
        ts_ns BIGINT, node_id VARCHAR, supported BOOLEAN, received_at TIMESTAMPTZ, body VARCHAR {ZSTD})"""


def _copy_raw_events(ddl: str, name: str, columns: str) -> list[str]:
    """Statements that replace ``raw_events`` by a copy into ``ddl`` (a new table ``name``) of ``columns``."""
    return [
        ddl,
        f"INSERT INTO {name} SELECT {columns} FROM raw_events",
        "DROP TABLE raw_events",
        f"ALTER TABLE {name} RENAME TO raw_events",
    ]


# The ``seq`` of the last log line stored (0 before any), kept in ``meta``
LOG_SEQ_KEY = "log_lines_seq"
LAST_LOG_SEQ_SQL = f"SELECT coalesce(max(value::BIGINT), 0) FROM meta WHERE key = '{LOG_SEQ_KEY}'"
# The last line stored before the log indexes existed (0: none), kept in ``meta``: such lines are always read
INDEXED_FROM_KEY = "log_indexed_from"
INDEXED_FROM_SQL = f"SELECT coalesce(max(value::BIGINT), 0) FROM meta WHERE key = '{INDEXED_FROM_KEY}'"


RESOURCE_ID_SQL = "left(md5(resource::VARCHAR), 16)"  # as ``signals/spans/parse.py``'s ``resource_id``
SERVE_LINES = f"SELECT seq, ts_ns, session, host, name, text FROM log_lines WHERE regexp_matches(name, '{SERVE_FILE}')"
# Upgrades that need no refold, by the version they lead to; older stores are refolded from their raw events.
MIGRATIONS = {
    3: [
        "ALTER TABLE sessions ADD COLUMN IF NOT EXISTS events BIGINT",
        "ALTER TABLE sessions ADD COLUMN IF NOT EXISTS raw_bytes BIGINT",
        """UPDATE sessions SET events = r.events, raw_bytes = r.raw_bytes
           FROM (SELECT session, count(*) AS events, sum(strlen(body)) AS raw_bytes FROM raw_events GROUP BY 1) r
           WHERE sessions.session = r.session""",
    ],
    4: _copy_raw_events(RAW_EVENTS_V4_DDL, "raw_events_v4", f"md5_number(session || ' ' || event_id), {RAW_COLUMNS}"),
    6: _copy_raw_events(replace(RAW_EVENTS, name="raw_events_v6").ddl(), "raw_events_v6", RAW_COLUMNS),
    7: [],  # the log tables, which all_ddl() makes
    8: [],  # a first index of the log lines, which 9 completes
    9: [  # the log indexes (all_ddl() makes them): the lines stored before them are always read
        f"INSERT OR REPLACE INTO meta SELECT '{INDEXED_FROM_KEY}', value FROM meta WHERE key = '{LOG_SEQ_KEY}'"
    ],
    10: [  # node_evidence and log_dropped (all_ddl() makes them); the sessions known by their logs alone are listed
        LOG_FILES.ddl(),  # (from below 7, not there yet)
        "INSERT INTO sessions (session) SELECT DISTINCT session FROM log_files ON CONFLICT DO NOTHING",
    ],
    11: [],  # polled, polls and cluster_status (all_ddl() makes them)
    12: ["ALTER TABLE run_exits ADD COLUMN IF NOT EXISTS session VARCHAR"],
    13: [],  # the metric tables (all_ddl() makes them)
    14: [  # metric_refused and metric_dropped (all_ddl() makes them); a target's series known by their lines in memory
        "DROP TABLE IF EXISTS metric_keys"
    ],
    15: [],  # spans (all_ddl() makes it)
    16: [  # a span names its resource, kept once in span_resources, where it held a copy (whatever the spans' shape)
        SPANS.ddl(),
        SPAN_RESOURCES.ddl(),
        "ALTER TABLE spans ADD COLUMN IF NOT EXISTS resource JSON",
        "ALTER TABLE spans ADD COLUMN IF NOT EXISTS resource_id VARCHAR",
        f"""INSERT INTO span_resources SELECT DISTINCT {RESOURCE_ID_SQL}, resource FROM spans WHERE resource IS NOT NULL
            ON CONFLICT DO NOTHING""",
        f"UPDATE spans SET resource_id = {RESOURCE_ID_SQL} WHERE resource IS NOT NULL",
        "ALTER TABLE spans DROP COLUMN resource",
    ],
    17: [  # attempt_ends (all_ddl() makes it), from the spans kept; log_lines.own (all_ddl() adds it): no line
        # stored before was flagged raysight's own
        ATTEMPT_ENDS.ddl(),
        f"INSERT INTO attempt_ends {attempt_ends_sql('spans')} ON CONFLICT DO NOTHING",
    ],
    18: [  # what Serve's lines say, read from the lines of its files stored before
        LOG_LINES.ddl(),  # (from below 7, not there yet)
        *(f"ALTER TABLE log_lines ADD COLUMN IF NOT EXISTS {column.ddl()}" for column in SERVE_COLUMNS),
        "UPDATE log_lines SET "
        + ", ".join(f"{name} = read.{name}" for name in ["request_id", *SERVE_FIELDS])
        + f" FROM ({read_lines(SERVE_LINES)}) AS read WHERE log_lines.seq = read.seq",
    ],
    19: [  # serve_requests, from the access lines of Serve's files stored before
        SERVE_REQUESTS.ddl(),
        f"INSERT INTO serve_requests BY NAME {serve_requests_sql(read_lines(SERVE_LINES, ACCESS))} "
        "ON CONFLICT DO NOTHING",
    ],
}
REFOLD_BELOW = 2
# Older stores are upgraded in place to the version before this one, then copied into a new file (the current DDL in
# the current storage format: zstd raw bodies, and nothing of what earlier migrations dropped), see upgrade.rewrite.
REWRITE_BELOW = 5


def all_ddl(tables: Iterable[Table | FoldedTable]) -> list[str]:
    """Every statement that creates ``tables`` from nothing, or brings an older store's up to them (idempotent)."""
    return [statement for table in tables for statement in table.create()]
