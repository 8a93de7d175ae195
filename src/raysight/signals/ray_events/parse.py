"""Ray's events, parsed: the tables their stream fills, and the cluster-level events (nodes, jobs, workers, actors)
to entity patches, in Python. Pure: no I/O.

The tables: the raw events, each kept once, and their folds — one row per task attempt, actor, job, node and worker,
merged by each column's rule (``tables.py``), and the task attempts' state transitions and profile events, which only
accumulate. The task events that make up nearly all of a busy stream are parsed and folded in DuckDB (the SQL of
:mod:`.event_stages`); the cluster-level ones are a few events per process, with nested variants (death causes,
resources) that read best as code, folded here.
Patches are keyed by ``(session, id…)`` and name the columns they set; the store merges them with each column's
rule, so arrival order never matters. A malformed payload raises (ValueError or kin) with the reason the event is
quarantined.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import orjson

from raysight.signals.ray_events.conversions import b64_to_hex, parse_ts_ns, to_int
from raysight.tables import Column, Derived, FoldedTable, Table, columns

Patch = dict[str, Any]
Key = tuple[Any, ...]


def event_patches(event_type: str, session: str, event: Any) -> list[tuple[str, Key, Patch]]:
    """The patches one event of a type in :data:`HANDLERS` makes; raises with the reason it is malformed."""
    payload_name, fold = HANDLERS[event_type]
    payload = event.get(payload_name)
    if not isinstance(payload, dict):
        raise ValueError(f"{event_type} has no {payload_name} object")
    return list(fold(session, payload))


# --- per-type folds: payload -> (table, key, patch) ------------------------------------------------------------


def _json(value: Any) -> str | None:
    return orjson.dumps(value).decode() if value not in (None, {}, []) else None


def _str(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _transitions(payload: Patch) -> list[Patch]:
    items = payload.get("stateTransitions") or []
    if not isinstance(items, list):
        raise TypeError("stateTransitions is not a list")
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("state"), str):
            raise TypeError("a state transition has no state")
    return items


def _ts(item: Patch) -> int:
    ts = parse_ts_ns(item.get("timestamp"))
    if ts is None:
        raise ValueError(f"bad timestamp {item.get('timestamp')!r}")
    return ts


def _death_message(cause: Any) -> str | None:
    """The human text inside an ActorDeathCause-like object, whichever variant it holds."""
    if not isinstance(cause, dict):
        return None
    for value in cause.values():
        if isinstance(value, dict):
            for name in ("formattedExceptionString", "errorMessage"):
                if isinstance(value.get(name), str) and value[name]:
                    return value[name]
    message = cause.get("errorMessage")
    return message if isinstance(message, str) and message else None


def _entity_key(session: str, p: Patch, name: str) -> Key:
    value = b64_to_hex(p.get(name))
    if value is None:
        raise ValueError(f"{name} is missing")
    return (session, value)


def fold_actor_definition(session: str, p: Patch) -> Iterable[tuple[str, Key, Patch]]:
    yield (
        "actors",
        _entity_key(session, p, "actorId"),
        {
            "job_id": b64_to_hex(p.get("jobId")),
            "name": _str(p.get("name")),
            "ray_namespace": _str(p.get("rayNamespace")),
            "class_name": _str(p.get("className")),
            "is_detached": bool(p.get("isDetached")),
            "required_resources": _json(p.get("requiredResources")),
            "placement_group_id": b64_to_hex(p.get("placementGroupId")),
            "serialized_runtime_env": _str(p.get("serializedRuntimeEnv")),
            "label_selector": _json(p.get("labelSelector")),
            "call_site": _str(p.get("callSite")),
            "parent_id": b64_to_hex(p.get("parentId")),
            "defined": True,
        },
    )


def fold_actor_lifecycle(session: str, p: Patch) -> Iterable[tuple[str, Key, Patch]]:
    history = []
    for t in _transitions(p):
        state = t["state"]
        history.append(
            {
                "ts": _ts(t),
                "state": state,
                "node_id": b64_to_hex(t.get("nodeId")),
                "worker_id": b64_to_hex(t.get("workerId")),
                "pid": to_int(t.get("pid"), bits=32) or None,
                "port": to_int(t.get("port"), bits=32) or None,
                "repr_name": _str(t.get("reprName")),
                "restart_reason": _str(t.get("restartReason")) if state == "RESTARTING" else None,
                "death_cause": _json(t.get("deathCause")) if state == "DEAD" else None,
                "death_message": _death_message(t.get("deathCause")) if state == "DEAD" else None,
            }
        )
    yield "actors", _entity_key(session, p, "actorId"), {"history": history or None}


def fold_job_definition(session: str, p: Patch) -> Iterable[tuple[str, Key, Patch]]:
    config: Patch = p["config"] if isinstance(p.get("config"), dict) else {}
    metadata: Patch = config["metadata"] if isinstance(config.get("metadata"), dict) else {}
    yield (
        "jobs",
        _entity_key(session, p, "jobId"),
        {
            "driver_pid": to_int(p.get("driverPid")),
            "driver_node_id": b64_to_hex(p.get("driverNodeId")),
            "entrypoint": p.get("entrypoint") if isinstance(p.get("entrypoint"), str) else None,
            "runtime_env": _str(config.get("serializedRuntimeEnv")),
            "metadata": _json(metadata),
            "submission_id": _str(metadata.get("job_submission_id")),
            "defined": True,
        },
    )


def fold_job_lifecycle(session: str, p: Patch) -> Iterable[tuple[str, Key, Patch]]:
    history = [{"ts": _ts(t), "state": t["state"]} for t in _transitions(p)]
    yield "jobs", _entity_key(session, p, "jobId"), {"history": history or None}


def fold_node_definition(session: str, p: Patch) -> Iterable[tuple[str, Key, Patch]]:
    yield (
        "nodes",
        _entity_key(session, p, "nodeId"),
        {
            "node_ip": _str(p.get("nodeIpAddress")),
            "labels": _json(p.get("labels")),
            "start_ns": parse_ts_ns(p.get("startTimestamp")),
            "hostname": _str(p.get("hostname")),
            "node_name": _str(p.get("nodeName")),
            "instance_id": _str(p.get("instanceId")),
            "instance_type_name": _str(p.get("instanceTypeName")),
            "defined": True,
        },
    )


def fold_node_lifecycle(session: str, p: Patch) -> Iterable[tuple[str, Key, Patch]]:
    history = []
    for t in _transitions(p):
        death: Patch = t["deathInfo"] if isinstance(t.get("deathInfo"), dict) else {}
        history.append(
            {
                "ts": _ts(t),
                "state": t["state"],
                "resources": _json(t.get("resources")),
                "alive_sub_state": _str(t.get("aliveSubState")),
                "death_reason": _str(death.get("reason")),
                "death_message": _str(death.get("reasonMessage")),
            }
        )
    yield "nodes", _entity_key(session, p, "nodeId"), {"history": history or None}


def fold_worker_definition(session: str, p: Patch) -> Iterable[tuple[str, Key, Patch]]:
    yield (
        "workers",
        _entity_key(session, p, "workerId"),
        {
            "node_id": b64_to_hex(p.get("nodeId")),
            "worker_type": _str(p.get("workerType")),
            "pid": to_int(p.get("pid")),
            "defined": True,
        },
    )


def fold_worker_lifecycle(session: str, p: Patch) -> Iterable[tuple[str, Key, Patch]]:
    history = []
    for t in _transitions(p):
        death: Patch = t["deathInfo"] if isinstance(t.get("deathInfo"), dict) else {}
        history.append(
            {
                "ts": _ts(t),
                "state": t["state"],
                "launch_ms": to_int(t.get("workerLaunchTimeMs")) or None,
                "launched_ms": to_int(t.get("workerLaunchedTimeMs")) or None,
                "start_ms": to_int(t.get("startTimeMs")) or None,
                "end_ms": to_int(t.get("endTimeMs")) or None,
                "exit_type": _str(death.get("exitType")),
                "exit_detail": _str(death.get("exitDetail")),
                "memory_used": to_int(death.get("memoryUsedBytes")),
            }
        )
    yield (
        "workers",
        _entity_key(session, p, "workerId"),
        {
            "job_id": b64_to_hex(p.get("jobId")),
            "history": history or None,
        },
    )


HANDLERS: dict[str, tuple[str, Callable[[str, Patch], Iterable[tuple[str, Key, Patch]]]]] = {
    "ACTOR_DEFINITION_EVENT": ("actorDefinitionEvent", fold_actor_definition),
    "ACTOR_LIFECYCLE_EVENT": ("actorLifecycleEvent", fold_actor_lifecycle),
    "DRIVER_JOB_DEFINITION_EVENT": ("driverJobDefinitionEvent", fold_job_definition),
    "DRIVER_JOB_LIFECYCLE_EVENT": ("driverJobLifecycleEvent", fold_job_lifecycle),
    "NODE_DEFINITION_EVENT": ("nodeDefinitionEvent", fold_node_definition),
    "NODE_LIFECYCLE_EVENT": ("nodeLifecycleEvent", fold_node_lifecycle),
    "WORKER_DEFINITION_EVENT": ("workerDefinitionEvent", fold_worker_definition),
    "WORKER_LIFECYCLE_EVENT": ("workerLifecycleEvent", fold_worker_lifecycle),
}


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

# Reconciliation writes these (``signals/ray_events/reconcile.py``); a terminal state reported later clears them.
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
