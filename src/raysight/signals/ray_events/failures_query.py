"""A session's failures, grouped by cause, each consequence tied to its root (`raysight errors`).

A failure is a task attempt that failed (a driver's task aside: a driver's failure is its job's), an actor that
restarted or died other than by its owner's exit, going out of scope or its own intended exit (``exit_actor()``), a
worker that exited unintentionally (not one whose actor had ended so first: Ray stops that worker, which, stopped by a
SIGTERM, says it "exits unexpectedly by a signal", a SYSTEM_ERROR), a node that died while its cluster went on or took
running work with it (whatever Ray called its end: a node told to stop with tasks on it failed them), or a driver that
exited with an error. What followed from another failure is a consequence, found along the chain things run on — node,
worker, actor, task: a task whose actor or worker died (an OOM kill, say), an actor whose worker or node died, a
worker whose node died. Only roots are grouped; each group counts the consequences of its failures.

A Serve replica (an actor of Serve's namespace, ``ServeReplica:<app>:<deployment>``) that died is a failure of its
own kind, its worker's death the same event (not another failure); Serve stopping one of its actors (``ray.kill``: a
downscale, a redeploy, ``serve.shutdown``) is no failure, nor are its actors' calls, which Ray never reports (Serve
turns their task events off: their profile events alone say nothing of how they ended). The requests that failed with
a crashed replica are its consequences: those of its application that failed about when it died (a 5xx at the proxy,
an error at a replica) and that no replica of its deployment answered; the replica Serve started after it, of the same
deployment, is its replacement.

A group's cause is its failures' kind and Ray's error type, with the exception's type and message (the traceback's
last line naming an exception) or, for a death, the first line of its reason, in which numbers and quantities, hex
IDs, addresses, URLs, quoted strings and paths are replaced by placeholders: the same fault raised with different
values is one group, whose ID is a hash of its cause. Its example is its latest failure: that cause with its own
values (``ValueError: shard 42 failed`` beside ``ValueError: shard <n> failed``), and its whole message.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import duckdb
import orjson

from raysight.ansi import plain_json_sql, plain_sql
from raysight.errors import NotFound
from raysight.signals.log_lines.logs_query import LogQuery, log_lines
from raysight.signals.log_lines.parse import SERVE_REQUESTS
from raysight.signals.log_lines.requests_query import ERROR_SQL
from raysight.signals.ray_events.entities import ACTORS, JOBS, NODES, TASKS, WORKERS
from raysight.signals.ray_events.reconcile import ALL_NODES_DIED
from raysight.signals.ray_events.state_query import Resource, list_page
from raysight.sql_literals import sql_str
from raysight.store.filters import Filter
from raysight.store.schema import task_kind_sql
from raysight.store.statements import Macro, Query, dict_rows

_PLACEHOLDERS = [  # in this order: a URL or an address before its path and numbers, an ID (Ray's are 16 hex digits
    # or more) before a quantity that could end like one (1922826240B), a quantity before a short ID
    (r'"[^"]*"', '"<str>"'),
    (r"'[^']*'", "'<str>'"),
    (r"\b[a-z][a-z0-9+.-]*://[^\s,;)\]]+", "<url>"),
    (r"\b\d{1,3}(\.\d{1,3}){3}(:\d+)?\b", "<addr>"),
    (r"(/[\w.@+-]+)+/?", "<path>"),
    (r"\b[0-9a-fA-F]{16,}\b", "<id>"),
    (r"\b\d+(\.\d+)?([A-Za-z]{1,3})?\b", "<n>"),  # 42, 3.5, 1.80GB, 1922826240B
    (r"\b(0x[0-9a-fA-F]+|[0-9a-fA-F]{8,})\b", "<id>"),
]
# A node's death within this long before its session ended for another reason (its driver or GCS gone) is the
# cluster's end, not a failure
_ENDED_WITH_SESSION_NS = 10 * 10**9
NORMAL_WORKER_EXITS = ("INTENDED_USER_EXIT", "INTENDED_SYSTEM_EXIT")
NORMAL_NODE_DEATHS = ("EXPECTED_TERMINATION", "AUTOSCALER_DRAIN_IDLE")
NODE_LOSSES = ("NODE_DIED", "LOCAL_RAYLET_DIED")  # a task's error types that say its node went
NORMAL_ACTOR_DEATHS = ("OWNER_DIED", "OUT_OF_SCOPE", "REF_DELETED")  # the driver that owned it ended, or let it go
INTENDED_EXIT = "Worker exit type: INTENDED_USER_EXIT"  # Ray's words for an actor that exited as asked (exit_actor())
SERVE_NAMESPACE = "serve"  # Ray's namespace of Serve's actors (its controller, proxies and replicas)
SERVE_REPLICA_CLASS = "ServeReplica:"  # a replica's class name: ServeReplica:<app>:<deployment>
SERVE_REPLICA_NAME = "SERVE_REPLICA::"  # a replica's actor name: SERVE_REPLICA::<app>#<deployment>#<replica ID>
STOPPED_BY_SERVE = "RAY_KILL"  # how Serve stops its actors on purpose: the death's reason
# A Serve replica that crashed, as a row of ACTOR_STEPS says: its first death, not Serve stopping it
CRASHED_REPLICA = "replica AND first_death AND NOT normal_end"
# A crashed replica's requests failed from this long before its death was recorded (its callers may log first) to
# this long after
REQUESTS_BEFORE_NS, REQUESTS_AFTER_NS = 10**9, 5 * 10**9


def template_sql(text: str) -> str:
    """SQL: ``text`` without colours, with its variable parts replaced by placeholders."""
    sql = plain_sql(text)
    for pattern, placeholder in _PLACEHOLDERS:
        sql = f"regexp_replace({sql}, {sql_str(pattern)}, {sql_str(placeholder)}, 'g')"
    return sql


# A traceback's exception (`ValueError: boom`: the last line that names one, for Ray may add lines after it), its
# type, and the text a failure's cause is made of: that exception, else the first line of its message
_EXCEPTION = r"[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Failure)"
_PLAIN = plain_sql("message")
_EXCEPTION_LINE = f"list_last(regexp_extract_all({_PLAIN}, {sql_str(f'(?m)^{_EXCEPTION}(?::.*)?$')}))"
_EXC_TYPE = f"nullif(regexp_extract(exception_line, {sql_str(f'^({_EXCEPTION})')}, 1), '')"
_CAUSE_TEXT = "left(coalesce(exception_line, regexp_extract(" + _PLAIN + r", '(?m)^\s*(\S.*)$', 1)), 300)"

_WORKER_NAME = "lower(coalesce(worker_type, 'worker')) || ' pid=' || coalesce(pid::VARCHAR, '?')"

# What a session's failures are made of, in steps: each a table macro of the session (``of_session``) alone.
# Each step of each actor's history, what it ran on then, and whether it ended the actor normally or went with its node
ACTOR_STEPS = Macro(
    "actor_steps",
    ("of_session",),
    f"""
    SELECT a.actor_id, a.job_id, a.class_name, a.name AS actor_name, a.ray_namespace, h.*,
           last_value(h.worker_id IGNORE NULLS) OVER w AS on_worker,
           last_value(h.node_id IGNORE NULLS) OVER w AS on_node,
           json_extract_string(h.death_cause, '$.actorDiedErrorContext.reason') = 'NODE_DIED'
               OR h.restart_reason = 'NODE_PREEMPTION' AS node_lost,
           h.state = 'DEAD'
               AND (coalesce(json_extract_string(h.death_cause, '$.actorDiedErrorContext.reason'), '')
                        IN {NORMAL_ACTOR_DEATHS}
                    OR coalesce(h.death_message, '') LIKE '%{INTENDED_EXIT}%'
                    OR (a.ray_namespace = '{SERVE_NAMESPACE}' AND json_extract_string(
                            h.death_cause, '$.actorDiedErrorContext.reason') = '{STOPPED_BY_SERVE}')) AS normal_end,
           h.state = 'DEAD' AND coalesce(sum((h.state = 'DEAD')::INTEGER) OVER w, 0) = 0 AS first_death,
           a.ray_namespace = '{SERVE_NAMESPACE}' AND starts_with(a.class_name, '{SERVE_REPLICA_CLASS}') AS replica
    FROM (SELECT actor_id, job_id, class_name, name, ray_namespace, unnest(history) AS h
          FROM actors WHERE session = of_session) a
    WINDOW w AS (PARTITION BY actor_id ORDER BY h.ts ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)""",
    table=True,
)
# The failed task attempts, with Ray's error type and message (else what raysight inferred); not the calls of Serve's
# actors, which Ray never reports (raysight knows them by their profile events alone)
FAILED_TASKS = Macro(
    "failed_tasks",
    ("of_session",),
    f"""
    SELECT *, coalesce(error_type, inferred_error_type, 'UNKNOWN') AS type_,
           coalesce(nullif(error_message, ''), inferred_reason, '') AS message_
    FROM tasks WHERE session = of_session AND task_state(inferred_state, reported_state) = 'FAILED'
      AND NOT (reported_state IS NULL AND coalesce(worker_id, exec_worker_id) IN (
          SELECT unnest(list_filter(list_transform(history, lambda h: h.worker_id), lambda w: w IS NOT NULL))
          FROM actors WHERE session = of_session AND ray_namespace = '{SERVE_NAMESPACE}'))""",
    table=True,
)
# The requests that failed with each Serve replica that crashed: those of its application (or of none known: a proxy's
# alone) that failed about when it died and that no replica of its deployment answered
REPLICA_REQUESTS = Macro(
    "replica_requests",
    ("of_session",),
    f"""
    WITH crashed AS (
        SELECT actor_id, job_id, ts,
               regexp_extract(actor_name, '^{SERVE_REPLICA_NAME}(.*)#[^#]*#[^#]*$', 1) AS application,
               regexp_extract(actor_name, '#([^#]*)#[^#]*$', 1) AS deployment
        FROM actor_steps(of_session) WHERE {CRASHED_REPLICA}
    )
    SELECT c.actor_id, c.job_id, q.request_id, max(q.ts_ns) AS ts_ns, any_value(q.route) AS route,
           arg_max(printf('%s %s %s', q.method, coalesce(q.route, ''), q.status), q.component = 'proxy') AS answer
    FROM crashed c JOIN {SERVE_REQUESTS.name} q
        ON q.session = of_session AND q.request_id IS NOT NULL
       AND q.ts_ns BETWEEN c.ts - {REQUESTS_BEFORE_NS} AND c.ts + {REQUESTS_AFTER_NS}
    GROUP BY c.actor_id, c.job_id, q.request_id, c.application, c.deployment
    HAVING bool_or({ERROR_SQL}) AND bool_and(q.application IS NULL OR q.application = c.application)
       AND NOT coalesce(bool_or(q.application = c.application AND q.deployment = c.deployment), false)""",
    table=True,
)
# The nodes that died while their cluster went on, or took running work with them (whatever Ray called that death)
NODE_FAILURES = Macro(
    "node_failures",
    ("of_session",),
    f"""
    WITH lost_with_node AS (
        SELECT node_id FROM failed_tasks(of_session) WHERE type_ IN {NODE_LOSSES}
        UNION SELECT on_node FROM actor_steps(of_session) WHERE node_lost
    )
    SELECT 'node' AS kind, n.node_id AS id, NULL, coalesce(n.end_ns, n.inferred_end_ns), NULL, n.node_id, NULL,
           coalesce(n.node_name, n.node_ip, n.hostname, ''),
           CASE WHEN n.state = 'DEAD' THEN coalesce(n.death_reason, 'UNEXPECTED_TERMINATION')
                ELSE 'NODE_DIED' END,
           coalesce(n.death_message, n.inferred_reason, ''), '', NULL, NULL
    FROM nodes n LEFT JOIN session_ends([of_session]) e USING (session)
    WHERE n.session = of_session AND (n.state = 'DEAD' OR n.inferred_state = 'DEAD')
      AND (n.node_id IN (SELECT node_id FROM lost_with_node)
           OR (((n.state = 'DEAD' AND coalesce(n.death_reason, '') NOT IN {NORMAL_NODE_DEATHS})
                OR (n.state IS DISTINCT FROM 'DEAD' AND n.inferred_reason NOT LIKE 'the cluster ended%'))
               AND (e.ended_ns IS NULL OR e.end_reason = '{ALL_NODES_DIED}'
                    OR coalesce(n.end_ns, n.inferred_end_ns) < e.ended_ns - {_ENDED_WITH_SESSION_NS})))""",
    table=True,
)
# Every failure: kind, id, attempt, when, job, node, worker, name, Ray's error type, the message, the traceback (or
# detail), and what it ran on whose failure may have caused it
FAILURES = Macro(
    "failures",
    ("of_session",),
    f"""
    WITH steps AS (FROM actor_steps(of_session)), failed_nodes AS (FROM node_failures(of_session))
    SELECT 'task' AS kind, task_id AS id, attempt, coalesce(end_ns, exec_start_ns, first_ns) AS ts_ns, job_id, node_id,
           coalesce(worker_id, exec_worker_id) AS worker_id, coalesce(name, profile_name, '') AS name,
           type_ AS error_type, message_ AS message, coalesce(error_detail, '') AS detail,
           CASE WHEN type_ IN ('ACTOR_DIED', 'ACTOR_UNAVAILABLE') AND actor_id IS NOT NULL THEN 'actor'
                WHEN type_ IN ('WORKER_DIED', 'OUT_OF_MEMORY') THEN 'worker'
                WHEN type_ IN {NODE_LOSSES} THEN 'node' END AS parent_kind,
           CASE WHEN type_ IN ('ACTOR_DIED', 'ACTOR_UNAVAILABLE') AND actor_id IS NOT NULL THEN actor_id
                WHEN type_ IN ('WORKER_DIED', 'OUT_OF_MEMORY') THEN coalesce(worker_id, exec_worker_id)
                WHEN type_ IN {NODE_LOSSES} THEN node_id END AS parent_id
    FROM failed_tasks(of_session) WHERE coalesce(type, {task_kind_sql("task_id")}) <> 'DRIVER_TASK'
    UNION ALL
    SELECT CASE WHEN replica THEN 'replica' ELSE 'actor' END, actor_id, NULL, ts, job_id, on_node, on_worker,
           class_name,
           CASE WHEN state = 'RESTARTING' THEN 'ACTOR_RESTARTED'
                WHEN death_cause LIKE '{{"runtimeEnvFailedContext%' THEN 'RUNTIME_ENV_SETUP_FAILED'
                WHEN death_cause LIKE '{{"creationTaskFailureContext%' THEN 'ACTOR_CREATION_FAILED'
                WHEN death_cause LIKE '{{"oomContext%' THEN 'OUT_OF_MEMORY'
                WHEN death_cause LIKE '{{"actorUnschedulableContext%' THEN 'ACTOR_UNSCHEDULABLE_ERROR'
                ELSE 'ACTOR_DIED' END,
           coalesce(death_message, CASE WHEN state = 'RESTARTING'
                                        THEN printf('restarting (%s)', coalesce(restart_reason, 'no reason given'))
                                   END, ''),
           coalesce(death_cause, ''),
           CASE WHEN node_lost THEN 'node' ELSE 'worker' END, CASE WHEN node_lost THEN on_node ELSE on_worker END
    FROM steps
    WHERE (state = 'RESTARTING' AND coalesce(restart_reason, '') <> 'LINEAGE_RECONSTRUCTION')
       OR (first_death AND NOT normal_end)
    UNION ALL
    SELECT 'worker', worker_id, NULL, coalesce(end_ns, end_ms * 1000000), job_id, node_id, worker_id,
           {_WORKER_NAME},
           coalesce(exit_type, 'SYSTEM_ERROR'),
           coalesce(exit_detail, ''), '', 'node', node_id
    FROM workers w
    WHERE session = of_session AND state = 'DEAD' AND coalesce(exit_type, '') NOT IN {NORMAL_WORKER_EXITS}
      AND NOT EXISTS (SELECT 1 FROM steps a  -- its actor ended as it should, then Ray stopped it; or its death
                      WHERE a.on_worker = w.worker_id AND a.state = 'DEAD'  -- was its Serve replica's crash
                        AND (a.replica OR (a.normal_end AND a.ts <= coalesce(w.end_ns, w.end_ms * 1000000))))
    UNION ALL  -- workers and actors Ray still shows alive on a node that failed: consequences of its death
    SELECT 'worker', worker_id, NULL, inferred_end_ns, job_id, node_id, worker_id,
           {_WORKER_NAME}, 'NODE_DIED',
           inferred_reason, '', 'node', node_id
    FROM workers
    WHERE session = of_session AND state IS DISTINCT FROM 'DEAD' AND inferred_reason LIKE 'its node died%'
      AND node_id IN (SELECT id FROM failed_nodes)
    UNION ALL
    SELECT 'actor', actor_id, NULL, inferred_end_ns, job_id, node_id, worker_id, class_name, 'NODE_DIED',
           inferred_reason, '', 'node', node_id
    FROM actors
    WHERE session = of_session AND state IS DISTINCT FROM 'DEAD' AND inferred_reason LIKE 'its node died%'
      AND node_id IN (SELECT id FROM failed_nodes)
    UNION ALL
    SELECT * FROM failed_nodes
    UNION ALL  -- the requests that failed with a Serve replica that crashed: consequences of its crash
    SELECT 'request', request_id, NULL, ts_ns, job_id, NULL, NULL, coalesce(route, ''), 'REQUEST_FAILED', answer, '',
           'replica', actor_id
    FROM replica_requests(of_session)
    UNION ALL
    SELECT 'job', j.job_id, NULL, r.ended_ns, j.job_id, j.driver_node_id, NULL, coalesce(j.entrypoint, ''),
           'JOB_FAILED', printf('the driver exited with code %d', r.exit_code), '', NULL, NULL
    FROM jobs j JOIN job_run_exits() r USING (session, job_id)
    WHERE j.session = of_session AND r.exit_code <> 0""",
    table=True,
)
# Each failure's cause (the exception's type and message where it raised one, else its message), and its group
FAILURE_CAUSES = Macro(
    "failure_causes",
    ("of_session",),
    f"""
    SELECT *, left(md5(kind || ' ' || error_type || ' ' || cause), 12) AS group_id
    FROM (SELECT *, {template_sql("own_cause")} AS cause
          FROM (SELECT *, {_CAUSE_TEXT} AS own_cause
                FROM (SELECT *, {_EXC_TYPE} AS exception_type
                      FROM (SELECT *, {_EXCEPTION_LINE} AS exception_line FROM failures(of_session)))))""",
    table=True,
)
# Each failure with its root: what it followed from, along what it ran on (an entity's first failure is the one a
# consequence is tied to), up to three steps back, each of which came before the next
ROOTED_FAILURES = Macro(
    "rooted_failures",
    ("of_session",),
    """
    WITH grouped AS (FROM failure_causes(of_session)),
    firsts AS (
        SELECT kind, id, ts_ns, parent_kind, parent_id, group_id FROM grouped
        QUALIFY row_number() OVER (PARTITION BY kind, id ORDER BY ts_ns NULLS LAST, attempt) = 1
    )
    SELECT g.*,
           coalesce(p3.group_id, p2.group_id, p1.group_id) AS root_group,
           coalesce(p3.kind, p2.kind, p1.kind) AS root_kind, coalesce(p3.id, p2.id, p1.id) AS root_id
    FROM grouped g
    LEFT JOIN firsts p1 ON p1.kind = g.parent_kind AND p1.id = g.parent_id AND NOT (p1.kind = g.kind AND p1.id = g.id)
        AND came_before(p1.ts_ns, g.ts_ns)
    LEFT JOIN firsts p2 ON p2.kind = p1.parent_kind AND p2.id = p1.parent_id
        AND NOT (p2.kind = p1.kind AND p2.id = p1.id) AND came_before(p2.ts_ns, p1.ts_ns)
    LEFT JOIN firsts p3 ON p3.kind = p2.parent_kind AND p3.id = p2.parent_id
        AND NOT (p3.kind = p2.kind AND p3.id = p2.id) AND came_before(p3.ts_ns, p2.ts_ns)""",
    table=True,
)
MACROS = (
    # whether a failure at cause_ns can have caused one at effect_ns: only if it came first (give or take the clocks of
    # Ray's components)
    Macro(
        "came_before",
        ("cause_ns", "effect_ns"),
        "(cause_ns IS NULL OR effect_ns IS NULL OR cause_ns <= effect_ns + 5000000000)",
    ),
    ACTOR_STEPS,
    FAILED_TASKS,
    REPLICA_REQUESTS,
    NODE_FAILURES,
    FAILURES,
    FAILURE_CAUSES,
    ROOTED_FAILURES,
)


@dataclass(frozen=True)
class ErrorQuery:
    session: str
    job_id: str | None = None
    since_ns: int | None = None
    until_ns: int | None = None
    error_type: str | None = None


# The root failures of $session (of $job, from $since until $until, of the type $type: each where given) grouped by
# cause, most frequent first, each with its consequences
GROUPS = Query(
    "error groups",
    f"""
    WITH chosen AS (
        SELECT * REPLACE ({plain_sql("message")} AS message) FROM rooted_failures($session)
        WHERE ($job IS NULL OR job_id = $job) AND ($since IS NULL OR ts_ns >= $since)
          AND ($until IS NULL OR ts_ns < $until) AND ($type IS NULL OR upper(error_type) = upper($type))
    ),
    consequences AS (
        SELECT root_group AS group_id, kind, count(*) AS n,
               list(DISTINCT name) FILTER (WHERE kind <> 'worker') AS names
        FROM chosen WHERE root_group IS NOT NULL GROUP BY ALL
    )
    SELECT r.group_id, any_value(r.kind) AS kind, any_value(r.error_type) AS error_type,
           any_value(r.exception_type) AS exception_type, any_value(r.cause) AS error, count(*) AS count,
           min(r.ts_ns) // 1000000 AS first_ms, max(r.ts_ns) // 1000000 AS last_ms,
           list(DISTINCT r.name) FILTER (WHERE r.kind <> 'worker') AS names,
           list(DISTINCT r.node_id) FILTER (WHERE r.node_id IS NOT NULL) AS nodes,
           arg_max({{'kind': r.kind, 'id': r.id, 'attempt': r.attempt, 'error': r.own_cause, 'message': r.message}},
                   r.ts_ns) AS example,
           (SELECT list({{'kind': c.kind, 'count': c.n, 'names': c.names}}) FROM consequences c
            WHERE c.group_id = r.group_id) AS consequences
    FROM chosen r WHERE r.root_group IS NULL
    GROUP BY r.group_id ORDER BY count DESC, first_ms, r.group_id""",
)
AFFECTED_SHOWN = 10
# A crashed Serve replica's ID (its actor's name ends with it), the replica that replaced it (of its deployment, the
# first started after it died) and the requests that failed with it
REPLICA = Query(
    "serve replica",
    f"""
    SELECT regexp_extract(d.name, '#([^#]*)$', 1) AS replica_id,
           (SELECT {{'actor_id': r.actor_id, 'replica_id': regexp_extract(r.name, '#([^#]*)$', 1),
                     'start_time_ms': r.start_ns // 1000000}}
            FROM actors r
            WHERE r.session = d.session AND r.class_name = d.class_name AND r.actor_id <> d.actor_id
              AND r.start_ns >= coalesce(d.end_ns, d.inferred_end_ns)
            ORDER BY r.start_ns LIMIT 1) AS replacement,
           coalesce((SELECT list(DISTINCT request_id ORDER BY request_id) FROM replica_requests($session)
                     WHERE actor_id = d.actor_id), []) AS failed_requests
    FROM actors d WHERE d.session = $session AND d.actor_id = $id AND d.ray_namespace = '{SERVE_NAMESPACE}'""",
    about="the Serve replica of the actor $id, the replica that replaced it, and the requests that failed with it",
)


def error_groups(con: duckdb.DuckDBPyConnection, query: ErrorQuery) -> list[dict[str, Any]]:
    """The root failures of ``query``'s session grouped by cause, most frequent first, each with its consequences;
    a crashed Serve replica's example with its replica's ID, its replacement and the requests that failed with it."""
    params = {
        "session": query.session,
        "job": query.job_id or None,
        "since": query.since_ns,
        "until": query.until_ns,
        "type": query.error_type or None,
    }
    groups = [_group(row) for row in dict_rows(con.execute(GROUPS.sql, params))]
    for group in groups:
        if group["kind"] == "replica":
            group["example"].update(serve_replica(con, query.session, group["example"]["id"]))
    return groups


def serve_replica(con: duckdb.DuckDBPyConnection, session: str, actor_id: str) -> dict[str, Any]:
    """The Serve replica of the actor ``actor_id`` (:data:`REPLICA`); nothing for another actor."""
    found = dict_rows(con.execute(REPLICA.sql, {"session": session, "id": actor_id}))
    return found[0] if found else {}


def _group(row: dict[str, Any]) -> dict[str, Any]:
    """A group as the API gives it: its consequences by kind, and the names of the functions, classes, nodes and
    jobs it affected (a worker's name is its PID: the functions it ran say more)."""
    consequences = row.pop("consequences") or []
    names = set(row.pop("names") or ()) | {name for c in consequences for name in c["names"] or ()}
    return {
        **row,
        "nodes": (row["nodes"] or [])[:AFFECTED_SHOWN],
        "affected": sorted(n for n in names if n)[:AFFECTED_SHOWN],
        "consequences": {f"{c['kind']}s": c["count"] for c in consequences},
    }


SHOWN_LINES = 20  # of a worker's output before it failed, and of a task attempt's own (twice as many of Ray's own)
NEARBY_NS = 5 * 10**9  # failures this close in time on the same node or worker are shown beside one


# What a failure is given as (its message with a terminal's escapes only where $colours), in time order
_FAILURE_COLUMNS = f"""kind, id, attempt, ts_ns // 1000000 AS time_ms, job_id, node_id, worker_id, name, error_type,
    exception_type, cause AS error, CASE WHEN $colours THEN message ELSE {plain_sql("message")} END AS message,
    {plain_json_sql("detail")} AS detail, group_id, root_kind, root_id"""
_IN_ORDER = "ORDER BY ts_ns, kind, id, attempt LIMIT 1000"
NAMED_FAILURES = Query(
    "failures named",
    f"SELECT {_FAILURE_COLUMNS} FROM rooted_failures($session) WHERE id = $id OR group_id = $id {_IN_ORDER}",
    about="the failures of the entity $id, or of the group $id",
)
NEARBY_FAILURES = Query(
    "failures beside",
    f"""SELECT {_FAILURE_COLUMNS} FROM rooted_failures($session)
        WHERE NOT (kind = $kind AND id = $id) AND abs(ts_ns // 1000000 - $ms) <= $near
          AND (node_id = $node OR worker_id = $worker) {_IN_ORDER}""",
    about="the other failures within $near ms of $ms on the node $node or the worker $worker",
)
ATTEMPTS = Query(
    "attempts",
    """SELECT attempt, task_state(inferred_state, reported_state) AS state,
              coalesce(error_type, inferred_error_type) AS error_type, end_ns // 1000000 AS end_time_ms
       FROM tasks WHERE session = $session AND task_id = $id ORDER BY attempt""",
    about="each attempt of the task $id",
)


CAN_FAIL = (TASKS, ACTORS, WORKERS, NODES, JOBS)  # the entities whose failures these are


def failure(con: duckdb.DuckDBPyConnection, session: str, failure_id: str, colours: bool = False) -> dict[str, Any]:
    """One failure whole (a task's, actor's, worker's, node's or job's ID: each of its failures), or a group (its
    ID: its failures): what failed and where, why, what it followed from, its attempts, the log lines before it, and
    what failed beside it; no failures for an entity that did not fail. Each message without a terminal's escapes,
    unless ``colours`` (for a terminal). NotFound when that ID names nothing in ``session``."""
    found = _failures(con, NAMED_FAILURES, {"session": session, "id": failure_id, "colours": colours})
    if not found:
        if not any(_named(con, res, session, failure_id) for res in CAN_FAIL):
            raise NotFound(
                f"no task, actor, worker, node, job or group of failures has ID {failure_id} in {session}; "
                "`raysight errors` lists what failed"
            )
        return {"session": session, "id": failure_id, "failures": []}
    if found[0]["group_id"] == failure_id and found[0]["id"] != failure_id:
        return {"session": session, "group_id": failure_id, "failures": found}
    for one in found:
        one["logs"] = _logs_before(con, session, one)
        one["beside"] = _failures(
            con,
            NEARBY_FAILURES,
            {
                "session": session,
                "colours": False,
                "kind": one["kind"],
                "id": one["id"],
                "ms": one["time_ms"] or 0,
                "near": NEARBY_NS // 10**6,
                "node": one["node_id"],
                "worker": one["worker_id"],
            },
        )[:SHOWN_LINES]
        if one["kind"] == "replica":
            one.update(serve_replica(con, session, one["id"]))
    out: dict[str, Any] = {"session": session, "id": failure_id, "failures": found}
    if found[0]["kind"] == "task":
        out["attempts"] = dict_rows(con.execute(ATTEMPTS.sql, {"session": session, "id": failure_id}))
    return out


def _failures(con: duckdb.DuckDBPyConnection, query: Query, params: dict[str, object]) -> list[dict[str, Any]]:
    return dict_rows(con.execute(query.sql, params))


def _named(con: duckdb.DuckDBPyConnection, res: Resource, session: str, entity_id: str) -> bool:
    """Whether ``res`` has an entity of that ID in ``session``."""
    return list_page(con, res, session=session, filters=[Filter(res.id_field, "=", entity_id)], limit=0).total > 0


def _logs_before(con: duckdb.DuckDBPyConnection, session: str, one: dict[str, Any]) -> dict[str, Any]:
    """The lines a failure printed (a task attempt's own), its worker's last lines before it, and what Ray's
    components said of it."""
    until = None if one["time_ms"] is None else (one["time_ms"] + 1000) * 10**6
    last = LogQuery(session, limit=SHOWN_LINES, newest=True)  # the last lines of what each query finds
    logs: dict[str, Any] = {}
    if one["kind"] == "task":
        logs["own"] = _lines(con, replace(last, task_id=one["id"], attempt=one["attempt"]))
    if one["worker_id"]:  # its output (stdout and stderr), not its core worker's own log
        printed = [
            row
            for stream in ("stdout", "stderr")
            for row in _lines(con, replace(last, worker_id=one["worker_id"], stream=stream, until_ns=until))
        ]
        logs["worker"] = _last(printed)
    # What Ray's components (raylet, GCS, agents) said of it: their lines that name its worker, actor or node, and
    # for a runtime env that could not be set up, the last lines of its job's set-up log and of the agent's own
    named = {"worker": one["worker_id"], "actor": one["id"] if one["kind"] == "actor" else None}
    if one["kind"] == "node":
        named["node"] = one["id"]
    system = [
        row
        for needle in filter(None, named.values())
        for row in _lines(con, replace(last, stream="system", grep=needle, until_ns=until))
    ]
    if one["kind"] == "node":  # the GCS declares a node dead (and why): its lines, whatever the others said since
        system += _lines(con, replace(last, file="gcs_server.", grep=one["id"]))
    if one["error_type"] == "RUNTIME_ENV_SETUP_FAILED":
        for name in (f"runtime_env_setup-{one['job_id']}.", "runtime_env_agent."):
            system += _lines(con, replace(last, file=name, node_id=one["node_id"], until_ns=until))
    if system:
        logs["system"] = _last(system, 2 * SHOWN_LINES)
    return logs


def _lines(con: duckdb.DuckDBPyConnection, query: LogQuery) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = orjson.loads(log_lines(con, query, count=False).rows)
    return lines


def _last(lines: list[dict[str, Any]], shown: int = SHOWN_LINES) -> list[dict[str, Any]]:
    """The last ``shown`` of lines found by several queries, each once, in the order stored."""
    return sorted({row["seq"]: row for row in lines}.values(), key=lambda row: row["seq"])[-shown:]
