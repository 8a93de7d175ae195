"""A session's task attempts as Chrome trace events, as `ray timeline` writes them (`raysight timeline`): a complete
event (``ph: X``) per profile entry Ray's workers and drivers reported (``task:execute``,
``task:deserialize_arguments``, ``task:store_outputs``, …), a trace process per node and a thread per worker, named
by metadata events, so Perfetto and chrome://tracing show one lane per worker. Each event's JSON is made by DuckDB:
a session of a million tasks is never millions of Python dicts.
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb

from raysight.sql_literals import sql_str
from raysight.store.statements import Macro, Query

# Ray's colours (ray/_private/profiling.py), names from catapult's colour scheme; any other event: generic_work
COLORS = {
    "worker_idle": "cq_build_abandoned",
    "task": "rail_response",
    "task:deserialize_arguments": "rail_load",
    "task:execute": "rail_animation",
    "task:store_outputs": "rail_idle",
    "wait_for_function": "detailed_memory_dump",
    "ray.get": "good",
    "ray.put": "terrible",
    "ray.wait": "vsync_highlight_color",
    "submit_task": "background_memory_dump",
    "fetch_and_run_function": "detailed_memory_dump",
    "register_remote_function": "detailed_memory_dump",
}
MACROS = (
    # the colour Ray gives an event of that name (NULL: none)
    Macro(
        "trace_color",
        ("name",),
        "CASE name " + " ".join(f"WHEN {sql_str(k)} THEN {sql_str(v)}" for k, v in COLORS.items()) + " END",
    ),
    # a user's extra data (JSON text), which may name the event or its colour (`cname`), as Ray lets it: {} when it
    # is no JSON object
    Macro(
        "extra_object",
        ("extra",),
        "CASE WHEN json_valid(extra) AND json_type(extra) = 'OBJECT' THEN extra::JSON ELSE '{}'::JSON END",
    ),
)

TRACE_EVENTS = Query(
    "trace events",
    """
WITH p AS (
    SELECT p.*, t.job_id, task_name(t.name, t.profile_name) AS fn, t.actor_id, extra_object(p.extra) AS extra_json,
           p.component || ':' || p.component_id AS lane
    FROM task_profile p LEFT JOIN tasks t USING (session, task_id, attempt)
    WHERE p.session = $session AND p.component IN ('worker', 'driver') AND p.start_ns IS NOT NULL
      AND ($job IS NULL OR t.job_id = $job)
),
lanes AS (
    SELECT node_ip, lane, dense_rank() OVER (ORDER BY node_ip) - 1 AS pid,
           row_number() OVER (ORDER BY node_ip, lane) - 1 AS tid
    FROM (SELECT DISTINCT coalesce(node_ip, '') AS node_ip, lane FROM p)
)
SELECT to_json({
    cat: p.name, name: coalesce(json_extract_string(p.extra_json, '$.name'), p.name), pid: l.pid, tid: l.tid,
    ts: p.start_ns / 1000, dur: (coalesce(p.end_ns, p.start_ns) - p.start_ns) / 1000,
    cname: coalesce(trace_color(json_extract_string(p.extra_json, '$.cname')), trace_color(p.name), 'generic_work'),
    args: json_merge_patch(p.extra_json, to_json({
        task_id: p.task_id, job_id: p.job_id, attempt_number: p.attempt, func_or_class_name: p.fn,
        actor_id: p.actor_id})),
    ph: 'X'})::VARCHAR
FROM p JOIN lanes l ON l.node_ip = coalesce(p.node_ip, '') AND l.lane = p.lane
UNION ALL
SELECT to_json({name: 'process_name', ph: 'M', pid: pid, args: {name: 'Node ' || node_ip}})::VARCHAR
FROM (SELECT DISTINCT node_ip, pid FROM lanes)
UNION ALL
SELECT to_json({name: 'thread_name', ph: 'M', pid: pid, tid: tid, args: {name: lane}})::VARCHAR FROM lanes
""",
    about="the session's profile entries as Chrome trace events, and the names of their lanes",
)


CHUNK_EVENTS = 10_000  # trace events read and sent at once


def chrome_trace(con: duckdb.DuckDBPyConnection, session: str, job_id: str | None = None) -> Iterator[str]:
    """The session's trace (one job's where ``job_id`` is given), a JSON array of trace events: its items joined by
    commas (an event a line), :data:`CHUNK_EVENTS` at a time as they are read."""
    events = con.execute(TRACE_EVENTS.sql, {"session": session, "job": job_id})
    while rows := events.fetchmany(CHUNK_EVENTS):
        yield "\n" + ",\n".join(row[0] for row in rows)


# The dashboard's task stream: a lane per worker, a bar per attempt that started (named by its function), in
# columns (one JSON array per field, bars ordered by lane then start) that a page draws without an object per bar.
STREAM_LIMIT = 200_000
TASK_STREAM = Query(
    "task stream",
    """
WITH a AS (
    SELECT node_id AS node, coalesce(worker_id, exec_worker_id, '') AS worker, worker_pid AS pid,
           task_start(start_ns, exec_start_ns) // 1000 AS s, end_ns // 1000 AS e,
           task_function(func_or_class_name, name, profile_name) AS fn, task_id, attempt,
           task_state(inferred_state, reported_state) AS state
    FROM tasks
    WHERE session = $session AND task_start(start_ns, exec_start_ns) IS NOT NULL
      AND task_type(type, task_id) <> 'DRIVER_TASK' AND ($job IS NULL OR job_id = $job)
    ORDER BY s LIMIT $limit + 1
),
kept AS (SELECT * FROM a ORDER BY s LIMIT $limit),
lanes AS (  -- a worker's lane, on the node any of its attempts names (one may not: its owner's event was lost)
    SELECT worker, max(node) AS node, max(pid) AS pid,
           row_number() OVER (ORDER BY max(node), worker) - 1 AS lane
    FROM kept GROUP BY worker
),
fns AS (SELECT fn, row_number() OVER (ORDER BY fn) - 1 AS f FROM (SELECT DISTINCT fn FROM kept)),
bars AS (SELECT l.lane, k.s, k.e, f.f, k.task_id, k.attempt, k.state
         FROM kept k JOIN lanes l USING (worker) JOIN fns f USING (fn))
SELECT to_json({
    session: $session, truncated: (SELECT count(*) FROM a) > $limit,
    lanes: coalesce((SELECT list({node_id: node, worker_id: worker, pid: pid} ORDER BY lane) FROM lanes), []),
    functions: coalesce((SELECT list(fn ORDER BY f) FROM fns), []),
    lane: coalesce(list(lane ORDER BY lane, s), []), start_us: coalesce(list(s ORDER BY lane, s), []),
    end_us: coalesce(list(e ORDER BY lane, s), []), fn: coalesce(list(f ORDER BY lane, s), []),
    task_id: coalesce(list(task_id ORDER BY lane, s), []), attempt: coalesce(list(attempt ORDER BY lane, s), []),
    state: coalesce(list(state ORDER BY lane, s), [])
})::VARCHAR FROM bars
""",
    about="the session's task attempts as bars in lanes, in columns",
)


def task_stream(
    con: duckdb.DuckDBPyConnection, session: str, job_id: str | None = None, limit: int = STREAM_LIMIT
) -> bytes:
    """The session's task stream (one job's where ``job_id`` is given), its first ``limit`` attempts by start (then
    ``truncated`` is true): ``lanes`` (node, worker, pid) and ``functions`` by index, and per bar in columns its
    ``lane``, ``start_us``, ``end_us`` (null while running), ``fn``, ``task_id``, ``attempt`` and ``state``."""
    params = {"session": session, "job": job_id, "limit": limit}
    (text,) = con.execute(TASK_STREAM.sql, params).fetchone()  # type: ignore[misc]
    return text.encode()  # type: ignore[no-any-return]
