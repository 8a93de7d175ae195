"""Ray's structured event stream (a JSON array per POST) to raw rows and entity patches. Pure: no I/O.

Every event becomes exactly one of: a raw row of a folded type, a raw row of a type raysight does not fold
(``supported=False``: kept, counted, folded by a later ``reindex``; Ray 2.60 defines PLACEMENT_GROUP_*,
SUBMISSION_JOB_* and PLATFORM events but never sends them), or a quarantined row with its reason.
Entity patches are keyed by ``(session, id…)`` and name the columns they set; the store merges them with each
column's rule (``store/schema.py``), so arrival order never matters. Patches to append tables (a task's state
transitions and profile events) are rows the store adds the first time it sees the event.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from raysight.ingest.ids import b64_to_hex, parse_ts_ns, to_int, unique_b64_to_hex

Patch = dict[str, Any]
Key = tuple[Any, ...]

TERMINAL_TASK_STATES = frozenset({"FINISHED", "FAILED"})


@dataclass(slots=True)
class RawEvent:
    session: str
    event_id: str
    event_type: str
    source_type: str | None
    ts_ns: int | None
    node_id: str | None
    supported: bool
    body: str


@dataclass(frozen=True, slots=True)
class Quarantined:
    key: str
    session: str | None
    reason: str
    body: str


@dataclass(slots=True)
class Parsed:
    """One well-formed event: its raw row and the patches it makes to entity (and append) tables."""

    raw: RawEvent
    patches: list[tuple[str, Key, Patch]]


@dataclass(slots=True)
class Batch:
    """What one or more POSTs carried, ready for the store (which folds only the events it had not seen)."""

    events: list[Parsed] = field(default_factory=list)
    quarantined: list[Quarantined] = field(default_factory=list)
    sessions: dict[str, Patch] = field(default_factory=dict)  # session -> label, run_id, first_ns, last_ns

    def extend(self, other: Batch) -> None:
        self.events.extend(other.events)
        self.quarantined.extend(other.quarantined)
        for name, patch in other.sessions.items():
            self.add_session(name, patch)

    def add_session(self, name: str, patch: Patch) -> None:
        old = self.sessions.setdefault(name, patch)
        if old is patch:
            return
        times = [v for p in (old, patch) for v in (p["first_ns"], p["last_ns"]) if v is not None]
        self.sessions[name] = {
            "label": old["label"] or patch["label"],
            "run_id": old["run_id"] or patch["run_id"],
            "first_ns": min(times, default=None),
            "last_ns": max(times, default=None),
        }

    def __len__(self) -> int:
        return len(self.events) + len(self.quarantined)


def parse_batch(events: list[Any], *, label: str | None = None, run_id: str | None = None) -> Batch:
    """Turn one decoded POST body (a list) into a :class:`Batch`. Never raises for an event's content."""
    batch = Batch()
    spans: dict[str, list[int]] = {}  # session -> the timestamps seen, as [first, last]
    for event in events:
        body = orjson.dumps(event).decode()
        try:
            parsed = parse_event(event, body)
        except (ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:
            session = event.get("sessionName") if isinstance(event, dict) else None
            batch.quarantined.append(
                Quarantined(
                    key=hashlib.md5(body.encode()).hexdigest(),
                    session=session if isinstance(session, str) else None,
                    reason=f"{type(exc).__name__}: {exc}"[:500],
                    body=body,
                )
            )
            continue
        batch.events.append(parsed)
        span = spans.setdefault(parsed.raw.session, [])
        if (ts := parsed.raw.ts_ns) is not None:
            span[:] = [min(span[0], ts), max(span[1], ts)] if span else [ts, ts]
    for session, span in spans.items():
        first, last = span or (None, None)
        batch.add_session(session, {"label": label, "run_id": run_id, "first_ns": first, "last_ns": last})
    return batch


def parse_event(event: Any, body: str) -> Parsed:
    """One event to its raw row and entity patches; raises ValueError (or kin) with the reason it is malformed."""
    if not isinstance(event, dict):
        raise ValueError(f"event is a {type(event).__name__}, not an object")
    session = event.get("sessionName")
    if not isinstance(session, str) or not session:
        raise ValueError("sessionName is missing or not a string")
    event_type = event.get("eventType")
    if not isinstance(event_type, str) or not event_type:
        raise ValueError("eventType is missing or not a string")
    source_type = event.get("sourceType")
    event_id = unique_b64_to_hex(event.get("eventId")) or "content:" + hashlib.md5(body.encode()).hexdigest()
    handler = HANDLERS.get(event_type)
    patches: list[tuple[str, Key, Patch]] = []
    if handler is not None:
        payload_name, fold = handler
        payload = event.get(payload_name)
        if not isinstance(payload, dict):
            raise ValueError(f"{event_type} has no {payload_name} object")
        patches = list(fold(session, payload))
    raw = RawEvent(
        session=session,
        event_id=event_id,
        event_type=event_type,
        source_type=source_type if isinstance(source_type, str) else None,
        ts_ns=parse_ts_ns(event.get("timestamp")),
        node_id=b64_to_hex(event.get("nodeId")),
        supported=handler is not None,
        body=body,
    )
    return Parsed(raw, patches)


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


def _function(descriptor: Any) -> tuple[str | None, str | None]:
    """(module, ``Class.function`` or ``function``) from a FunctionDescriptor of any language."""
    if not isinstance(descriptor, dict):
        return None, None
    for inner in descriptor.values():
        if isinstance(inner, dict):
            module = _str(inner.get("moduleName"))
            cls = _str(inner.get("className"))
            func = _str(inner.get("functionName"))
            name = f"{cls}.{func}" if cls and func else (func or cls)
            return module, name
    return None, None


def _task_key(session: str, payload: Patch, attempt_field: str = "taskAttempt") -> Key:
    task_id = b64_to_hex(payload.get("taskId"))
    if task_id is None:
        raise ValueError("taskId is missing")
    attempt = to_int(payload.get(attempt_field), bits=32) or 0
    return (session, task_id, attempt)


def fold_task_definition(session: str, p: Patch) -> Iterable[tuple[str, Key, Patch]]:
    key = _task_key(session, p)
    task_type = _str(p.get("taskType")) or "NORMAL_TASK"
    module, func = _function(p.get("taskFunc"))
    actor_id = key[1][16:] if task_type == "ACTOR_CREATION_TASK" else None
    yield "tasks", key, _definition(p, task_type, module, func, _str(p.get("taskName")), actor_id)


def fold_actor_task_definition(session: str, p: Patch) -> Iterable[tuple[str, Key, Patch]]:
    key = _task_key(session, p)
    module, func = _function(p.get("actorFunc"))
    actor_id = b64_to_hex(p.get("actorId"))
    yield "tasks", key, _definition(p, "ACTOR_TASK", module, func, _str(p.get("actorTaskName")), actor_id)


def _definition(
    p: Patch, task_type: str, module: str | None, func: str | None, name: str | None, actor_id: str | None
) -> Patch:
    return {
        "job_id": b64_to_hex(p.get("jobId")),
        "type": task_type,
        "name": name if name is not None else (func or ""),
        "func_or_class_name": func,
        "module_name": module,
        "language": _str(p.get("language")),
        "actor_id": actor_id,
        "parent_task_id": b64_to_hex(p.get("parentTaskId")),
        "placement_group_id": b64_to_hex(p.get("placementGroupId")),
        "required_resources": _json(p.get("requiredResources")),
        "runtime_env": _str(p.get("serializedRuntimeEnv")),
        "call_site": _str(p.get("callSite")),
        "label_selector": _json(p.get("labelSelector")),
        "defined": True,
    }


def _error(info: Any) -> tuple[str | None, str | None, str | None]:
    """(error type, message, the full RayErrorInfo as JSON) from a lifecycle event's ``rayErrorInfo``."""
    if not isinstance(info, dict) or not info:
        return None, None, None
    message = _str(info.get("errorMessage"))
    if not message:
        for variant in ("runtimeEnvSetupFailedError", "actorDiedError", "actorUnavailableError"):
            nested = info.get(variant)
            if isinstance(nested, dict):
                message = _death_message(nested) or message
    return _str(info.get("errorType")), message, _json(info)


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


def fold_task_lifecycle(session: str, p: Patch) -> Iterable[tuple[str, Key, Patch]]:
    key = _task_key(session, p)
    error_type, error_message, error_detail = _error(p.get("rayErrorInfo"))
    logs = p.get("taskLogInfo") if isinstance(p.get("taskLogInfo"), dict) else {}
    pid = to_int(p.get("workerPid"), bits=32)
    paused = p.get("isDebuggerPaused")
    transitions = [(_ts(t), t["state"]) for t in _transitions(p)]
    yield "tasks", key, {
        **_state_summary(transitions),
        "job_id": b64_to_hex(p.get("jobId")),
        "node_id": b64_to_hex(p.get("nodeId")),
        "worker_id": b64_to_hex(p.get("workerId")),
        "worker_pid": pid or None,
        "stdout_file": _str(logs.get("stdoutFile")),
        "stderr_file": _str(logs.get("stderrFile")),
        "stdout_start": to_int(logs.get("stdoutStart")),
        "stdout_end": to_int(logs.get("stdoutEnd")),
        "stderr_start": to_int(logs.get("stderrStart")),
        "stderr_end": to_int(logs.get("stderrEnd")),
        "error_type": error_type,
        "error_message": error_message,
        "error_detail": error_detail,
        "is_debugger_paused": paused if isinstance(paused, bool) else None,
        "actor_repr_name": _str(p.get("actorReprName")),
    }
    for ts, state in transitions:
        yield "task_transitions", key, {"ts": ts, "state": state}


def _state_summary(transitions: list[tuple[int, str]]) -> Patch:
    """What the store keeps of a task's transitions besides the transitions themselves (see ``schema.TASKS``)."""
    if not transitions:
        return {}
    return {
        "first_ns": min(ts for ts, _ in transitions),
        "pending_ns": min((ts for ts, s in transitions if s == "PENDING_ARGS_AVAIL"), default=None),
        "start_ns": min((ts for ts, s in transitions if s == "RUNNING"), default=None),
        "state_key": max((s in TERMINAL_TASK_STATES, ts, s) for ts, s in transitions),
    }


def fold_task_profile(session: str, p: Patch) -> Iterable[tuple[str, Key, Patch]]:
    key = _task_key(session, p, "attemptNumber")
    prof = p.get("profileEvents")
    if not isinstance(prof, dict):
        raise TypeError("profileEvents is not an object")
    events = prof.get("events") or []
    if not isinstance(events, list):
        raise TypeError("profileEvents.events is not a list")
    component = _str(prof.get("componentType"))
    component_id = b64_to_hex(prof.get("componentId"))
    node_ip = _str(prof.get("nodeIpAddress"))
    entries = [
        {
            "name": str(e.get("eventName") or ""),
            "start_ns": to_int(e.get("startTime")),
            "end_ns": to_int(e.get("endTime")),
            "extra": _str(e.get("extraData")),
            "component": component,
            "component_id": component_id,
            "node_ip": node_ip,
        }
        for e in events
        if isinstance(e, dict)
    ]
    executions = [e for e in entries if e["name"] == "task:execute"]
    patch: Patch = {
        "job_id": b64_to_hex(p.get("jobId")),
        "profile_name": next((e["name"][6:] for e in entries if e["name"].startswith("task::")), None),
        "exec_start_ns": min((e["start_ns"] for e in executions if e["start_ns"] is not None), default=None),
        "executed_ns": max((e["end_ns"] for e in executions if e["end_ns"] is not None), default=None),
    }
    if component == "worker":
        patch["exec_worker_id"] = component_id
        patch["exec_node_ip"] = node_ip
    yield "tasks", key, patch
    for entry in entries:
        yield "task_profile", key, entry


def _entity_key(session: str, p: Patch, name: str) -> Key:
    value = b64_to_hex(p.get(name))
    if value is None:
        raise ValueError(f"{name} is missing")
    return (session, value)


def fold_actor_definition(session: str, p: Patch) -> Iterable[tuple[str, Key, Patch]]:
    yield "actors", _entity_key(session, p, "actorId"), {
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
    }


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
    config = p.get("config") if isinstance(p.get("config"), dict) else {}
    metadata = config.get("metadata") if isinstance(config.get("metadata"), dict) else {}
    yield "jobs", _entity_key(session, p, "jobId"), {
        "driver_pid": to_int(p.get("driverPid")),
        "driver_node_id": b64_to_hex(p.get("driverNodeId")),
        "entrypoint": p.get("entrypoint") if isinstance(p.get("entrypoint"), str) else None,
        "runtime_env": _str(config.get("serializedRuntimeEnv")),
        "metadata": _json(metadata),
        "submission_id": _str(metadata.get("job_submission_id")),
        "defined": True,
    }


def fold_job_lifecycle(session: str, p: Patch) -> Iterable[tuple[str, Key, Patch]]:
    history = [{"ts": _ts(t), "state": t["state"]} for t in _transitions(p)]
    yield "jobs", _entity_key(session, p, "jobId"), {"history": history or None}


def fold_node_definition(session: str, p: Patch) -> Iterable[tuple[str, Key, Patch]]:
    yield "nodes", _entity_key(session, p, "nodeId"), {
        "node_ip": _str(p.get("nodeIpAddress")),
        "labels": _json(p.get("labels")),
        "start_ns": parse_ts_ns(p.get("startTimestamp")),
        "hostname": _str(p.get("hostname")),
        "node_name": _str(p.get("nodeName")),
        "instance_id": _str(p.get("instanceId")),
        "instance_type_name": _str(p.get("instanceTypeName")),
        "defined": True,
    }


def fold_node_lifecycle(session: str, p: Patch) -> Iterable[tuple[str, Key, Patch]]:
    history = []
    for t in _transitions(p):
        death = t.get("deathInfo") if isinstance(t.get("deathInfo"), dict) else {}
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
    yield "workers", _entity_key(session, p, "workerId"), {
        "node_id": b64_to_hex(p.get("nodeId")),
        "worker_type": _str(p.get("workerType")),
        "pid": to_int(p.get("pid")),
        "defined": True,
    }


def fold_worker_lifecycle(session: str, p: Patch) -> Iterable[tuple[str, Key, Patch]]:
    history = []
    for t in _transitions(p):
        death = t.get("deathInfo") if isinstance(t.get("deathInfo"), dict) else {}
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
    yield "workers", _entity_key(session, p, "workerId"), {
        "job_id": b64_to_hex(p.get("jobId")),
        "history": history or None,
    }


HANDLERS: dict[str, tuple[str, Callable[[str, Patch], Iterable[tuple[str, Key, Patch]]]]] = {
    "TASK_DEFINITION_EVENT": ("taskDefinitionEvent", fold_task_definition),
    "ACTOR_TASK_DEFINITION_EVENT": ("actorTaskDefinitionEvent", fold_actor_task_definition),
    "TASK_LIFECYCLE_EVENT": ("taskLifecycleEvent", fold_task_lifecycle),
    "TASK_PROFILE_EVENT": ("taskProfileEvents", fold_task_profile),
    "ACTOR_DEFINITION_EVENT": ("actorDefinitionEvent", fold_actor_definition),
    "ACTOR_LIFECYCLE_EVENT": ("actorLifecycleEvent", fold_actor_lifecycle),
    "DRIVER_JOB_DEFINITION_EVENT": ("driverJobDefinitionEvent", fold_job_definition),
    "DRIVER_JOB_LIFECYCLE_EVENT": ("driverJobLifecycleEvent", fold_job_lifecycle),
    "NODE_DEFINITION_EVENT": ("nodeDefinitionEvent", fold_node_definition),
    "NODE_LIFECYCLE_EVENT": ("nodeLifecycleEvent", fold_node_lifecycle),
    "WORKER_DEFINITION_EVENT": ("workerDefinitionEvent", fold_worker_definition),
    "WORKER_LIFECYCLE_EVENT": ("workerLifecycleEvent", fold_worker_lifecycle),
}
