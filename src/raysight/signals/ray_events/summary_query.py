"""`ray summary`: tasks by function, actors by class, objects by call site, of one session (resolved by the caller:
None when none is recorded)."""

from __future__ import annotations

from typing import Any

import duckdb

from raysight.signals.polls.polled_resources import OBJECTS
from raysight.signals.ray_events.entities import ACTORS
from raysight.store.statements import Query, dict_rows

SLOWEST = 5


# Tasks by function (drivers' aside): state counts and duration p50/p95/max (ms)
TASK_GROUPS = Query(
    "tasks by function",
    """WITH t AS (SELECT task_function(func_or_class_name, name, profile_name) AS fn, task_type(type, task_id) AS type,
                         task_state(inferred_state, reported_state) AS state,
                         (end_ns - task_start(start_ns, exec_start_ns)) / 1e6 AS dur
                  FROM tasks WHERE session = $session AND task_type(type, task_id) <> 'DRIVER_TASK'),
       counts AS (SELECT fn, map_from_entries(list(row(state, n))) AS state_counts
                  FROM (SELECT fn, state, count(*) AS n FROM t GROUP BY ALL) GROUP BY fn)
       SELECT fn AS func_or_class_name, any_value(type) AS type, count(*) AS attempts,
              any_value(counts.state_counts) AS state_counts,
              quantile_cont(dur, 0.5) AS p50_ms, quantile_cont(dur, 0.95) AS p95_ms, max(dur) AS max_ms
       FROM t JOIN counts USING (fn)
       GROUP BY fn ORDER BY attempts DESC, fn""",
)
SLOWEST_TASKS = Query(
    "slowest tasks",
    f"""SELECT task_id, attempt AS attempt_number, task_function(func_or_class_name, name, profile_name)
               AS func_or_class_name, task_state(inferred_state, reported_state) AS state,
               (end_ns - task_start(start_ns, exec_start_ns)) / 1e6 AS duration_ms
        FROM tasks WHERE session = $session AND end_ns IS NOT NULL AND start_ns IS NOT NULL
        ORDER BY duration_ms DESC LIMIT {SLOWEST}""",
)
ACTOR_GROUPS = Query(
    "actors by class",
    f"""SELECT class_name, sum(n)::BIGINT AS actors, map_from_entries(list(row(state, n))) AS state_counts
        FROM (SELECT {ACTORS.field("class_name").sql} AS class_name, {ACTORS.field("state").sql} AS state,
                     count(*) AS n
              FROM {ACTORS.source} WHERE {ACTORS.session_sql} = $session GROUP BY ALL)
        GROUP BY class_name ORDER BY actors DESC, class_name""",
)
OBJECT_GROUPS = Query(
    "objects by call site",
    f"""WITH o AS (SELECT {OBJECTS.field("call_site").sql} AS call_site, {OBJECTS.field("object_size").sql} AS size,
                          {OBJECTS.field("pid").sql} AS pid, {OBJECTS.field("ip").sql} AS ip,
                          {OBJECTS.field("task_status").sql} AS task_status,
                          CAST({OBJECTS.field("attempt_number").sql} AS VARCHAR) AS attempt,
                          {OBJECTS.field("reference_type").sql} AS ref_type
                   FROM {OBJECTS.source} WHERE {OBJECTS.session_sql} = $session AND {OBJECTS.condition})
        SELECT call_site, count(*) AS total_objects,
               coalesce(sum(size) FILTER (size <> -1), 0) / 1048576 AS total_size_mb,
               count(DISTINCT pid) AS total_num_workers, count(DISTINCT ip) AS total_num_nodes,
               histogram(task_status) AS task_state_counts, histogram(attempt) AS task_attempt_number_counts,
               histogram(ref_type) AS ref_type_counts
        FROM o GROUP BY call_site ORDER BY total_objects DESC, call_site""",
)


def summarize_tasks(con: duckdb.DuckDBPyConnection, session: str | None) -> dict[str, Any]:
    """Tasks by function: state counts and duration p50/p95/max (ms), and the slowest attempts of the session."""
    resolved = session
    groups = dict_rows(con.execute(TASK_GROUPS.sql, {"session": resolved})) if resolved else []
    for group in groups:
        group["state_counts"] = dict(sorted(group["state_counts"].items()))
    slowest = dict_rows(con.execute(SLOWEST_TASKS.sql, {"session": resolved})) if resolved else []
    return {"session": resolved, "summary": groups, "slowest": slowest}


def summarize_actors(con: duckdb.DuckDBPyConnection, session: str | None) -> dict[str, Any]:
    """Actors by class: state counts."""
    resolved = session
    groups = dict_rows(con.execute(ACTOR_GROUPS.sql, {"session": resolved})) if resolved else []
    for group in groups:
        group["state_counts"] = dict(sorted(group["state_counts"].items()))
    return {"session": resolved, "summary": groups}


def summarize_objects(con: duckdb.DuckDBPyConnection, session: str | None) -> dict[str, Any]:
    """The last sample of objects (polled) by call site, as Ray's ``ObjectSummaries`` counts them: objects, size
    (unknown sizes, -1, left out), workers and nodes holding them, and counts by task state, attempt and reference
    type."""
    resolved = session
    groups = dict_rows(con.execute(OBJECT_GROUPS.sql, {"session": resolved}))
    for group in groups:
        for key in ("task_state_counts", "task_attempt_number_counts", "ref_type_counts"):
            group[key] = dict(sorted(group[key].items()))
    return {"session": resolved, "summary": groups}
