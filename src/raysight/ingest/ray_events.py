"""Ray's cluster-level events (nodes, jobs, workers, actors) to entity patches, in Python. Pure: no I/O.

These are a few events per process, with nested variants (death causes, resources) that read best as code; the
task events that make up nearly all of a busy stream are parsed and folded in DuckDB
(:mod:`raysight.store.event_stages`).
Patches are keyed by ``(session, id…)`` and name the columns they set; the store merges them with each column's
rule (``store/schema.py``), so arrival order never matters. A malformed payload raises (ValueError or kin) with
the reason the event is quarantined.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import orjson

from raysight.ingest.ids import b64_to_hex, parse_ts_ns, to_int

Patch = dict[str, Any]
Key = tuple[Any, ...]


def fold_payload(event_type: str, session: str, event: Any) -> list[tuple[str, Key, Patch]]:
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
