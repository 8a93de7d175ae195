"""Summaries (tasks by function, actors by class), the sessions overview, and the doctor's report."""

from __future__ import annotations

from typing import Any

import duckdb
import orjson

from raysight.signals.ray_metrics.parse import PREFIX
from raysight.store import resources
from raysight.store.queries import ACTORS, NODES, OBJECTS, resolve_session
from raysight.store.schema import driver_task_id_sql, task_job_id_sql
from raysight.store.statements import Query

SLOWEST = 5
DOCTOR_SESSIONS = 5
LAG_WINDOW = "15 MINUTES"  # raw events arrive in time order, so the window reads only the newest row groups
# What the doctor shows of Ray's aggregator counters, summed over a session's agents: field -> metric (no prefix).
RAY_COUNTERS = {
    "received": "events_received",
    "published": "published_events",
    "filtered": "filtered_events",
    "publish_failures": "publish_failures",
    "buffer_add_failures": "events_buffer_add_failures",
}


def dict_rows(cursor: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """A query's rows, each a dict by column name."""
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, r)) for r in cursor.fetchall()]


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
    resolved = resolve_session(con, session)
    groups = dict_rows(con.execute(TASK_GROUPS.sql, {"session": resolved})) if resolved else []
    for group in groups:
        group["state_counts"] = dict(sorted(group["state_counts"].items()))
    slowest = dict_rows(con.execute(SLOWEST_TASKS.sql, {"session": resolved})) if resolved else []
    return {"session": resolved, "summary": groups, "slowest": slowest}


def summarize_actors(con: duckdb.DuckDBPyConnection, session: str | None) -> dict[str, Any]:
    """Actors by class: state counts."""
    resolved = resolve_session(con, session)
    groups = dict_rows(con.execute(ACTOR_GROUPS.sql, {"session": resolved})) if resolved else []
    for group in groups:
        group["state_counts"] = dict(sorted(group["state_counts"].items()))
    return {"session": resolved, "summary": groups}


def summarize_objects(con: duckdb.DuckDBPyConnection, session: str | None) -> dict[str, Any]:
    """The last sample of objects (polled) by call site, as Ray's ``ObjectSummaries`` counts them: objects, size
    (unknown sizes, -1, left out), workers and nodes holding them, and counts by task state, attempt and reference
    type."""
    resolved = resolve_session(con, session)
    groups = dict_rows(con.execute(OBJECT_GROUPS.sql, {"session": resolved}))
    for group in groups:
        for key in ("task_state_counts", "task_attempt_number_counts", "ref_type_counts"):
            group[key] = dict(sorted(group[key].items()))
    return {"session": resolved, "summary": groups}


# The poller's last sample of the session's cluster at or before $at (a sample taken when no node was alive any more,
# a cluster shutting down, is stale)
_NODE_START, _NODE_END = NODES.field("start_time_ms").sql, NODES.field("end_time_ms").sql
CLUSTER_SAMPLE = Query(
    "cluster sample",
    f"""SELECT c.ns, c.status FROM cluster_status c
        WHERE c.session = $session AND ($at IS NULL OR c.ns <= $at)
          AND (NOT EXISTS (SELECT 1 FROM {NODES.source} WHERE {NODES.session_sql} = c.session)
               OR EXISTS (SELECT 1 FROM {NODES.source} WHERE {NODES.session_sql} = c.session
                          AND coalesce({_NODE_START}, 0) <= c.ns // 1000000
                          AND ({_NODE_END} IS NULL OR {_NODE_END} > c.ns // 1000000)))
        ORDER BY c.ns DESC LIMIT 1""",
)
CLUSTER_NODES = Query(
    "cluster nodes",
    f"""SELECT node_id, node_ip, is_head_node, state, state_message, start_time_ms, end_time_ms
        FROM (SELECT {", ".join(f"{f.sql} AS {f.name}" for f in NODES.fields)} FROM {NODES.source}
              WHERE {NODES.session_sql} = $session)
        WHERE $at IS NULL OR start_time_ms IS NULL OR start_time_ms <= $at // 1000000
        ORDER BY start_time_ms NULLS FIRST, node_id""",
    about="the session's nodes begun by $at",
)


def cluster_status(con: duckdb.DuckDBPyConnection, session: str | None, at_ns: int | None) -> dict[str, Any]:
    """What the session's cluster had and what waited for it at ``at_ns`` (default: its last sample's moment), from
    the poller's sample at or before then: resources used and total (all and per node), pending demand by shape
    (tasks and actors, placement groups), the nodes alive then and those that had died (raysight's own record)."""
    resolved = resolve_session(con, session)
    row = con.execute(CLUSTER_SAMPLE.sql, {"session": resolved, "at": at_ns}).fetchone()
    asked_ms = None if at_ns is None else at_ns // 1_000_000
    if at_ns is None and row is not None:  # the last sample's moment
        at_ns = row[0]
    nodes = dict_rows(con.execute(CLUSTER_NODES.sql, {"session": resolved, "at": at_ns}))
    at_ms = None if at_ns is None else at_ns // 1_000_000
    ended = [n for n in nodes if n["end_time_ms"] is not None and (at_ms is None or n["end_time_ms"] <= at_ms)]
    out: dict[str, Any] = {
        "session": resolved,
        "at_ms": asked_ms,
        "sampled_ms": None,
        "alive_nodes": [n for n in nodes if n not in ended],
        "dead_nodes": ended,
    }
    if row is None:
        return out
    report = orjson.loads(row[1])["loadMetricsReport"]
    return {
        **out,
        "sampled_ms": row[0] // 1_000_000,
        "usage": resources.usage(report.get("usage") or {}),
        "usage_by_node": {node: resources.usage(pairs) for node, pairs in (report.get("usageByNode") or {}).items()},
        "demands": resources.demands(report.get("resourceDemand") or []),
        "placement_group_demands": report.get("pgDemand") or [],
        "requested": report.get("requestDemand") or [],
    }


SESSIONS = Query(
    "sessions",
    """SELECT s.session, s.label, s.first_ns // 1000000 AS start_time_ms,
              e.ended_ns // 1000000 AS end_time_ms, e.end_reason,
              s.last_ns // 1000000 AS last_event_ms,
              coalesce(n.nodes, 0) AS nodes, coalesce(j.jobs, 0) AS jobs,
              coalesce(t.tasks, 0) AS tasks, coalesce(t.failures, 0) AS failures,
              coalesce(s.raw_bytes, 0) AS raw_bytes, coalesce(s.events, 0) AS events
       FROM sessions s
       LEFT JOIN all_session_ends() e USING (session)
       LEFT JOIN (SELECT session, count(*) AS nodes FROM nodes GROUP BY 1) n USING (session)
       LEFT JOIN (SELECT session, count(*) AS jobs FROM jobs GROUP BY 1) j USING (session)
       LEFT JOIN (SELECT session, count(*) FILTER (coalesce(type, '') <> 'DRIVER_TASK') AS tasks,
                         count(*) FILTER (coalesce(inferred_state, reported_state) = 'FAILED') AS failures
                  FROM tasks GROUP BY 1) t USING (session)
       ORDER BY s.first_ns DESC NULLS LAST, s.session DESC""",
    about="every session seen, newest first, with its size and outcome",
)


def list_sessions(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Every session seen, newest first, with its size and outcome."""
    return dict_rows(con.execute(SESSIONS.sql))


# What the doctor reports beside the counters, each under its key
DOCTOR = (
    Query(
        "polls",
        """SELECT session, resource, last_ok_ns // 1000000 AS last_ok_ms, rows,
                  last_error_ns // 1000000 AS last_error_ms, last_error
           FROM polls ORDER BY greatest(last_ok_ns, last_error_ns) DESC, resource LIMIT 50""",
    ),
    Query(
        "scrapes",
        """SELECT session, instance, job, count(*) AS scrapes, max(ts_ms) AS last_ms,
                  arg_max(samples, ts_ms) AS last_samples
           FROM metric_scrapes GROUP BY ALL ORDER BY last_ms DESC LIMIT 50""",
    ),
    Query(
        "metrics_refused",
        """SELECT r.session, s.series AS series_held, r.series AS series_refused, r.samples AS samples_dropped,
                  r.last_ms FROM metric_refused r
           LEFT JOIN (SELECT session, count(*) AS series FROM metric_series GROUP BY 1) s USING (session)
           ORDER BY r.last_ms DESC LIMIT 20""",
    ),
    Query(
        "metrics_dropped",
        """SELECT session, samples, through_ms, why, epoch_ms(dropped_at) AS dropped_ms FROM metric_dropped
           ORDER BY through_ms DESC LIMIT 20""",
    ),
    Query(
        "log_gaps",
        """SELECT session, host, name, start_offset, end_offset, why, epoch_ms(received_at) AS received_ms
           FROM log_gaps ORDER BY received_at DESC LIMIT 20""",
    ),
    Query(
        "log_dropped",
        """SELECT session, sum(lines) AS lines, max(through_ns) // 1000000 AS through_ms, max(why) AS why
           FROM log_dropped GROUP BY session ORDER BY through_ms DESC LIMIT 20""",
    ),
    Query(
        "unsupported",
        "SELECT event_type, count(*) AS events FROM raw_events WHERE NOT supported GROUP BY 1 ORDER BY 2 DESC",
    ),
    Query(
        "quarantine",
        """SELECT reason, count(*) AS events, epoch_ms(max(received_at)) AS last_received_ms FROM quarantine
           GROUP BY 1 ORDER BY 2 DESC LIMIT 20""",
    ),
    Query(
        "inferred",
        """SELECT session, inferred_state, count(*) AS tasks FROM tasks WHERE inferred_state IS NOT NULL
           GROUP BY ALL ORDER BY session DESC, tasks DESC""",
    ),
    Query(
        "ingest_lag",
        f"""SELECT session, epoch_ms(max(received_at)) AS last_received_ms,
                   quantile_cont(epoch_ms(received_at) - ts_ns / 1e6, 0.5) AS lag_p50_ms,
                   max(epoch_ms(received_at) - ts_ns / 1e6) AS lag_max_ms
            FROM raw_events
            WHERE ts_ns IS NOT NULL
              AND received_at >= (SELECT max(received_at) FROM raw_events) - INTERVAL {LAG_WINDOW}
            GROUP BY 1 ORDER BY last_received_ms DESC LIMIT 5""",
    ),
)
COUNTERS = Query("counters", "SELECT name, value FROM counters")


def doctor(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """What raysight knows it is missing (quarantined and unfolded events, inferred states, ingest lag over the last
    :data:`LAG_WINDOW` of ingest), and what Ray reported losing."""
    return {
        "counters": dict(con.execute(COUNTERS.sql).fetchall()),
        **{query.name: dict_rows(con.execute(query.sql)) for query in DOCTOR},
        "ray_reported": ray_reported(con),
        "drivers_without_task_events": drivers_without_task_events(con),
    }


_SUMS = ", ".join(
    f"coalesce(sum(value) FILTER (metric = '{PREFIX}{metric}'), 0)::BIGINT AS {field}"
    for field, metric in RAY_COUNTERS.items()
)
RAY_REPORTED = Query(
    "ray reported",
    f"""WITH totals AS (
            SELECT session, count(DISTINCT source) AS agents, {_SUMS},
                   coalesce(max(value) FILTER (metric = '{PREFIX}consecutive_failures_since_last_success'), 0)
                       ::BIGINT AS consecutive_publish_failures,
                   epoch_ms(max(updated_at)) AS last_scraped_ms
            FROM ray_reported GROUP BY session ORDER BY last_scraped_ms DESC LIMIT {DOCTOR_SESSIONS}),
        drops AS (
            SELECT session, map_from_entries(list(row(event_type, n))) AS dropped
            FROM (SELECT session, event_type, sum(value)::BIGINT AS n FROM ray_reported
                  WHERE metric = '{PREFIX}queue_dropped_events' AND value > 0 GROUP BY ALL)
            GROUP BY session)
        SELECT t.session, s.label, t.* EXCLUDE (session), d.dropped
        FROM totals t LEFT JOIN sessions s USING (session) LEFT JOIN drops d USING (session)
        ORDER BY t.last_scraped_ms DESC""",
)


def ray_reported(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """What Ray's aggregators said they received, published, failed to publish and dropped (by event type), summed
    over each session's agents, for the sessions scraped last; ``consecutive_publish_failures`` is the most of any."""
    rows = dict_rows(con.execute(RAY_REPORTED.sql))
    for row in rows:
        row["dropped"] = dict(sorted((row["dropped"] or {}).items(), key=lambda kv: (-kv[1], kv[0])))
    return rows


# The variable a driver needs for its own tasks' events to leave it (Ray hands it to the workers it starts, not to
# drivers started elsewhere); `raysight env` prints the head's `--system-config` that gives it to every process.
OWNER_EVENTS_FLAG = "RAY_enable_core_worker_ray_event_to_aggregator=1"


# Jobs whose tasks only their executors reported: only the owner sends definitions, pending and end states, the
# executor's ID
DRIVERS_UNHEARD = Query(
    "drivers without task events",
    f"""WITH executor_only AS (
           SELECT t.session, coalesce(t.job_id, {task_job_id_sql("t.task_id")}) AS job_id, count(*) AS tasks
           FROM tasks t
           WHERE t.defined IS NULL AND t.worker_id IS NULL AND t.pending_ns IS NULL AND t.end_ns IS NULL
             AND (t.worker_pid IS NOT NULL OR t.exec_worker_id IS NOT NULL OR t.executed_ns IS NOT NULL)
           GROUP BY ALL)
       SELECT e.session, s.label, e.job_id, e.tasks, j.driver_pid, j.entrypoint
       FROM executor_only e JOIN sessions s USING (session)
       LEFT JOIN jobs j ON j.session = e.session AND j.job_id = e.job_id
       WHERE NOT EXISTS (SELECT 1 FROM tasks d WHERE d.session = e.session AND d.defined
                         AND d.task_id = {driver_task_id_sql("e.job_id")})
       ORDER BY s.first_ns DESC NULLS LAST, e.job_id
       LIMIT 20""",
)


def drivers_without_task_events(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Jobs whose driver sent none of its tasks' events while the workers that ran them did: their types, failures
    and durations are unknown to raysight (and to Ray's aggregator). A job whose driver reported itself is left out:
    a crashing owner losing its last second of events is not a misconfigured driver."""
    rows = dict_rows(con.execute(DRIVERS_UNHEARD.sql))
    for row in rows:
        driver = f"driver pid {row['driver_pid']}" if row["driver_pid"] else "its driver"
        row["message"] = (
            f"job {row['job_id']}: {row['tasks']} task attempt(s) were reported only by the workers that ran them; "
            f"{driver} sent no task events, so whether they finished or failed, their types and durations are "
            f"unknown. The driver lacked {OWNER_EVENTS_FLAG}: start the head with the --system-config that "
            "`raysight env` prints, or set the variable in the driver's environment."
        )
    return rows


ACTIVITY_BUCKETS = 120
ACTIVITY = Query(
    "activity",
    """WITH t AS (SELECT task_start(start_ns, exec_start_ns) // 1000000 AS s, end_ns // 1000000 AS e,
                        task_state(inferred_state, reported_state) AS state
                 FROM tasks WHERE session = $session AND task_type(type, task_id) <> 'DRIVER_TASK'),
       step AS (SELECT lo, (greatest(hi, lo) - lo) // $n + 1 AS width
                FROM (SELECT min(s) AS lo, greatest(max(e), max(s)) AS hi FROM t))
       SELECT lo, width, least((ts - lo) // width, $n - 1) AS bucket,
              count(*) FILTER (kind = 's') AS started,
              count(*) FILTER (kind = 'e' AND state = 'FINISHED') AS finished,
              count(*) FILTER (kind = 'e' AND state = 'FAILED') AS failed
       FROM (SELECT 's' AS kind, s AS ts, state FROM t WHERE s IS NOT NULL
             UNION ALL SELECT 'e', e, state FROM t WHERE e IS NOT NULL), step
       WHERE ts >= lo GROUP BY ALL""",
    about="task attempts started, finished and failed in each of $n intervals of the session",
)


def activity(con: duckdb.DuckDBPyConnection, session: str | None, buckets: int = ACTIVITY_BUCKETS) -> dict[str, Any]:
    """Task attempts started, finished and failed per interval of the session: ``buckets`` equal intervals (of whole
    milliseconds) from its first start to its last end, in one pass over the session's tasks."""
    resolved = resolve_session(con, session)
    rows = con.execute(ACTIVITY.sql, {"session": resolved, "n": buckets}).fetchall()
    series: dict[str, list[int]] = {"started": [0] * buckets, "finished": [0] * buckets, "failed": [0] * buckets}
    for _, _, bucket, *counts in rows:
        for name, n in zip(series, counts):
            series[name][bucket] += n
    start_ms, step_ms = rows[0][:2] if rows else (None, None)
    return {"session": resolved, "start_ms": start_ms, "step_ms": step_ms, **series}
