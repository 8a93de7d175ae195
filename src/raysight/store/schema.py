"""The store's tables, described once as data: DDL, the Arrow staging shape and the merge SQL all come from here.

Entity tables are folds of the raw events. Each has key columns, merged columns and derived columns (SQL over the
merged values). Every column has a merge rule — ``latest`` (a non-null newcomer wins), ``keep`` (the first non-null
stays), ``least``, ``greatest``, ``sum`` (of what each event brought: only first sightings are folded), or
``union`` (a sorted set-union list, for histories) — applied the same way when one batch's rows of a key are
combined (in SQL by :meth:`Column.aggregate_sql`, in Python by :mod:`raysight.store.fold`) and when a row already
in the store is updated (:meth:`Table.merge_sql`).
Apart from ``latest``, the rules are commutative and idempotent, so events may arrive in any order and any number
of times. Append tables (a task's state transitions and profile events) take rows only from events seen first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from raysight import wire

SCHEMA_VERSION = 17


# DuckDB macros used by the derived columns. ``merge_list`` is the union that keeps histories sorted by time.
MACROS = [
    "CREATE OR REPLACE MACRO merge_list(a, b) AS "
    "list_sort(list_distinct(list_concat(coalesce(a, []), coalesce(b, []))))",
    "CREATE OR REPLACE MACRO first_of(h, s) AS list_filter(h, lambda x: x.state = s)[1]",
    "CREATE OR REPLACE MACRO last_of(h, s) AS list_filter(h, lambda x: x.state = s)[-1]",
]

_MERGE_SQL = {
    "latest": "coalesce({new}, {old})",
    "keep": "coalesce({old}, {new})",
    "least": "least({old}, {new})",
    "greatest": "greatest({old}, {new})",
    "sum": "coalesce({old}, 0) + coalesce({new}, 0)",
    "union": "merge_list({old}, {new})",
}
_AGGREGATE_SQL = {
    "latest": "arg_max({c}, {order})",  # DuckDB's arg_max/arg_min pass over rows whose value is NULL
    "keep": "arg_min({c}, {order})",
    "least": "min({c})",
    "greatest": "max({c})",
    "sum": "sum({c})",
    "union": "flatten(list({c}) FILTER (WHERE {c} IS NOT NULL))",
}
_ARROW = {"VARCHAR": pa.string(), "INTEGER": pa.int32(), "BIGINT": pa.int64(), "BOOLEAN": pa.bool_()}

Fields = dict[str, str]


@dataclass(frozen=True)
class Column:
    name: str
    type: str | Fields  # a DuckDB scalar type, or the fields of a STRUCT
    rule: str = "latest"  # see the module docstring; "union" makes the column a list of the struct

    @property
    def ddl_type(self) -> str:
        if isinstance(self.type, dict):
            struct = "STRUCT(" + ", ".join(f"{k} {v}" for k, v in self.type.items()) + ")"
            return struct + "[]" if self.rule == "union" else struct
        return self.type

    @property
    def arrow_type(self) -> pa.DataType:
        if isinstance(self.type, dict):
            struct = pa.struct([(k, _ARROW[v]) for k, v in self.type.items()])
            return pa.list_(struct) if self.rule == "union" else struct
        return _ARROW[self.type]

    def merge_sql(self, old: str, new: str) -> str:
        return _MERGE_SQL[self.rule].format(old=old, new=new)

    def aggregate_sql(self, order: str) -> str:
        """The rule as an aggregate over one batch's rows of a key, ``order`` being their arrival order."""
        return _AGGREGATE_SQL[self.rule].format(c=self.name, order=order)


@dataclass(frozen=True)
class Derived:
    name: str
    type: str
    expr: str  # SQL over the merged columns, named in braces: {history}, {state_key}, …


@dataclass(frozen=True)
class Table:
    name: str
    keys: list[Column]
    columns: list[Column]
    derived: list[Derived] = field(default_factory=list)

    @property
    def staged(self) -> list[Column]:
        return self.keys + self.columns

    @property
    def arrow_schema(self) -> pa.Schema:
        return pa.schema([(c.name, c.arrow_type) for c in self.staged])

    def ddl(self) -> str:
        cols = [f"{c.name} {c.ddl_type}" for c in self.staged] + [f"{d.name} {d.type}" for d in self.derived]
        keys = ", ".join(c.name for c in self.keys)
        return f"CREATE TABLE IF NOT EXISTS {self.name} ({', '.join(cols)}, PRIMARY KEY ({keys}))"

    @property
    def fresh(self) -> dict[str, str]:
        """Each staged column as a new row takes it (histories sorted and deduplicated)."""
        return {c.name: (f"merge_list(NULL, {c.name})" if c.rule == "union" else c.name) for c in self.staged}

    def aggregate_sql(self, rows: str, order: str) -> str:
        """One row per key from the relation ``rows`` (several per key, any subset of the columns set)."""
        keys = ", ".join(c.name for c in self.keys)
        columns = ", ".join(f"{c.aggregate_sql(order)} AS {c.name}" for c in self.columns)
        return f"SELECT {keys}, {columns} FROM ({rows}) GROUP BY {keys}"

    def insert_sql(self, staged: str) -> str:
        """INSERT the rows of the registered relation ``staged`` whose keys are new; returns the keys inserted."""
        select = list(self.fresh.values()) + [d.expr.format_map(self.fresh) for d in self.derived]
        names = [c.name for c in self.staged] + [d.name for d in self.derived]
        keys = ", ".join(c.name for c in self.keys)
        return (
            f"INSERT INTO {self.name} ({', '.join(names)}) SELECT {', '.join(select)} FROM {staged} "
            f"ON CONFLICT DO NOTHING RETURNING {keys}"
        )

    def merge_sql(self, staged: str, columns: list[str]) -> str:
        """Merge the rows of ``staged`` into the rows with their keys, touching only ``columns`` (and the derived).

        DuckDB's ON CONFLICT costs per column updated, so the columns no staged row sets are left out.
        """
        merged = {c.name: f"{self.name}.{c.name}" for c in self.columns}
        merged.update(
            {
                c.name: c.merge_sql(f"{self.name}.{c.name}", f"excluded.{c.name}")
                for c in self.columns
                if c.name in columns
            }
        )
        sets = [f"{name} = {merged[name]}" for name in columns]
        sets += [f"{d.name} = {d.expr.format_map(merged)}" for d in self.derived]
        names = [c.name for c in self.staged] + [d.name for d in self.derived]
        select = list(self.fresh.values()) + [d.expr.format_map(self.fresh) for d in self.derived]
        return (
            f"INSERT INTO {self.name} ({', '.join(names)}) SELECT {', '.join(select)} FROM {staged} "
            f"ON CONFLICT DO UPDATE SET {', '.join(sets)}"
        )


@dataclass(frozen=True)
class AppendTable:
    """Rows that only accumulate (no key): one per state transition or profile event of a task attempt."""

    name: str
    columns: list[Column]

    @property
    def arrow_schema(self) -> pa.Schema:
        return pa.schema([(c.name, c.arrow_type) for c in self.columns])

    def ddl(self) -> str:
        return f"CREATE TABLE IF NOT EXISTS {self.name} ({', '.join(f'{c.name} {c.ddl_type}' for c in self.columns)})"


def _cols(*pairs: tuple[str, str]) -> list[Column]:
    return [Column(n, t) for n, t in pairs]


SESSION = Column("session", "VARCHAR")
TASK_KEY = [SESSION, Column("task_id", "VARCHAR"), Column("attempt", "INTEGER")]

TASKS = Table(
    "tasks",
    keys=TASK_KEY,
    columns=_cols(
        ("job_id", "VARCHAR"),
        ("type", "VARCHAR"),
        ("name", "VARCHAR"),
        ("func_or_class_name", "VARCHAR"),
        ("module_name", "VARCHAR"),
        ("language", "VARCHAR"),
        ("actor_id", "VARCHAR"),
        ("parent_task_id", "VARCHAR"),
        ("placement_group_id", "VARCHAR"),
        ("required_resources", "VARCHAR"),
        ("runtime_env", "VARCHAR"),
        ("call_site", "VARCHAR"),
        ("label_selector", "VARCHAR"),
        ("defined", "BOOLEAN"),
        ("node_id", "VARCHAR"),
        ("worker_id", "VARCHAR"),
        ("worker_pid", "INTEGER"),
        ("stdout_file", "VARCHAR"),
        ("stderr_file", "VARCHAR"),
        ("stdout_start", "BIGINT"),
        ("stdout_end", "BIGINT"),
        ("stderr_start", "BIGINT"),
        ("stderr_end", "BIGINT"),
        ("error_type", "VARCHAR"),
        ("error_message", "VARCHAR"),
        ("error_detail", "VARCHAR"),
        ("is_debugger_paused", "BOOLEAN"),
        ("actor_repr_name", "VARCHAR"),
        ("exec_worker_id", "VARCHAR"),
        ("exec_node_ip", "VARCHAR"),
    )
    + [
        Column("profile_name", "VARCHAR"),  # the executor's name for the task, when the owner's definition is lost
        Column("first_ns", "BIGINT", "least"),
        Column("pending_ns", "BIGINT", "least"),
        Column("start_ns", "BIGINT", "least"),
        Column("exec_start_ns", "BIGINT", "least"),
        Column("executed_ns", "BIGINT", "greatest"),  # when the executor's profile says execution ended
        # The reported state: the latest terminal transition, else the latest transition (ties broken by name).
        Column("state_key", {"terminal": "BOOLEAN", "ts": "BIGINT", "state": "VARCHAR"}, "greatest"),
    ],
    derived=[
        Derived("reported_state", "VARCHAR", "struct_extract({state_key}, 'state')"),
        Derived("creation_ns", "BIGINT", "coalesce({pending_ns}, {first_ns})"),
        Derived(
            "end_ns",
            "BIGINT",
            "CASE WHEN struct_extract({state_key}, 'terminal') THEN struct_extract({state_key}, 'ts') END",
        ),
    ],
)
TASK_TRANSITIONS = AppendTable("task_transitions", TASK_KEY + _cols(("ts", "BIGINT"), ("state", "VARCHAR")))
TASK_PROFILE = AppendTable(
    "task_profile",
    TASK_KEY
    + _cols(
        ("start_ns", "BIGINT"),
        ("end_ns", "BIGINT"),
        ("name", "VARCHAR"),
        ("extra", "VARCHAR"),
        ("component", "VARCHAR"),
        ("component_id", "VARCHAR"),
        ("node_ip", "VARCHAR"),
    ),
)


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


# Reconciliation writes these; a terminal state reported later clears them (see store.reconcile).
TASK_INFERENCE = ["inferred_state VARCHAR", "inferred_reason VARCHAR", "inferred_error_type VARCHAR"]
# The same for nodes, workers and actors that outlived their session in Ray's stream (re-derived at every fold).
END_INFERENCE = ["inferred_state VARCHAR", "inferred_reason VARCHAR", "inferred_end_ns BIGINT"]
INFERRED_ENDS = ("nodes", "workers", "actors")

ACTORS = Table(
    "actors",
    keys=[SESSION, Column("actor_id", "VARCHAR")],
    columns=_cols(
        ("job_id", "VARCHAR"),
        ("name", "VARCHAR"),
        ("ray_namespace", "VARCHAR"),
        ("class_name", "VARCHAR"),
        ("is_detached", "BOOLEAN"),
        ("required_resources", "VARCHAR"),
        ("placement_group_id", "VARCHAR"),
        ("serialized_runtime_env", "VARCHAR"),
        ("label_selector", "VARCHAR"),
        ("call_site", "VARCHAR"),
        ("parent_id", "VARCHAR"),
        ("defined", "BOOLEAN"),
    )
    + [
        Column(
            "history",
            {
                "ts": "BIGINT",
                "state": "VARCHAR",
                "node_id": "VARCHAR",
                "worker_id": "VARCHAR",
                "pid": "INTEGER",
                "port": "INTEGER",
                "repr_name": "VARCHAR",
                "restart_reason": "VARCHAR",
                "death_cause": "VARCHAR",
                "death_message": "VARCHAR",
            },
            "union",
        )
    ],
    derived=[
        Derived("state", "VARCHAR", "{history}[-1].state"),
        Derived("node_id", "VARCHAR", "last_of({history}, 'ALIVE').node_id"),
        Derived("worker_id", "VARCHAR", "last_of({history}, 'ALIVE').worker_id"),
        Derived("pid", "INTEGER", "last_of({history}, 'ALIVE').pid"),
        Derived("repr_name", "VARCHAR", "list_filter({history}, lambda x: x.repr_name IS NOT NULL)[-1].repr_name"),
        Derived("num_restarts", "INTEGER", "len(list_filter({history}, lambda x: x.state = 'RESTARTING'))"),
        Derived(
            "num_restarts_lineage",
            "INTEGER",
            "len(list_filter({history}, lambda x: x.restart_reason = 'LINEAGE_RECONSTRUCTION'))",
        ),
        Derived(
            "num_restarts_preemption",
            "INTEGER",
            "len(list_filter({history}, lambda x: x.restart_reason = 'NODE_PREEMPTION'))",
        ),
        Derived("death_cause", "VARCHAR", "last_of({history}, 'DEAD').death_cause"),
        Derived("death_message", "VARCHAR", "last_of({history}, 'DEAD').death_message"),
        Derived("start_ns", "BIGINT", "first_of({history}, 'ALIVE').ts"),
        Derived("end_ns", "BIGINT", "last_of({history}, 'DEAD').ts"),
    ],
)

JOBS = Table(
    "jobs",
    keys=[SESSION, Column("job_id", "VARCHAR")],
    columns=_cols(
        ("driver_pid", "BIGINT"),
        ("driver_node_id", "VARCHAR"),
        ("entrypoint", "VARCHAR"),
        ("runtime_env", "VARCHAR"),
        ("metadata", "VARCHAR"),
        ("submission_id", "VARCHAR"),
        ("defined", "BOOLEAN"),
    )
    + [Column("history", {"ts": "BIGINT", "state": "VARCHAR"}, "union")],
    derived=[
        Derived("state", "VARCHAR", "{history}[-1].state"),
        Derived("start_ns", "BIGINT", "first_of({history}, 'CREATED').ts"),
        Derived("end_ns", "BIGINT", "last_of({history}, 'FINISHED').ts"),
    ],
)

NODES = Table(
    "nodes",
    keys=[SESSION, Column("node_id", "VARCHAR")],
    columns=_cols(
        ("node_ip", "VARCHAR"),
        ("labels", "VARCHAR"),
        ("start_ns", "BIGINT"),
        ("hostname", "VARCHAR"),
        ("node_name", "VARCHAR"),
        ("instance_id", "VARCHAR"),
        ("instance_type_name", "VARCHAR"),
        ("defined", "BOOLEAN"),
    )
    + [
        Column(
            "history",
            {
                "ts": "BIGINT",
                "state": "VARCHAR",
                "resources": "VARCHAR",
                "alive_sub_state": "VARCHAR",
                "death_reason": "VARCHAR",
                "death_message": "VARCHAR",
            },
            "union",
        )
    ],
    derived=[
        Derived("state", "VARCHAR", "{history}[-1].state"),
        Derived("resources_total", "VARCHAR", "last_of({history}, 'ALIVE').resources"),
        Derived("death_reason", "VARCHAR", "last_of({history}, 'DEAD').death_reason"),
        Derived("death_message", "VARCHAR", "last_of({history}, 'DEAD').death_message"),
        Derived("alive_ns", "BIGINT", "first_of({history}, 'ALIVE').ts"),
        Derived("end_ns", "BIGINT", "last_of({history}, 'DEAD').ts"),
    ],
)

WORKERS = Table(
    "workers",
    keys=[SESSION, Column("worker_id", "VARCHAR")],
    columns=_cols(
        ("node_id", "VARCHAR"),
        ("worker_type", "VARCHAR"),
        ("pid", "BIGINT"),
        ("job_id", "VARCHAR"),
        ("defined", "BOOLEAN"),
    )
    + [
        Column(
            "history",
            {
                "ts": "BIGINT",
                "state": "VARCHAR",
                "launch_ms": "BIGINT",
                "launched_ms": "BIGINT",
                "start_ms": "BIGINT",
                "end_ms": "BIGINT",
                "exit_type": "VARCHAR",
                "exit_detail": "VARCHAR",
                "memory_used": "BIGINT",
            },
            "union",
        )
    ],
    derived=[
        Derived("state", "VARCHAR", "{history}[-1].state"),
        Derived("exit_type", "VARCHAR", "last_of({history}, 'DEAD').exit_type"),
        Derived("exit_detail", "VARCHAR", "last_of({history}, 'DEAD').exit_detail"),
        Derived("launch_ms", "BIGINT", "first_of({history}, 'ALIVE').launch_ms"),
        Derived("launched_ms", "BIGINT", "first_of({history}, 'ALIVE').launched_ms"),
        Derived("start_ms", "BIGINT", "first_of({history}, 'ALIVE').start_ms"),
        Derived("end_ms", "BIGINT", "last_of({history}, 'DEAD').end_ms"),
        Derived("end_ns", "BIGINT", "last_of({history}, 'DEAD').ts"),
    ],
)

SESSIONS = Table(
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

ENTITY_TABLES = [TASKS, ACTORS, JOBS, NODES, WORKERS]
FOLDED_TABLES = {t.name: t for t in ENTITY_TABLES + [SESSIONS]}
APPEND_TABLES = {t.name: t for t in (TASK_TRANSITIONS, TASK_PROFILE)}
# Everything folded from raw events (sessions aside, which also hold labels): dropped and rebuilt by a reindex.
FOLD_TABLE_NAMES = [t.name for t in ENTITY_TABLES] + list(APPEND_TABLES)

# Raw JSON bodies (~3.8 KB a task): zstd keeps them in ~120 bytes, DuckDB's default string compression in ~1.7 KB.
ZSTD = "USING COMPRESSION zstd"
# No unique index: a group's resends are found by a join on (session, event_id, ts_ns), which reads only the row
# groups of the group's time span (see event_stages.SEEN). Up to schema 5 a primary key on the 128-bit md5 of
# (session, event_id) did it, at ~3.4 µs an event, growing with the store.
RAW_EVENTS_DDL = f"""CREATE TABLE IF NOT EXISTS {{name}} (
        session VARCHAR, event_id VARCHAR, event_type VARCHAR, source_type VARCHAR, ts_ns BIGINT, node_id VARCHAR,
        supported BOOLEAN, received_at TIMESTAMPTZ, body VARCHAR {ZSTD})"""
RAW_COLUMNS = "session, event_id, event_type, source_type, ts_ns, node_id, supported, received_at, body"
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


SPANS_DDL = """CREATE TABLE IF NOT EXISTS spans (
    trace_id VARCHAR, span_id VARCHAR, parent_span_id VARCHAR, name VARCHAR, kind VARCHAR, start_ns BIGINT,
    end_ns BIGINT, status VARCHAR, status_message VARCHAR, service VARCHAR, session VARCHAR, job_id VARCHAR,
    node_id VARCHAR, worker_id VARCHAR, pid BIGINT, task_id VARCHAR, attempt INTEGER, actor_id VARCHAR,
    request_id VARCHAR, attributes JSON, events JSON, links JSON, resource_id VARCHAR, scope VARCHAR,
    PRIMARY KEY (trace_id, span_id))"""
# Each resource's attributes once, by the digest its spans name (``otlp.resource_id``)
SPAN_RESOURCES_DDL = "CREATE TABLE IF NOT EXISTS span_resources (resource_id VARCHAR PRIMARY KEY, attributes JSON)"
# How each task attempt's execution ended, as raysight's span of it says: when, and the error it raised, if it did
# ("Type: message"); what its outcome is inferred from when Ray never sent it (``store/reconcile.py``). Raw input, kept
# apart from the spans, which tail sampling may delete and a server may not keep at all.
ATTEMPT_ENDS_DDL = """CREATE TABLE IF NOT EXISTS attempt_ends (
    session VARCHAR, task_id VARCHAR, attempt INTEGER, trace_id VARCHAR, span_id VARCHAR, end_ns BIGINT, error VARCHAR,
    PRIMARY KEY (session, task_id, attempt))"""


def attempt_ends_sql(spans: str) -> str:
    """SQL: the ``attempt_ends`` rows of the spans in ``spans`` (a table of span rows): raysight's spans of task
    attempts (its instrumentation's scope, kind consumer) that name their session, task and attempt."""
    return f"""SELECT session, task_id, attempt, trace_id, span_id, end_ns,
                      CASE WHEN status = 'error' THEN coalesce(status_message, '') END AS error
               FROM {spans}
               WHERE scope = '{wire.TASK_SCOPE}' AND kind = 'consumer'
                 AND session IS NOT NULL AND task_id IS NOT NULL AND attempt IS NOT NULL"""


# Each file's bytes stored so far: a resent batch's lines before ``end_offset`` are already there.
LOG_FILES_DDL = """CREATE TABLE IF NOT EXISTS log_files (
    session VARCHAR, host VARCHAR, file_key VARCHAR, name VARCHAR, path VARCHAR, stream VARCHAR, worker_id VARCHAR,
    job_id VARCHAR, pid INTEGER, end_offset BIGINT, first_ns BIGINT, last_ns BIGINT,
    PRIMARY KEY (session, host, file_key))"""
LOG_OWN_COLUMN = "own BOOLEAN DEFAULT false"  # (false for the lines stored before schema 17)

RAW_DDL = [
    """CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR)""",
    RAW_EVENTS_DDL.format(name="raw_events"),
    f"""CREATE TABLE IF NOT EXISTS quarantine (
        key VARCHAR PRIMARY KEY, session VARCHAR, reason VARCHAR, received_at TIMESTAMPTZ, body VARCHAR {ZSTD})""",
    # What `raysight run` saw of a driver it started: its exit code, when it ended, and the session it joined, when it
    # joined one it did not start (raw input, never folded away).
    """CREATE TABLE IF NOT EXISTS run_exits (
        run_id VARCHAR PRIMARY KEY, driver_pid BIGINT, exit_code INTEGER, ended_ns BIGINT, session VARCHAR)""",
    # What Ray's aggregator agents reported of themselves (scraped by `raysight run`), per agent process (`source`):
    # a counter keeps the greatest value seen, a gauge the latest.
    """CREATE TABLE IF NOT EXISTS ray_reported (
        session VARCHAR, source VARCHAR, metric VARCHAR, event_type VARCHAR, kind VARCHAR, value DOUBLE,
        updated_at TIMESTAMPTZ, PRIMARY KEY (session, source, metric, event_type))""",
    """CREATE TABLE IF NOT EXISTS counters (name VARCHAR PRIMARY KEY, value BIGINT)""",
    # What a live cluster's dashboard answered for what Ray never sends as events (``ingest/ray_state.py``): each
    # entity's last row as Ray gave it, when first and last polled, its state then and every change of it; a sampled
    # resource (objects) holds the last poll's rows only. Raw input.
    """CREATE TABLE IF NOT EXISTS polled (
        session VARCHAR, resource VARCHAR, id VARCHAR, first_ns BIGINT, last_ns BIGINT, state VARCHAR, row JSON,
        history STRUCT(ts BIGINT, state VARCHAR)[], PRIMARY KEY (session, resource, id))""",
    # What the cluster had and what waited for it (the dashboard's cluster status: usage and demand), each poll.
    """CREATE TABLE IF NOT EXISTS cluster_status (
        session VARCHAR, ns BIGINT, status JSON, PRIMARY KEY (session, ns))""",
    # How each resource's polls went: the last that succeeded, with its rows, and the last error (`raysight doctor`).
    """CREATE TABLE IF NOT EXISTS polls (
        session VARCHAR, resource VARCHAR, last_ok_ns BIGINT, rows BIGINT, last_error VARCHAR, last_error_ns BIGINT,
        PRIMARY KEY (session, resource))""",
    # Prometheus metrics scraped from a session's targets (``ingest/prom_text.py``), raw input. Each series once: a
    # small number (``series_no``, what a sample carries: 4 bytes that compress), its canonical ID (a digest of
    # session, name and labels), name and labels. Each scrape of a target is kept (a series it no longer exposes is
    # stale from then on, as Prometheus's staleness marker says).
    "CREATE SEQUENCE IF NOT EXISTS metric_series_no",
    """CREATE TABLE IF NOT EXISTS metric_series (
        series_no INTEGER PRIMARY KEY, series_id UBIGINT UNIQUE, session VARCHAR, name VARCHAR,
        labels MAP(VARCHAR, VARCHAR), instance VARCHAR, job VARCHAR)""",
    """CREATE TABLE IF NOT EXISTS metric_samples (series_no INTEGER, ts_ms BIGINT, value DOUBLE)""",
    """CREATE TABLE IF NOT EXISTS metric_scrapes (
        session VARCHAR, instance VARCHAR, job VARCHAR, ts_ms BIGINT, samples INTEGER)""",
    """CREATE TABLE IF NOT EXISTS metric_metadata (
        session VARCHAR, name VARCHAR, type VARCHAR, help VARCHAR, PRIMARY KEY (session, name))""",
    # What the bounds on metrics cost each session (``store/metric_retention.py``): the series refused past the limit
    # and their samples dropped since; the samples the retention dropped, through when, and why.
    """CREATE TABLE IF NOT EXISTS metric_refused (
        session VARCHAR PRIMARY KEY, series BIGINT, samples BIGINT, last_ms BIGINT)""",
    """CREATE TABLE IF NOT EXISTS metric_dropped (
        session VARCHAR PRIMARY KEY, samples BIGINT, through_ms BIGINT, why VARCHAR, dropped_at TIMESTAMPTZ)""",
    # Trace spans as OTLP brought them (``ingest/otlp.py``), raw input: each once, however often it was sent.
    SPANS_DDL,
    SPAN_RESOURCES_DDL,
    ATTEMPT_ENDS_DDL,
    # What node agents last saw of each raylet (``node_id``) and GCS (``node_id`` '') of a session on their host:
    # running with ``pid``, or gone (``alive`` false; ``last_alive_ns``: when last known running). Raw input.
    """CREATE TABLE IF NOT EXISTS node_evidence (
        session VARCHAR, host VARCHAR, process VARCHAR, node_id VARCHAR, pid BIGINT, alive BOOLEAN, ns BIGINT,
        last_alive_ns BIGINT, PRIMARY KEY (session, host, process, node_id))""",
    *[
        # Log lines as the node agents read them (raw input, never folded away): a line, or a piece of one over 64 KiB
        # (``continued``), of a file (``file_key``: its device, inode, the agent's ID of its bytes) at ``byte_offset``.
        # ``seq`` orders the lines as they were stored (what `raysight logs --follow` reads on from). ``raw`` keeps
        # the bytes of a line that is not UTF-8 (``text`` shows them with replacement characters). ``own`` flags
        # a Ray dashboard's line of a request raysight made (``agent_logs.LINE_FIELDS``).
        f"""CREATE TABLE IF NOT EXISTS log_lines (
            seq BIGINT, session VARCHAR, host VARCHAR, file_key VARCHAR, name VARCHAR, stream VARCHAR,
            worker_id VARCHAR, pid INTEGER, job_id VARCHAR, task_name VARCHAR, actor_name VARCHAR, byte_offset BIGINT,
            ts_ns BIGINT, level VARCHAR, request_id VARCHAR, trace_id VARCHAR, span_id VARCHAR, continued BOOLEAN,
            marker BOOLEAN, text VARCHAR, raw BLOB, {LOG_OWN_COLUMN})""",
        LOG_FILES_DDL,
        # Bytes an agent could not read (a file deleted before its end was read): shown by `raysight doctor`.
        """CREATE TABLE IF NOT EXISTS log_gaps (
            session VARCHAR, host VARCHAR, file_key VARCHAR, name VARCHAR, start_offset BIGINT, end_offset BIGINT,
            why VARCHAR, received_at TIMESTAMPTZ, PRIMARY KEY (session, host, file_key, start_offset))""",
        # Which trigrams each block of lines' text holds, and which blocks hold each file's lines (with their byte
        # offsets and times): what a query may skip (``store/log_index.py``).
        """CREATE TABLE IF NOT EXISTS log_blocks (block BIGINT PRIMARY KEY, grams BIT)""",
        """CREATE TABLE IF NOT EXISTS log_file_blocks (
            session VARCHAR, host VARCHAR, file_key VARCHAR, block BIGINT, lines BIGINT, first_offset BIGINT,
            last_offset BIGINT, first_ns BIGINT, last_ns BIGINT, bytes BIGINT,
            PRIMARY KEY (session, host, file_key, block))""",
        # What the server's log retention dropped of each file: its first ``lines``, through this offset and time.
        """CREATE TABLE IF NOT EXISTS log_dropped (
            session VARCHAR, host VARCHAR, file_key VARCHAR, lines BIGINT, through_offset BIGINT, through_ns BIGINT,
            why VARCHAR, dropped_at TIMESTAMPTZ, PRIMARY KEY (session, host, file_key))""",
    ],
]


# The ``seq`` of the last log line stored (0 before any), kept in ``meta``
LOG_SEQ_KEY = "log_lines_seq"
LAST_LOG_SEQ_SQL = f"SELECT coalesce(max(value::BIGINT), 0) FROM meta WHERE key = '{LOG_SEQ_KEY}'"
# The last line stored before the log indexes existed (0: none), kept in ``meta``: such lines are always read
INDEXED_FROM_KEY = "log_indexed_from"
INDEXED_FROM_SQL = f"SELECT coalesce(max(value::BIGINT), 0) FROM meta WHERE key = '{INDEXED_FROM_KEY}'"


RESOURCE_ID_SQL = "left(md5(resource::VARCHAR), 16)"  # as ``otlp.resource_id``
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
    6: _copy_raw_events(RAW_EVENTS_DDL.format(name="raw_events_v6"), "raw_events_v6", RAW_COLUMNS),
    7: [],  # the log tables, which all_ddl() makes
    8: [],  # a first index of the log lines, which 9 completes
    9: [  # the log indexes (all_ddl() makes them): the lines stored before them are always read
        f"INSERT OR REPLACE INTO meta SELECT '{INDEXED_FROM_KEY}', value FROM meta WHERE key = '{LOG_SEQ_KEY}'"
    ],
    10: [  # node_evidence and log_dropped (all_ddl() makes them); the sessions known by their logs alone are listed
        LOG_FILES_DDL,  # (from below 7, not there yet)
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
        SPANS_DDL,
        SPAN_RESOURCES_DDL,
        "ALTER TABLE spans ADD COLUMN IF NOT EXISTS resource JSON",
        "ALTER TABLE spans ADD COLUMN IF NOT EXISTS resource_id VARCHAR",
        f"""INSERT INTO span_resources SELECT DISTINCT {RESOURCE_ID_SQL}, resource FROM spans WHERE resource IS NOT NULL
            ON CONFLICT DO NOTHING""",
        f"UPDATE spans SET resource_id = {RESOURCE_ID_SQL} WHERE resource IS NOT NULL",
        "ALTER TABLE spans DROP COLUMN resource",
    ],
    17: [  # attempt_ends (all_ddl() makes it), from the spans kept; log_lines.own (all_ddl() adds it): no line
        # stored before was flagged raysight's own
        ATTEMPT_ENDS_DDL,
        f"INSERT INTO attempt_ends {attempt_ends_sql('spans')} ON CONFLICT DO NOTHING",
    ],
}
REFOLD_BELOW = 2
# Older stores are upgraded in place to the version before this one, then copied into a new file (the current DDL in
# the current storage format: zstd raw bodies, and nothing of what earlier migrations dropped), see Store._rewrite.
REWRITE_BELOW = 5


def all_ddl() -> list[str]:
    """Every statement that creates the store from nothing (idempotent)."""
    tables: list[str] = [SESSIONS.ddl(), *(t.ddl() for t in ENTITY_TABLES), *(t.ddl() for t in APPEND_TABLES.values())]
    added = [
        "ALTER TABLE log_file_blocks ADD COLUMN IF NOT EXISTS bytes BIGINT",  # (schema 10)
        f"ALTER TABLE log_lines ADD COLUMN IF NOT EXISTS {LOG_OWN_COLUMN}",  # (schema 17)
    ]
    inference = [f"ALTER TABLE tasks ADD COLUMN IF NOT EXISTS {c}" for c in TASK_INFERENCE] + [
        f"ALTER TABLE {t} ADD COLUMN IF NOT EXISTS {c}" for t in INFERRED_ENDS for c in END_INFERENCE
    ]
    return RAW_DDL + added + tables + inference
