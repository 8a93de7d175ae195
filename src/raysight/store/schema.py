"""The store's tables, described once as data: DDL, the JSON staging shape and the merge SQL all come from here.

Entity tables are folds of the raw events. Each has key columns, scalar columns (a non-null newcomer wins),
list columns (set unions, kept sorted) and derived columns (SQL over the merged history). Merging is
commutative and idempotent, so events may arrive in any order and any number of times.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

SCHEMA_VERSION = 1

TERMINAL = "('FINISHED', 'FAILED')"

# DuckDB macros used by the derived columns. ``merge_list`` is the union that keeps histories sorted by time.
MACROS = [
    "CREATE OR REPLACE MACRO merge_list(a, b) AS "
    "list_sort(list_distinct(list_concat(coalesce(a, []), coalesce(b, []))))",
    "CREATE OR REPLACE MACRO first_of(h, s) AS list_filter(h, lambda x: x.state = s)[1]",
    "CREATE OR REPLACE MACRO last_of(h, s) AS list_filter(h, lambda x: x.state = s)[-1]",
]


@dataclass(frozen=True)
class Column:
    name: str
    type: str | dict[str, str]  # a DuckDB type, or the fields of a STRUCT(...)[] history list
    merge: str | None = None  # SQL for ON CONFLICT, with {old} and {new}; default: a non-null newcomer wins

    @property
    def is_list(self) -> bool:
        return isinstance(self.type, dict)

    @property
    def ddl_type(self) -> str:
        if isinstance(self.type, dict):
            return "STRUCT(" + ", ".join(f"{k} {v}" for k, v in self.type.items()) + ")[]"
        return self.type

    @property
    def json_type(self) -> object:
        return [self.type] if isinstance(self.type, dict) else self.type

    def merge_sql(self, table: str) -> str:
        old, new = f"{table}.{self.name}", f"excluded.{self.name}"
        if self.merge:
            return self.merge.format(old=old, new=new)
        if self.is_list:
            return f"merge_list({old}, {new})"
        return f"coalesce({new}, {old})"


@dataclass(frozen=True)
class Derived:
    name: str
    type: str
    expr: str  # SQL over {h}, the merged history


@dataclass(frozen=True)
class Table:
    name: str
    keys: list[Column]
    columns: list[Column]
    derived: list[Derived] = field(default_factory=list)
    history: str = "history"

    @property
    def staged(self) -> list[Column]:
        return self.keys + self.columns

    def ddl(self) -> str:
        cols = [f"{c.name} {c.ddl_type}" for c in self.staged] + [f"{d.name} {d.type}" for d in self.derived]
        keys = ", ".join(c.name for c in self.keys)
        return f"CREATE TABLE IF NOT EXISTS {self.name} ({', '.join(cols)}, PRIMARY KEY ({keys}))"

    def json_spec(self) -> str:
        return orjson.dumps({c.name: c.json_type for c in self.staged}).decode()

    def upsert_sql(self) -> str:
        """INSERT from a list of JSON rows (parameter 1), merging into rows that exist."""
        spec = self.json_spec().replace("'", "''")
        new_h = f"merge_list(NULL, {self.history})"
        merged_h = f"merge_list({self.name}.{self.history}, excluded.{self.history})"
        select = [f"merge_list(NULL, {c.name})" if c.is_list else c.name for c in self.staged]
        select += [d.expr.format(h=new_h) for d in self.derived]
        sets = [f"{c.name} = {c.merge_sql(self.name)}" for c in self.columns]
        sets += [f"{d.name} = {d.expr.format(h=merged_h)}" for d in self.derived]
        names = [c.name for c in self.staged] + [d.name for d in self.derived]
        return (
            f"INSERT INTO {self.name} ({', '.join(names)}) SELECT {', '.join(select)} "
            f"FROM (SELECT unnest(from_json(j, '{spec}')) FROM unnest($1::VARCHAR[]) AS u(j)) "
            f"ON CONFLICT DO UPDATE SET {', '.join(sets)}"
        )


def _cols(*pairs: tuple[str, str]) -> list[Column]:
    return [Column(n, t) for n, t in pairs]


SESSION = Column("session", "VARCHAR")

TASKS = Table(
    "tasks",
    keys=[SESSION, Column("task_id", "VARCHAR"), Column("attempt", "INTEGER")],
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
        Column("history", {"ts": "BIGINT", "state": "VARCHAR"}),
        Column(
            "profile",
            {
                "start_ns": "BIGINT",
                "end_ns": "BIGINT",
                "name": "VARCHAR",
                "extra": "VARCHAR",
                "component": "VARCHAR",
                "component_id": "VARCHAR",
                "node_ip": "VARCHAR",
            },
        ),
    ],
    derived=[
        Derived(
            "reported_state",
            "VARCHAR",
            f"coalesce(list_filter({{h}}, lambda x: x.state IN {TERMINAL})[-1].state, {{h}}[-1].state)",
        ),
        Derived("creation_ns", "BIGINT", "coalesce(first_of({h}, 'PENDING_ARGS_AVAIL').ts, {h}[1].ts)"),
        Derived("start_ns", "BIGINT", "first_of({h}, 'RUNNING').ts"),
        Derived("end_ns", "BIGINT", f"list_filter({{h}}, lambda x: x.state IN {TERMINAL})[-1].ts"),
    ],
)
# Reconciliation writes these; a terminal state reported later clears them (see store.reconcile).
TASK_INFERENCE = ["inferred_state VARCHAR", "inferred_reason VARCHAR", "inferred_error_type VARCHAR"]

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
        )
    ],
    derived=[
        Derived("state", "VARCHAR", "{h}[-1].state"),
        Derived("node_id", "VARCHAR", "last_of({h}, 'ALIVE').node_id"),
        Derived("worker_id", "VARCHAR", "last_of({h}, 'ALIVE').worker_id"),
        Derived("pid", "INTEGER", "last_of({h}, 'ALIVE').pid"),
        Derived("repr_name", "VARCHAR", "list_filter({h}, lambda x: x.repr_name IS NOT NULL)[-1].repr_name"),
        Derived("num_restarts", "INTEGER", "len(list_filter({h}, lambda x: x.state = 'RESTARTING'))"),
        Derived(
            "num_restarts_lineage",
            "INTEGER",
            "len(list_filter({h}, lambda x: x.restart_reason = 'LINEAGE_RECONSTRUCTION'))",
        ),
        Derived(
            "num_restarts_preemption", "INTEGER", "len(list_filter({h}, lambda x: x.restart_reason = 'NODE_PREEMPTION'))"
        ),
        Derived("death_cause", "VARCHAR", "last_of({h}, 'DEAD').death_cause"),
        Derived("death_message", "VARCHAR", "last_of({h}, 'DEAD').death_message"),
        Derived("start_ns", "BIGINT", "first_of({h}, 'ALIVE').ts"),
        Derived("end_ns", "BIGINT", "last_of({h}, 'DEAD').ts"),
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
    + [Column("history", {"ts": "BIGINT", "state": "VARCHAR"})],
    derived=[
        Derived("state", "VARCHAR", "{h}[-1].state"),
        Derived("start_ns", "BIGINT", "first_of({h}, 'CREATED').ts"),
        Derived("end_ns", "BIGINT", "last_of({h}, 'FINISHED').ts"),
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
        )
    ],
    derived=[
        Derived("state", "VARCHAR", "{h}[-1].state"),
        Derived("resources_total", "VARCHAR", "last_of({h}, 'ALIVE').resources"),
        Derived("death_reason", "VARCHAR", "last_of({h}, 'DEAD').death_reason"),
        Derived("death_message", "VARCHAR", "last_of({h}, 'DEAD').death_message"),
        Derived("alive_ns", "BIGINT", "first_of({h}, 'ALIVE').ts"),
        Derived("end_ns", "BIGINT", "last_of({h}, 'DEAD').ts"),
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
        )
    ],
    derived=[
        Derived("state", "VARCHAR", "{h}[-1].state"),
        Derived("exit_type", "VARCHAR", "last_of({h}, 'DEAD').exit_type"),
        Derived("exit_detail", "VARCHAR", "last_of({h}, 'DEAD').exit_detail"),
        Derived("launch_ms", "BIGINT", "first_of({h}, 'ALIVE').launch_ms"),
        Derived("launched_ms", "BIGINT", "first_of({h}, 'ALIVE').launched_ms"),
        Derived("start_ms", "BIGINT", "first_of({h}, 'ALIVE').start_ms"),
        Derived("end_ms", "BIGINT", "last_of({h}, 'DEAD').end_ms"),
        Derived("end_ns", "BIGINT", "last_of({h}, 'DEAD').ts"),
    ],
)

SESSIONS = Table(
    "sessions",
    keys=[SESSION],
    columns=[
        Column("label", "VARCHAR", merge="coalesce({old}, {new})"),
        Column("run_id", "VARCHAR", merge="coalesce({old}, {new})"),
        Column("first_ns", "BIGINT", merge="least({old}, {new})"),
        Column("last_ns", "BIGINT", merge="greatest({old}, {new})"),
    ],
    history="",
)

ENTITY_TABLES = [TASKS, ACTORS, JOBS, NODES, WORKERS]
FOLDED_TABLES = {t.name: t for t in ENTITY_TABLES + [SESSIONS]}

RAW_DDL = [
    """CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR)""",
    """CREATE TABLE IF NOT EXISTS raw_events (
        session VARCHAR, event_id VARCHAR, event_type VARCHAR, source_type VARCHAR, ts_ns BIGINT,
        node_id VARCHAR, supported BOOLEAN, received_at TIMESTAMPTZ, body VARCHAR,
        PRIMARY KEY (session, event_id))""",
    """CREATE TABLE IF NOT EXISTS quarantine (
        key VARCHAR PRIMARY KEY, session VARCHAR, reason VARCHAR, received_at TIMESTAMPTZ, body VARCHAR)""",
    # What `raysight run` saw of a driver it started: its exit code and when it ended (raw input, never folded away).
    """CREATE TABLE IF NOT EXISTS run_exits (
        run_id VARCHAR PRIMARY KEY, driver_pid BIGINT, exit_code INTEGER, ended_ns BIGINT)""",
    """CREATE TABLE IF NOT EXISTS counters (name VARCHAR PRIMARY KEY, value BIGINT)""",
]


def all_ddl() -> list[str]:
    """Every statement that creates the store from nothing (idempotent)."""
    tables = [t.ddl() for t in [SESSIONS, *ENTITY_TABLES]]
    return RAW_DDL + tables + [f"ALTER TABLE tasks ADD COLUMN IF NOT EXISTS {c}" for c in TASK_INFERENCE]
