"""Ray's event stream parsed inside DuckDB: the SQL that turns POST bodies into events, and task events into rows.

A busy session is almost all task events (definition, lifecycle, profile: several per task attempt), so those are
parsed, validated and folded by DuckDB's JSON reader and SQL, in the same statements for a group of POSTs whatever
its size, never an object per event in Python. The cluster-level entities (nodes, jobs, workers, actors: a few
events per process) keep their readable Python folds in :mod:`raysight.ingest.ray_events`. This module is SQL text
only; the store runs it (``store/store.py``), over these relations:

- ``incoming(post, ord, label, run_id, body)``: one row per event, its JSON text (from :data:`EXPLODE_POSTS`, or
  the raw events themselves when reindexing);
- ``batch_events``: :data:`PARSE_EVENTS` over ``incoming``: the envelope, the task payloads, ``reason``, why
  the event is quarantined (NULL when it is well formed);
- ``fresh`` (:data:`FRESH_EVENTS`): the well-formed events the store had not seen, with their task keys;
- ``fresh_transitions`` and ``fresh_profile`` (:data:`TRANSITIONS`, :data:`PROFILE_ENTRIES`): one row per state
  transition and profile entry of the fresh task events, for the append tables and for :data:`TASK_ROWS`, which
  gives the tasks columns each fresh event, transition and entry sets.
"""

from __future__ import annotations

import orjson

_TRANSITIONS = '[{"state": "VARCHAR", "timestamp": "VARCHAR"}]'
_PROFILE_ENTRIES = '[{"eventName": "VARCHAR", "startTime": "VARCHAR", "endTime": "VARCHAR", "extraData": "VARCHAR"}]'

# Ray's IDs are standard base64; the store shows them as lowercase hex, and an all-0xff ID means "none".
MACROS = [
    "CREATE OR REPLACE MACRO ray_nil(h) AS CASE WHEN ltrim(h, 'f') <> '' THEN h END",
    "CREATE OR REPLACE MACRO ray_id(s) AS ray_nil(lower(hex(try(from_base64(nullif(s, ''))))))",
    "CREATE OR REPLACE MACRO bad_id(s) AS (s <> '' AND try(from_base64(s)) IS NULL)",
    # proto3 JSON: int64 as a string, int32 as a number. A number that overflows its column quarantines the event;
    # anything else that is not a number is read as absent (NULL)
    "CREATE OR REPLACE MACRO bad_int32(s) AS "
    "coalesce(isfinite(TRY_CAST(s AS DOUBLE)) AND TRY_CAST(s AS INTEGER) IS NULL, false)",
    "CREATE OR REPLACE MACRO bad_int64(s) AS "
    "coalesce(isfinite(TRY_CAST(s AS DOUBLE)) AND TRY_CAST(s AS BIGINT) IS NULL, false)",
    # RFC 3339 UTC with up to nanosecond digits to epoch ns; NULL when malformed or past what 64 bits hold (2262)
    "CREATE OR REPLACE MACRO ray_ns_of(secs, frac) AS "
    "CASE WHEN secs BETWEEN -9223372035 AND 9223372035 THEN secs * 1000000000 + TRY_CAST(frac AS BIGINT) END",
    "CREATE OR REPLACE MACRO ray_ts_ns(s) AS CASE WHEN length(s) >= 20 THEN ray_ns_of("
    "epoch_ms(try_strptime(left(s, 19), '%Y-%m-%dT%H:%M:%S')) // 1000, "
    "rpad(left(split_part(rtrim(s, 'Z'), '.', 2), 9), 9, '0')) END",
    # what kind of JSON value, in JSON's own words
    "CREATE OR REPLACE MACRO json_kind(j) AS CASE json_type(j) WHEN 'VARCHAR' THEN 'a string' "
    "WHEN 'ARRAY' THEN 'an array' WHEN 'OBJECT' THEN 'an object' WHEN 'BOOLEAN' THEN 'a boolean' "
    "WHEN 'NULL' THEN 'null' ELSE 'a number' END",
    # a JSON string's value; NULL for any other JSON value
    "CREATE OR REPLACE MACRO json_str(j) AS CASE WHEN left(j, 1) = '\"' THEN json_extract_string(j, '$') END",
    # the human text inside an ActorDeathCause-like object (an error's nested actorDiedError and kin)
    "CREATE OR REPLACE MACRO death_text(j) AS coalesce("
    "list_filter(json_extract_string(j, '$.*.formattedExceptionString'), lambda m: m <> '')[1], "
    "list_filter(json_extract_string(j, '$.*.errorMessage'), lambda m: m <> '')[1], "
    "nullif(json_extract_string(j, '$.errorMessage'), ''))",
    # (module, Class.function) from a FunctionDescriptor of any of Ray's languages
    "CREATE OR REPLACE MACRO func_name(d) AS CASE WHEN nullif(d.className, '') IS NOT NULL "
    "AND nullif(d.functionName, '') IS NOT NULL THEN d.className || '.' || d.functionName "
    "ELSE coalesce(nullif(d.functionName, ''), nullif(d.className, '')) END",
    # a task's state transitions and profile events, read from the JSON kept in the event's struct
    f"CREATE OR REPLACE MACRO transitions_of(j) AS from_json(coalesce(j, '[]'), '{_TRANSITIONS}')",
    f"CREATE OR REPLACE MACRO profile_entries_of(j) AS from_json(coalesce(j, '[]'), '{_PROFILE_ENTRIES}')",
    # why one of a task's state transitions is malformed (the first such), or NULL
    "CREATE OR REPLACE MACRO bad_transition(j) AS list_filter(list_transform(transitions_of(j), lambda t: "
    "CASE WHEN NOT coalesce(regexp_full_match(t.state, '[A-Z][A-Z_]*'), false) "
    "THEN 'a state transition has no state' WHEN ray_ts_ns(t.timestamp) IS NULL "
    "THEN 'a state transition has a bad timestamp: ' || coalesce(t.timestamp, 'none') END), "
    "lambda why: why IS NOT NULL)[1]",
    "CREATE OR REPLACE MACRO descriptor(f) AS "
    "coalesce(f.pythonFunctionDescriptor, f.javaFunctionDescriptor, f.cppFunctionDescriptor)",
]

_DESCRIPTOR = {"moduleName": "VARCHAR", "className": "VARCHAR", "functionName": "VARCHAR"}
_FUNCTION = {f"{lang}FunctionDescriptor": _DESCRIPTOR for lang in ("python", "java", "cpp")}
_DEFINITION = {
    "taskId": "VARCHAR",
    "taskAttempt": "VARCHAR",
    "jobId": "VARCHAR",
    "requiredResources": "JSON",
    "parentTaskId": "VARCHAR",
    "placementGroupId": "VARCHAR",
    "serializedRuntimeEnv": "VARCHAR",
    "language": "VARCHAR",
    "labelSelector": "JSON",
    "callSite": "VARCHAR",
}
# The shape DuckDB reads each event into. Leaves that must be checked (numbers, nested lists) are read as text or
# JSON and validated below; everything else an event carries is kept in its raw body only.
STRUCTURE = {
    "eventId": "VARCHAR",
    "sessionName": "JSON",
    "eventType": "JSON",
    "sourceType": "VARCHAR",
    "timestamp": "VARCHAR",
    "nodeId": "VARCHAR",
    "taskDefinitionEvent": {**_DEFINITION, "taskFunc": _FUNCTION, "taskName": "VARCHAR", "taskType": "VARCHAR"},
    "actorTaskDefinitionEvent": {
        **_DEFINITION,
        "actorFunc": _FUNCTION,
        "actorTaskName": "VARCHAR",
        "actorId": "VARCHAR",
    },
    "taskLifecycleEvent": {
        "taskId": "VARCHAR",
        "taskAttempt": "VARCHAR",
        "jobId": "VARCHAR",
        "nodeId": "VARCHAR",
        "workerId": "VARCHAR",
        "workerPid": "VARCHAR",
        "stateTransitions": "JSON",
        "rayErrorInfo": "JSON",
        "taskLogInfo": {
            name: "VARCHAR"
            for name in ("stdoutFile", "stderrFile", "stdoutStart", "stdoutEnd", "stderrStart", "stderrEnd")
        },
        "isDebuggerPaused": "VARCHAR",
        "actorReprName": "VARCHAR",
    },
    "taskProfileEvents": {
        "taskId": "VARCHAR",
        "attemptNumber": "VARCHAR",
        "jobId": "VARCHAR",
        "profileEvents": {
            "componentType": "VARCHAR",
            "componentId": "VARCHAR",
            "nodeIpAddress": "VARCHAR",
            "events": "JSON",
        },
    },
}

# event type -> (payload field, ID fields, 32-bit and 64-bit number fields) of the task payloads
TASK_PAYLOADS: dict[str, tuple[str, list[str], list[str], list[str]]] = {
    "TASK_DEFINITION_EVENT": (
        "taskDefinitionEvent",
        ["taskId", "jobId", "parentTaskId", "placementGroupId"],
        ["taskAttempt"],
        [],
    ),
    "ACTOR_TASK_DEFINITION_EVENT": (
        "actorTaskDefinitionEvent",
        ["taskId", "jobId", "parentTaskId", "placementGroupId", "actorId"],
        ["taskAttempt"],
        [],
    ),
    "TASK_LIFECYCLE_EVENT": (
        "taskLifecycleEvent",
        ["taskId", "jobId", "nodeId", "workerId"],
        ["taskAttempt", "workerPid"],
        [f"taskLogInfo.{s}{e}" for s in ("stdout", "stderr") for e in ("Start", "End")],
    ),
    "TASK_PROFILE_EVENT": (
        "taskProfileEvents",
        ["taskId", "jobId", "profileEvents.componentId"],
        ["attemptNumber"],
        [],
    ),
}

EXPLODE_POSTS = """
    SELECT post, label, run_id, unnest(range(len(events))) AS ord, coalesce(unnest(events), 'null') AS body
    FROM (SELECT *, from_json(body, '["JSON"]') AS events FROM staged_posts)"""


def _sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _first_bad(fields: list[tuple[str, str]], bad: str, message: str) -> str:
    """SQL: ``message`` for the first of ``fields`` (``x.name``, ``x.value``) that macro ``bad`` rejects, or NULL."""
    items = ", ".join(f"{{'name': {_sql_str(name)}, 'value': {value}}}" for name, value in fields)
    return f"list_transform(list_filter([{items}], lambda x: {bad}(x.value)), lambda x: {message})[1]"


def _type_reason(event_type: str) -> str:
    """SQL: why a well-enveloped event of a task type is malformed, or NULL (one list check per kind of field)."""
    payload, ids, ints32, ints64 = TASK_PAYLOADS[event_type]
    p = f"j.{payload}"
    fields = [_first_bad([(name, f"{p}.{name}") for name in ids], "bad_id", "'not a base64 ID: ' || left(x.value, 60)")]
    for bits, names in ((32, ints32), (64, ints64)):
        if names:
            fields.append(
                _first_bad(
                    [(name, f"{p}.{name}") for name in names],
                    f"bad_int{bits}",
                    f"x.name || ' ' || x.value || ' does not fit in {bits} bits'",
                )
            )
    if event_type == "TASK_LIFECYCLE_EVENT":
        transitions = f"{p}.stateTransitions"
        fields += [
            f"CASE WHEN json_type({transitions}) <> 'ARRAY' THEN 'stateTransitions is not a list' END",
            f"bad_transition({transitions})",
        ]
    if event_type == "TASK_PROFILE_EVENT":
        entries = f"{p}.profileEvents.events"
        fields += [
            f"CASE WHEN {p}.profileEvents IS NULL THEN 'profileEvents is not an object' END",
            f"CASE WHEN json_type({entries}) <> 'ARRAY' THEN 'profileEvents.events is not a list' END",
            f"CASE WHEN list_bool_or(list_transform(profile_entries_of({entries}), "
            "lambda e: bad_int64(e.startTime) OR bad_int64(e.endTime))) "
            "THEN 'a profile event time does not fit in 64 bits' END",
        ]
    return (
        f"CASE WHEN {p} IS NULL THEN {_sql_str(f'{event_type} has no {payload} object')} "
        f"WHEN nullif({p}.taskId, '') IS NULL THEN 'taskId is missing' "
        f"ELSE coalesce({', '.join(fields)}) END"
    )


def _parse_events() -> str:
    structure = orjson.dumps(STRUCTURE).decode()
    by_type = " ".join(f"WHEN {_sql_str(t)} THEN {_type_reason(t)}" for t in TASK_PAYLOADS)
    return f"""
    SELECT (post::BIGINT << 32) + ord AS seq, label, run_id, body, strlen(body) AS bytes, j, session, event_type,
           CASE WHEN ray_id(j.eventId) IS NULL THEN 'content:' || md5(body) ELSE ray_id(j.eventId) END AS event_id,
           ray_ts_ns(j.timestamp) AS ts_ns,
           CASE
               WHEN left(body, 1) <> '{{' THEN 'event is ' || json_kind(body) || ', not an object'
               WHEN session IS NULL OR session = '' THEN 'sessionName is missing or not a string'
               WHEN event_type IS NULL OR event_type = '' THEN 'eventType is missing or not a string'
               WHEN bad_id(j.eventId) THEN 'not a base64 ID: ' || left(j.eventId, 60)
               ELSE CASE event_type {by_type} END
           END AS reason
    FROM (
        SELECT *, json_str(j.sessionName) AS session, json_str(j.eventType) AS event_type
        FROM (SELECT *, from_json(body, '{structure}') AS j FROM incoming)
    )"""


PARSE_EVENTS = _parse_events()


def _own_payload(field: str, profile_field: str | None = None) -> str:
    """SQL: ``field`` of the event's own task payload (by its type: an event may carry stray keys), else NULL."""
    paths = {
        t: f"{payload}.{profile_field if t == 'TASK_PROFILE_EVENT' and profile_field else field}"
        for t, (payload, *_) in TASK_PAYLOADS.items()
    }
    return "CASE event_type " + " ".join(f"WHEN '{t}' THEN j.{path}" for t, path in paths.items()) + " END"


# ``fresh`` from the well-formed events of ``batch_events`` (joined to those first seen), with each task event's key
FRESH_EVENTS = f"""
    SELECT seq, session, event_id, event_type, bytes, j,
           ray_id({_own_payload("taskId")}) AS task_id,
           coalesce(TRY_CAST({_own_payload("taskAttempt", "attemptNumber")} AS INTEGER), 0) AS attempt,
           ray_id({_own_payload("jobId")}) AS job_id
    FROM batch_events {{join}} WHERE reason IS NULL"""

# One row per state transition and per profile entry of the fresh task events (append tables and task columns).
TRANSITIONS = """
    SELECT session, task_id, attempt, seq, ray_ts_ns(t.timestamp) AS ts, t.state AS state
    FROM (SELECT *, unnest(transitions_of(j.taskLifecycleEvent.stateTransitions)) AS t
          FROM fresh WHERE event_type = 'TASK_LIFECYCLE_EVENT')"""
PROFILE_ENTRIES = """
    SELECT session, task_id, attempt, seq,
           TRY_CAST(e.startTime AS BIGINT) AS start_ns, TRY_CAST(e.endTime AS BIGINT) AS end_ns,
           coalesce(e.eventName, '') AS name, nullif(e.extraData, '') AS extra,
           nullif(p.componentType, '') AS component, ray_id(p.componentId) AS component_id,
           nullif(p.nodeIpAddress, '') AS node_ip
    FROM (SELECT *, j.taskProfileEvents.profileEvents AS p,
                 unnest(profile_entries_of(j.taskProfileEvents.profileEvents.events)) AS e
          FROM fresh WHERE event_type = 'TASK_PROFILE_EVENT')
    WHERE coalesce(e.eventName, e.startTime, e.endTime, e.extraData) IS NOT NULL  -- not an object: skipped"""


# One row per fresh task event, state transition and profile entry, with the tasks columns each sets (the store
# merges a key's rows by the columns' rules). Only the event's own payload is read (``d``, ``a``, ``l``, ``p``; the
# others are NULL, and so are their fields): one SELECT serves all four task event types.
TASK_ROWS = """
    SELECT session, task_id, attempt, seq, job_id,
           CASE event_type WHEN 'TASK_DEFINITION_EVENT' THEN coalesce(nullif(d.taskType, ''), 'NORMAL_TASK')
                           WHEN 'ACTOR_TASK_DEFINITION_EVENT' THEN 'ACTOR_TASK' END AS type,
           CASE WHEN defined THEN coalesce(nullif(d.taskName, ''), nullif(a.actorTaskName, ''), func, '') END AS name,
           func AS func_or_class_name, nullif(f.moduleName, '') AS module_name,
           nullif(coalesce(d.language, a.language), '') AS language,
           CASE WHEN d.taskType = 'ACTOR_CREATION_TASK' THEN substr(task_id, 17) ELSE ray_id(a.actorId) END
               AS actor_id,
           ray_id(coalesce(d.parentTaskId, a.parentTaskId)) AS parent_task_id,
           ray_id(coalesce(d.placementGroupId, a.placementGroupId)) AS placement_group_id,
           nullif(nullif(coalesce(d.requiredResources, a.requiredResources), '{}'), '[]') AS required_resources,
           nullif(coalesce(d.serializedRuntimeEnv, a.serializedRuntimeEnv), '') AS runtime_env,
           nullif(coalesce(d.callSite, a.callSite), '') AS call_site,
           nullif(nullif(coalesce(d.labelSelector, a.labelSelector), '{}'), '[]') AS label_selector, defined,
           ray_id(l.nodeId) AS node_id, ray_id(l.workerId) AS worker_id,
           nullif(TRY_CAST(l.workerPid AS INTEGER), 0) AS worker_pid,
           nullif(l.taskLogInfo.stdoutFile, '') AS stdout_file, nullif(l.taskLogInfo.stderrFile, '') AS stderr_file,
           TRY_CAST(l.taskLogInfo.stdoutStart AS BIGINT) AS stdout_start,
           TRY_CAST(l.taskLogInfo.stdoutEnd AS BIGINT) AS stdout_end,
           TRY_CAST(l.taskLogInfo.stderrStart AS BIGINT) AS stderr_start,
           TRY_CAST(l.taskLogInfo.stderrEnd AS BIGINT) AS stderr_end,
           nullif(json_extract_string(l.rayErrorInfo, '$.errorType'), '') AS error_type,
           coalesce(nullif(json_extract_string(l.rayErrorInfo, '$.errorMessage'), ''),
                    death_text(json_extract(l.rayErrorInfo, '$.runtimeEnvSetupFailedError')),
                    death_text(json_extract(l.rayErrorInfo, '$.actorDiedError')),
                    death_text(json_extract(l.rayErrorInfo, '$.actorUnavailableError'))) AS error_message,
           CASE WHEN json_type(l.rayErrorInfo) = 'OBJECT' AND l.rayErrorInfo <> '{}' THEN l.rayErrorInfo END
               AS error_detail,
           TRY_CAST(l.isDebuggerPaused AS BOOLEAN) AS is_debugger_paused,
           nullif(l.actorReprName, '') AS actor_repr_name,
           CASE WHEN p.componentType = 'worker' THEN ray_id(p.componentId) END AS exec_worker_id,
           CASE WHEN p.componentType = 'worker' THEN nullif(p.nodeIpAddress, '') END AS exec_node_ip
    FROM (
        SELECT *, func_name(f) AS func
        FROM (SELECT *, descriptor(coalesce(d.taskFunc, a.actorFunc)) AS f,
                     CASE WHEN d IS NOT NULL OR a IS NOT NULL THEN true END AS defined
              FROM (SELECT *,
                           CASE WHEN event_type = 'TASK_DEFINITION_EVENT' THEN j.taskDefinitionEvent END AS d,
                           CASE WHEN event_type = 'ACTOR_TASK_DEFINITION_EVENT' THEN j.actorTaskDefinitionEvent END
                               AS a,
                           CASE WHEN event_type = 'TASK_LIFECYCLE_EVENT' THEN j.taskLifecycleEvent END AS l,
                           CASE WHEN event_type = 'TASK_PROFILE_EVENT' THEN j.taskProfileEvents.profileEvents END
                               AS p
                    FROM fresh WHERE task_id IS NOT NULL))
    )
    UNION ALL BY NAME
    SELECT session, task_id, attempt, seq, ts AS first_ns,
           CASE WHEN state = 'PENDING_ARGS_AVAIL' THEN ts END AS pending_ns,
           CASE WHEN state = 'RUNNING' THEN ts END AS start_ns,
           {'terminal': state IN ('FINISHED', 'FAILED'), 'ts': ts, 'state': state} AS state_key
    FROM fresh_transitions
    UNION ALL BY NAME
    SELECT session, task_id, attempt, seq,
           CASE WHEN starts_with(name, 'task::') THEN substr(name, 7) END AS profile_name,
           CASE WHEN name = 'task:execute' THEN start_ns END AS exec_start_ns,
           CASE WHEN name = 'task:execute' THEN end_ns END AS executed_ns
    FROM fresh_profile"""
