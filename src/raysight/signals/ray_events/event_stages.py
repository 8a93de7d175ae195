"""The stages a group of Ray's events goes through inside DuckDB: POST bodies to events, and task events to rows.

A busy session is almost all task events (definition, lifecycle, profile: several per task attempt), so those are
parsed, validated and folded by DuckDB's JSON reader and SQL, in the same statements for a group of POSTs whatever
its size, never an object per event in Python. The cluster-level entities (nodes, jobs, workers, actors: a few
events per process) keep their readable Python folds in :mod:`.parse`. The signal's writes run these stages
(``apply.py``), in the order of :mod:`.pipeline`, each making the relation it names:

- :data:`POSTS` (``incoming``): one row per event, its JSON text, from the POST bodies (:data:`POSTED`, an Arrow table
  the store registers); :data:`RAW_CHUNK` makes it of the raw events themselves when reindexing;
- :data:`EVENTS` (``batch_events``): every event parsed once: the envelope, the task columns (:data:`TASK_COLUMNS`),
  ``reason``, why the event is quarantined (NULL when it is well formed);
- :data:`SEEN` and :data:`FRESH`: the well-formed events stored before, and those the store had not seen;
- :data:`TRANSITIONS` and :data:`PROFILE`: one row per state transition and profile entry of the fresh task events,
  for the append tables and for :data:`TASKS`, the tasks columns each fresh event, transition and entry sets, merged
  into one row per task attempt;
- :data:`SESSIONS`: each session's label, run ID, span and counts.
"""

from __future__ import annotations

import orjson

from raysight.signals.ray_events.conversions import RFC3339_UTC
from raysight.signals.ray_events.parse import APPEND_TABLES, HANDLERS
from raysight.signals.ray_events.parse import TASKS as TASK_TABLE
from raysight.sql_literals import sql_in, sql_list, sql_str
from raysight.store.statements import Macro, Query, Stage

# A task attempt's end states, as Ray reports them: the one definition (the store's inference reads it too)
TERMINAL_STATES = ("FINISHED", "FAILED")
TERMINAL_SQL = sql_in(TERMINAL_STATES)

_TRANSITIONS = '[{"state": "VARCHAR", "timestamp": "VARCHAR"}]'
_PROFILE_ENTRIES = '[{"eventName": "VARCHAR", "startTime": "VARCHAR", "endTime": "VARCHAR", "extraData": "VARCHAR"}]'

# Ray's IDs are standard base64; the store shows them as lowercase hex, and an all-0xff ID means "none".
MACROS = (
    Macro("ray_nil", ("h",), "CASE WHEN ltrim(h, 'f') <> '' THEN h END"),
    # the hex of a base64 text as it is (NULL when it is not base64), then as an ID (NULL for none)
    Macro("raw_hex", ("s",), "lower(hex(try(from_base64(nullif(s, '')))))"),
    Macro("ray_id", ("s",), "ray_nil(raw_hex(s))"),
    # proto3 JSON: int64 as a string, int32 as a number. A number that overflows its column quarantines the event;
    # anything else that is not a number is read as absent (NULL)
    Macro("bad_int32", ("s",), "coalesce(TRY_CAST(s AS INTEGER) IS NULL AND isfinite(TRY_CAST(s AS DOUBLE)), false)"),
    Macro("bad_int64", ("s",), "coalesce(TRY_CAST(s AS BIGINT) IS NULL AND isfinite(TRY_CAST(s AS DOUBLE)), false)"),
    # RFC 3339 UTC with up to nanosecond digits to epoch ns; NULL when malformed or past what 64 bits hold (2262)
    # (the shape is checked first: DuckDB's cast also reads a space for the T, 24:00, a missing zone, "BC", …)
    Macro(
        "ray_ts_ns",
        ("s",),
        f"CASE WHEN regexp_full_match(s, '{RFC3339_UTC}') THEN epoch_ns(TRY_CAST(left(s, -1) AS TIMESTAMP_NS)) END",
    ),
    # what kind of JSON value, in JSON's own words
    Macro(
        "json_kind",
        ("j",),
        "CASE json_type(j) WHEN 'VARCHAR' THEN 'a string' WHEN 'ARRAY' THEN 'an array' WHEN 'OBJECT' THEN 'an object' "
        "WHEN 'BOOLEAN' THEN 'a boolean' WHEN 'NULL' THEN 'null' ELSE 'a number' END",
    ),
    # a JSON string's value; NULL for any other JSON value
    Macro("json_str", ("j",), "CASE WHEN left(j, 1) = '\"' THEN json_extract_string(j, '$') END"),
    # the human text inside an ActorDeathCause-like object (an error's nested actorDiedError and kin)
    Macro(
        "death_text",
        ("j",),
        "coalesce(list_filter(json_extract_string(j, '$.*.formattedExceptionString'), lambda m: m <> '')[1], "
        "list_filter(json_extract_string(j, '$.*.errorMessage'), lambda m: m <> '')[1], "
        "nullif(json_extract_string(j, '$.errorMessage'), ''))",
    ),
    # (module, Class.function) from a FunctionDescriptor of any of Ray's languages
    Macro(
        "func_name",
        ("d",),
        "CASE WHEN nullif(d.className, '') IS NOT NULL AND nullif(d.functionName, '') IS NOT NULL "
        "THEN d.className || '.' || d.functionName ELSE coalesce(nullif(d.functionName, ''), nullif(d.className, '')) "
        "END",
    ),
    Macro(
        "descriptor", ("f",), "coalesce(f.pythonFunctionDescriptor, f.javaFunctionDescriptor, f.cppFunctionDescriptor)"
    ),
)

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

# event type -> the field of its task payload
TASK_PAYLOADS = {
    "TASK_DEFINITION_EVENT": "taskDefinitionEvent",
    "ACTOR_TASK_DEFINITION_EVENT": "actorTaskDefinitionEvent",
    "TASK_LIFECYCLE_EVENT": "taskLifecycleEvent",
    "TASK_PROFILE_EVENT": "taskProfileEvents",
}

POSTED = "staged_posts"  # the POST bodies (numbered: post, label, run_id, body), an Arrow table the store registers
# `incoming(post, ord, label, run_id, body)`: one row per event, its JSON text; two sources (a table: parsing a body
# while its events are parsed would hold two parsed copies of a huge event at once)
POSTS = Stage(
    "incoming",
    f"""
    SELECT post, label, run_id, unnest(range(len(events))) AS ord, coalesce(unnest(events), 'null') AS body
    FROM (SELECT *, from_json(body, '["JSON"]') AS events FROM {POSTED})""",
    about="the events of the POST bodies",
)
RAW_CHUNK = Stage(
    POSTS.name,
    """SELECT 0 AS post, rowid AS ord, NULL::VARCHAR AS label, NULL::VARCHAR AS run_id, body FROM raw_events
       WHERE rowid >= getvariable('chunk_start') AND rowid < getvariable('chunk_end')""",
    view=True,
    about="a chunk of the stored raw events (reindex)",
)


def _by_type(values: dict[str, str], default: str = "NULL") -> str:
    """SQL: the value for the event's type (``event_type``), one per task event type."""
    return (
        "CASE event_type " + " ".join(f"WHEN {sql_str(t)} THEN {v}" for t, v in values.items()) + f" ELSE {default} END"
    )


# The four task event types by a short name, and the payload each carries its fields in.
_KINDS = dict(zip(("d", "a", "l", "w"), TASK_PAYLOADS))


def _own(**paths: str) -> str:
    """SQL: a field of the event's own payload, ``paths`` giving its path within the payload of each kind that has it
    (``d``: task definition, ``a``: actor task definition, ``l``: lifecycle, ``w``: profile). Only the payload an
    event's type names is read: an event may carry stray keys."""
    return _by_type({_KINDS[k]: f"j.{TASK_PAYLOADS[_KINDS[k]]}.{path}" for k, path in paths.items()})


def _all(path: str) -> dict[str, str]:
    return dict.fromkeys(("d", "a", "l", "w"), path)


def _defined(path: str) -> dict[str, str]:
    return dict.fromkeys(("d", "a"), path)


# The fields of a task event's own payload that are read, as columns (``…_text``: text still to be converted).
_FIELDS = {
    "has_payload": _by_type({t: f"j.{payload} IS NOT NULL" for t, payload in TASK_PAYLOADS.items()}),
    "task_text": _own(**_all("taskId")),
    "attempt_text": _own(**_defined("taskAttempt"), l="taskAttempt", w="attemptNumber"),
    "job_text": _own(**_all("jobId")),
    "parent_text": _own(**_defined("parentTaskId")),
    "pg_text": _own(**_defined("placementGroupId")),
    "actor_text": _own(a="actorId"),
    "node_text": _own(l="nodeId"),
    "worker_text": _own(l="workerId"),
    "component_text": _own(w="profileEvents.componentId"),
    "task_type": _own(d="taskType"),
    "task_name": _own(d="taskName", a="actorTaskName"),
    "function": _own(d="taskFunc", a="actorFunc"),
    "language_text": _own(**_defined("language")),
    "resources_json": _own(**_defined("requiredResources")),
    "runtime_env_text": _own(**_defined("serializedRuntimeEnv")),
    "call_site_text": _own(**_defined("callSite")),
    "label_selector_json": _own(**_defined("labelSelector")),
    "pid_text": _own(l="workerPid"),
    "transitions_json": _own(l="stateTransitions"),
    "error_json": _own(l="rayErrorInfo"),
    "log_info": _own(l="taskLogInfo"),
    "debugger_text": _own(l="isDebuggerPaused"),
    "repr_text": _own(l="actorReprName"),
    "profile_source": _own(w="profileEvents"),
}
# A task event's ID fields (``…_text`` above), in the order they are checked.
_ID_FIELDS = ("task", "job", "parent", "pg", "actor", "node", "worker", "component")
_INT32_FIELDS = [
    (f"CASE WHEN event_type = '{_KINDS['w']}' THEN 'attemptNumber' ELSE 'taskAttempt' END", "attempt_text"),
    ("'workerPid'", "pid_text"),
]
_INT64_FIELDS = [(f"'taskLogInfo.{s}{e}'", f"log_info.{s}{e}") for s in ("stdout", "stderr") for e in ("Start", "End")]
_PAYLOAD_NAMES = {t: sql_str(payload) for t, payload in TASK_PAYLOADS.items()}


def _checks() -> str:
    """SQL: the WHEN clauses of a CASE naming the first malformed field of a task event, in the order checked."""
    checks = [(f"{k}_text <> '' AND {k}_hex IS NULL", f"'not a base64 ID: ' || left({k}_text, 60)") for k in _ID_FIELDS]
    for bits, fields in ((32, _INT32_FIELDS), (64, _INT64_FIELDS)):
        checks += [
            (f"bad_int{bits}({value})", f"{name} || ' ' || {value} || ' does not fit in {bits} bits'")
            for name, value in fields
        ]
    checks += [
        ("left(transitions_json, 1) <> '['", "'stateTransitions is not a list'"),
        ("bad_transition IS NOT NULL", "bad_transition"),
        (f"event_type = '{_KINDS['w']}' AND profile_source IS NULL", "'profileEvents is not an object'"),
        ("left(profile_source.events, 1) <> '['", "'profileEvents.events is not a list'"),
        (
            "list_bool_or(list_transform(profile_entries, lambda e: bad_int64(e.startTime) OR bad_int64(e.endTime)))",
            "'a profile event time does not fit in 64 bits'",
        ),
    ]
    return "\n        ".join(f"WHEN {when} THEN {why}" for when, why in checks)


# Why a task event is malformed (NULL when it is well formed), over the conversions below: each field is parsed
# once, and the reason and the folded columns read the same parsed value.
_TASK_REASON = f"""CASE
        WHEN NOT has_payload THEN event_type || ' has no ' || {_by_type(_PAYLOAD_NAMES)} || ' object'
        WHEN nullif(task_text, '') IS NULL THEN 'taskId is missing'
        {_checks()}
    END"""
# why one of a lifecycle event's state transitions is malformed (the first such), or NULL
_BAD_TRANSITION = """list_filter(list_transform(transitions, lambda t: CASE
    WHEN NOT coalesce(regexp_full_match(t.state, '[A-Z][A-Z_]*'), false) THEN 'a state transition has no state'
    WHEN t.ts IS NULL THEN 'a state transition has a bad timestamp: ' || coalesce(t.timestamp, 'none') END),
    lambda why: why IS NOT NULL)[1]"""

# The tasks columns a task event sets, over the parsed fields (NULL where its type does not set them).
TASK_COLUMNS = {
    "job_id": "ray_nil(job_hex)",
    "type": _by_type({_KINDS["d"]: "coalesce(nullif(task_type, ''), 'NORMAL_TASK')", _KINDS["a"]: "'ACTOR_TASK'"}),
    "name": "CASE WHEN defined THEN coalesce(nullif(task_name, ''), func, '') END",
    "func_or_class_name": "func",
    "module_name": "nullif(f.moduleName, '')",
    "language": "nullif(language_text, '')",
    "actor_id": "CASE WHEN task_type = 'ACTOR_CREATION_TASK' THEN substr(ray_nil(task_hex), 17) "
    "ELSE ray_nil(actor_hex) END",
    "parent_task_id": "ray_nil(parent_hex)",
    "placement_group_id": "ray_nil(pg_hex)",
    "required_resources": "nullif(nullif(resources_json, '{}'), '[]')",
    "runtime_env": "nullif(runtime_env_text, '')",
    "call_site": "nullif(call_site_text, '')",
    "label_selector": "nullif(nullif(label_selector_json, '{}'), '[]')",
    "defined": "defined",
    "node_id": "ray_nil(node_hex)",
    "worker_id": "ray_nil(worker_hex)",
    "worker_pid": "nullif(TRY_CAST(pid_text AS INTEGER), 0)",
    "stdout_file": "nullif(log_info.stdoutFile, '')",
    "stderr_file": "nullif(log_info.stderrFile, '')",
    **{
        f"{s}_{e.lower()}": f"TRY_CAST(log_info.{s}{e} AS BIGINT)"
        for s in ("stdout", "stderr")
        for e in ("Start", "End")
    },
    "error_type": "nullif(json_extract_string(error_json, '$.errorType'), '')",
    "error_message": """coalesce(nullif(json_extract_string(error_json, '$.errorMessage'), ''),
        death_text(json_extract(error_json, '$.runtimeEnvSetupFailedError')),
        death_text(json_extract(error_json, '$.actorDiedError')),
        death_text(json_extract(error_json, '$.actorUnavailableError')))""",
    "error_detail": "CASE WHEN left(error_json, 1) = '{' AND error_json <> '{}' THEN error_json END",
    "is_debugger_paused": "TRY_CAST(debugger_text AS BOOLEAN)",
    "actor_repr_name": "nullif(repr_text, '')",
    "exec_worker_id": "CASE WHEN profile_source.componentType = 'worker' THEN ray_nil(component_hex) END",
    "exec_node_ip": "CASE WHEN profile_source.componentType = 'worker' "
    "THEN nullif(profile_source.nodeIpAddress, '') END",
}


def _parse_events() -> str:
    structure = orjson.dumps(STRUCTURE).decode()
    fields = ",\n                           ".join(f"{sql} AS {name}" for name, sql in _FIELDS.items())
    hexes = ", ".join(f"raw_hex({k}_text) AS {k}_hex" for k in _ID_FIELDS)
    columns = ",\n           ".join(f"{sql} AS {name}" for name, sql in TASK_COLUMNS.items())
    return f"""
    SELECT seq, label, run_id, body, bytes, session, event_type, event_id,
           ray_ts_ns(j.timestamp) AS ts_ns,
           j.sourceType AS source_type, ray_id(j.nodeId) AS event_node_id,
           CASE
               WHEN left(body, 1) <> '{{' THEN 'event is ' || json_kind(body) || ', not an object'
               WHEN session IS NULL OR session = '' THEN 'sessionName is missing or not a string'
               WHEN event_type IS NULL OR event_type = '' THEN 'eventType is missing or not a string'
               WHEN j.eventId <> '' AND event_hex IS NULL THEN 'not a base64 ID: ' || left(j.eventId, 60)
               WHEN event_type IN {sql_in(TASK_PAYLOADS)} THEN {_TASK_REASON}
           END AS reason,
           ray_nil(task_hex) AS task_id, coalesce(TRY_CAST(attempt_text AS INTEGER), 0) AS attempt,
           {columns},
           list_transform(transitions, lambda t: {{'state': t.state, 'ts': t.ts}}) AS transitions,
           nullif(profile_source.componentType, '') AS profile_component,
           ray_nil(component_hex) AS profile_component_id,
           nullif(profile_source.nodeIpAddress, '') AS profile_node_ip, profile_entries
    FROM (
        SELECT *, func_name(f) AS func, coalesce(ray_nil(event_hex), 'content:' || md5(body)) AS event_id,
               {_BAD_TRANSITION} AS bad_transition
        FROM (
            SELECT *, raw_hex(j.eventId) AS event_hex, {hexes}, descriptor(function) AS f,
                   CASE WHEN has_payload AND event_type IN ('{_KINDS["d"]}', '{_KINDS["a"]}') THEN true END AS defined,
                   list_transform(from_json(transitions_json, '{_TRANSITIONS}'), lambda t:
                                  {{'state': t.state, 'ts': ray_ts_ns(t.timestamp), 'timestamp': t.timestamp}})
                       AS transitions,
                   from_json(profile_source.events, '{_PROFILE_ENTRIES}') AS profile_entries
            FROM (
                SELECT *, {fields}
                FROM (
                    SELECT (post::BIGINT << 32) + ord AS seq, label, run_id, body, strlen(body) AS bytes, j,
                           json_str(j.sessionName) AS session, json_str(j.eventType) AS event_type
                    FROM (SELECT *, from_json(body, '{structure}') AS j FROM {POSTS.name})
                )
            )
        )
    )"""


EVENTS = Stage(
    "batch_events",
    _parse_events(),
    about="every event parsed once: its envelope, task columns and why it is malformed (reason)",
)


def parsed(table: str) -> Stage:
    """:data:`EVENTS` as a view of ``table``, the events as EVENTS made them on another connection."""
    return Stage(EVENTS.name, f"FROM {table}", view=True, about="the events parsed on another connection")


# The event types the store folds (the rest are kept raw, and counted)
SUPPORTED_TYPES = sorted([*HANDLERS, *TASK_PAYLOADS])
RECEIVED = Query(
    "received",
    f"""SELECT count(*),
               count(*) FILTER (reason IS NULL AND NOT list_contains({sql_list(SUPPORTED_TYPES)}, event_type)),
               count(reason)
        FROM {EVENTS.name}""",
    about="the events of the group, those of a type the store does not fold, and the malformed",
)
QUARANTINE = Query(
    "quarantine",
    f"""INSERT INTO quarantine
        SELECT md5(body), session, reason, now(), body FROM {EVENTS.name} WHERE reason IS NOT NULL
        QUALIFY row_number() OVER (PARTITION BY md5(body) ORDER BY seq) = 1
        ON CONFLICT DO NOTHING""",
    about="the malformed events kept, each body once (where there are any)",
)
# An event is its session, ID and timestamp (a resend repeats all three): joined on the three, DuckDB reads only the
# raw row groups whose time span (their zone maps) meets the group's, so finding resends costs little at any store
# size; a unique index would cost ~3.4 µs an event and grow with the store. Events with no timestamp (rare) are
# looked up by the other two.
SEEN = Stage(
    "seen_events",
    f"""SELECT b.seq FROM {EVENTS.name} b JOIN raw_events r
           ON r.session = b.session AND r.event_id = b.event_id AND r.ts_ns = b.ts_ns
       WHERE b.reason IS NULL
       UNION ALL
       SELECT b.seq FROM (FROM {EVENTS.name} WHERE reason IS NULL AND ts_ns IS NULL) b JOIN raw_events r
           ON r.session = b.session AND r.event_id = b.event_id AND r.ts_ns IS NULL
       UNION ALL  -- repeats within the group, but for their first
       SELECT b.seq FROM {EVENTS.name} b JOIN (
           SELECT session, event_id, min(seq) AS first FROM {EVENTS.name} WHERE reason IS NULL
           GROUP BY ALL HAVING count(*) > 1) d USING (session, event_id)
       WHERE b.reason IS NULL AND b.seq > d.first""",
    about="the well-formed events stored before (a resend), or repeated in the group but for their first",
)
NONE_SEEN = Stage(SEEN.name, f"SELECT seq FROM {EVENTS.name} WHERE false", about="none (reindex: raw events are)")
# Not deleted from batch_events: a session's label and span come from every well-formed event.
FRESH = Stage(
    "fresh",
    f"SELECT * FROM {EVENTS.name} WHERE reason IS NULL AND seq NOT IN (FROM {SEEN.name})",
    view=True,
    about="the well-formed events the store had not seen, once each",
)
INSERT_RAW = Query(
    "raw events",
    f"""INSERT INTO raw_events
        SELECT session, event_id, event_type, source_type, ts_ns, event_node_id,
               list_contains({sql_list(SUPPORTED_TYPES)}, event_type), now(), body
        FROM {FRESH.name}""",
    about="the raw rows of the events first seen",
)

# One row per state transition and per profile entry of the fresh task events (append tables and task columns); an
# event of the nil task (Ray profiles work of no task: ``store_outputs`` with a taskId of all ones) has none.
TRANSITIONS = Stage(
    "fresh_transitions",
    f"""
    SELECT session, task_id, attempt, seq, t.ts AS ts, t.state AS state
    FROM (SELECT *, unnest(transitions) AS t FROM {FRESH.name}
          WHERE transitions IS NOT NULL AND task_id IS NOT NULL)""",
    about="one row per task state transition",
)
PROFILE = Stage(
    "fresh_profile",
    f"""
    SELECT session, task_id, attempt, seq,
           TRY_CAST(e.startTime AS BIGINT) AS start_ns, TRY_CAST(e.endTime AS BIGINT) AS end_ns,
           coalesce(e.eventName, '') AS name, nullif(e.extraData, '') AS extra,
           profile_component AS component, profile_component_id AS component_id, profile_node_ip AS node_ip
    FROM (SELECT *, unnest(profile_entries) AS e FROM {FRESH.name}
          WHERE profile_entries IS NOT NULL AND task_id IS NOT NULL)
    WHERE coalesce(e.eventName, e.startTime, e.endTime, e.extraData) IS NOT NULL  -- not an object: skipped""",
    about="one row per task profile entry",
)

# One row per fresh task event, state transition and profile entry, with the tasks columns each sets, merged by the
# columns' rules into a row per task attempt; a transition to one of TERMINAL_STATES ends the attempt.
_TASK_ROWS = f"""
    SELECT session, task_id, attempt, seq, {", ".join(TASK_COLUMNS)} FROM {FRESH.name} WHERE task_id IS NOT NULL
    UNION ALL BY NAME
    SELECT session, task_id, attempt, seq, ts AS first_ns,
           CASE WHEN state = 'PENDING_ARGS_AVAIL' THEN ts END AS pending_ns,
           CASE WHEN state = 'RUNNING' THEN ts END AS start_ns,
           {{'terminal': state IN {TERMINAL_SQL}, 'ts': ts, 'state': state}} AS state_key
    FROM {TRANSITIONS.name}
    UNION ALL BY NAME
    SELECT session, task_id, attempt, seq,
           CASE WHEN starts_with(name, 'task::') THEN substr(name, 7) END AS profile_name,
           CASE WHEN name = 'task:execute' THEN start_ns END AS exec_start_ns,
           CASE WHEN name = 'task:execute' THEN end_ns END AS executed_ns
    FROM {PROFILE.name}"""
TASKS = Stage(
    "staged_tasks",
    TASK_TABLE.aggregate_sql(_TASK_ROWS, "seq"),
    about="one row per task attempt, merged by the columns' rules",
)


def _appended(table: str, stage: Stage) -> Query:
    """The rows of ``stage`` appended to ``table``, in its columns' order."""
    columns = ", ".join(c.name for c in APPEND_TABLES[table].columns)
    return Query(table, f"INSERT INTO {table} SELECT {columns} FROM {stage.name}", about=f"{stage.about}, appended")


APPENDED = (_appended("task_transitions", TRANSITIONS), _appended("task_profile", PROFILE))
# The events of the Python-folded types (:mod:`raysight.signals.ray_events.parse`), in the order they arrived
PATCHED = Query(
    "patched",
    f"SELECT seq FROM {FRESH.name} WHERE list_contains({sql_list(HANDLERS)}, event_type) ORDER BY seq",
    about="the fresh events of the types folded in Python (where the group has any)",
)
SESSIONS = Stage(
    "staged_sessions",
    f"""SELECT session, arg_min(label, seq) FILTER (WHERE label IS NOT NULL) AS label,
              arg_min(run_id, seq) FILTER (WHERE run_id IS NOT NULL) AS run_id,
              min(ts_ns) AS first_ns, max(ts_ns) AS last_ns,
              count(*) FILTER (WHERE NOT seen) AS events, sum(bytes) FILTER (WHERE NOT seen) AS raw_bytes
       FROM (SELECT *, seq IN (FROM {SEEN.name}) AS seen FROM {EVENTS.name} WHERE reason IS NULL)
       GROUP BY session""",
    about="each session's label, run ID and span from every well-formed event, its counts from the fresh ones",
)
