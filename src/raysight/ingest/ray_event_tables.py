"""The tables Ray's event stream fills: the raw events, each kept once, and their folds — one row per task attempt,
actor, job, node and worker, merged by each column's rule (``tables.py``), and the task attempts' state transitions
and profile events, which only accumulate. The cluster-level folds are :mod:`.ray_events`' patches, the task
folds the SQL of :mod:`raysight.store.event_stages`; the store makes the tables and applies both (``store/schema.py``,
``store/store.py``). Pure.
"""

from __future__ import annotations

from raysight.tables import Column, Derived, FoldedTable, Table, columns

# Raw JSON bodies (~3.8 KB a task): zstd keeps them in ~120 bytes, DuckDB's default string compression in ~1.7 KB.
# No unique index: a group's resends are found by a join on (session, event_id, ts_ns), which reads only the row
# groups of the group's time span (see event_stages.SEEN). Up to schema 5 a primary key on the 128-bit md5 of
# (session, event_id) did it, at ~3.4 µs an event, growing with the store.
RAW_EVENTS = Table(
    "raw_events",
    columns(
        session="VARCHAR",
        event_id="VARCHAR",
        event_type="VARCHAR",
        source_type="VARCHAR",
        ts_ns="BIGINT",
        node_id="VARCHAR",
        supported="BOOLEAN",
        received_at="TIMESTAMPTZ",
    )
    + [Column("body", "VARCHAR", compression="zstd")],
)

SESSION = Column("session", "VARCHAR")
TASK_KEY = [SESSION, Column("task_id", "VARCHAR"), Column("attempt", "INTEGER")]

# Reconciliation writes these (``store/reconcile.py``); a terminal state reported later clears them.
TASK_INFERENCE = [
    Column("inferred_state", "VARCHAR", added=True),
    Column("inferred_reason", "VARCHAR", added=True),
    Column("inferred_error_type", "VARCHAR", added=True),
]
# The same for nodes, workers and actors that outlived their session in Ray's stream (re-derived at every fold).
END_INFERENCE = [
    Column("inferred_state", "VARCHAR", added=True),
    Column("inferred_reason", "VARCHAR", added=True),
    Column("inferred_end_ns", "BIGINT", added=True),
]

TASKS = FoldedTable(
    "tasks",
    keys=TASK_KEY,
    columns=columns(
        job_id="VARCHAR",
        type="VARCHAR",
        name="VARCHAR",
        func_or_class_name="VARCHAR",
        module_name="VARCHAR",
        language="VARCHAR",
        actor_id="VARCHAR",
        parent_task_id="VARCHAR",
        placement_group_id="VARCHAR",
        required_resources="VARCHAR",
        runtime_env="VARCHAR",
        call_site="VARCHAR",
        label_selector="VARCHAR",
        defined="BOOLEAN",
        node_id="VARCHAR",
        worker_id="VARCHAR",
        worker_pid="INTEGER",
        stdout_file="VARCHAR",
        stderr_file="VARCHAR",
        stdout_start="BIGINT",
        stdout_end="BIGINT",
        stderr_start="BIGINT",
        stderr_end="BIGINT",
        error_type="VARCHAR",
        error_message="VARCHAR",
        error_detail="VARCHAR",
        is_debugger_paused="BOOLEAN",
        actor_repr_name="VARCHAR",
        exec_worker_id="VARCHAR",
        exec_node_ip="VARCHAR",
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
    inferred=TASK_INFERENCE,
)
TASK_TRANSITIONS = Table("task_transitions", TASK_KEY + columns(ts="BIGINT", state="VARCHAR"))
TASK_PROFILE = Table(
    "task_profile",
    TASK_KEY
    + columns(
        start_ns="BIGINT",
        end_ns="BIGINT",
        name="VARCHAR",
        extra="VARCHAR",
        component="VARCHAR",
        component_id="VARCHAR",
        node_ip="VARCHAR",
    ),
)


ACTORS = FoldedTable(
    "actors",
    keys=[SESSION, Column("actor_id", "VARCHAR")],
    columns=columns(
        job_id="VARCHAR",
        name="VARCHAR",
        ray_namespace="VARCHAR",
        class_name="VARCHAR",
        is_detached="BOOLEAN",
        required_resources="VARCHAR",
        placement_group_id="VARCHAR",
        serialized_runtime_env="VARCHAR",
        label_selector="VARCHAR",
        call_site="VARCHAR",
        parent_id="VARCHAR",
        defined="BOOLEAN",
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
    inferred=END_INFERENCE,
)

JOBS = FoldedTable(
    "jobs",
    keys=[SESSION, Column("job_id", "VARCHAR")],
    columns=columns(
        driver_pid="BIGINT",
        driver_node_id="VARCHAR",
        entrypoint="VARCHAR",
        runtime_env="VARCHAR",
        metadata="VARCHAR",
        submission_id="VARCHAR",
        defined="BOOLEAN",
    )
    + [Column("history", {"ts": "BIGINT", "state": "VARCHAR"}, "union")],
    derived=[
        Derived("state", "VARCHAR", "{history}[-1].state"),
        Derived("start_ns", "BIGINT", "first_of({history}, 'CREATED').ts"),
        Derived("end_ns", "BIGINT", "last_of({history}, 'FINISHED').ts"),
    ],
)

NODES = FoldedTable(
    "nodes",
    keys=[SESSION, Column("node_id", "VARCHAR")],
    columns=columns(
        node_ip="VARCHAR",
        labels="VARCHAR",
        start_ns="BIGINT",
        hostname="VARCHAR",
        node_name="VARCHAR",
        instance_id="VARCHAR",
        instance_type_name="VARCHAR",
        defined="BOOLEAN",
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
    inferred=END_INFERENCE,
)

WORKERS = FoldedTable(
    "workers",
    keys=[SESSION, Column("worker_id", "VARCHAR")],
    columns=columns(
        node_id="VARCHAR",
        worker_type="VARCHAR",
        pid="BIGINT",
        job_id="VARCHAR",
        defined="BOOLEAN",
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
    inferred=END_INFERENCE,
)

ENTITY_TABLES = [TASKS, ACTORS, JOBS, NODES, WORKERS]
APPEND_TABLES = {t.name: t for t in (TASK_TRANSITIONS, TASK_PROFILE)}
