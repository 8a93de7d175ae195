"""Truth over Ray's own view: infer the ends Ray never sent, and say why.

Ray's stream loses a dying worker's last second, a local cluster's final events, and everything a stopped `ray start`
cluster would have said of its own end. When other evidence says a task attempt is over (a later attempt, its worker's
or node's death, its actor coming alive or dying during it, the end of its job or session), the attempt gets
``inferred_state`` and ``inferred_reason``: how raysight's span of it ended, where there is one (``attempt_ends``: it
returned, or raised), else what ended it (a driver's task ends with its driver, finished unless the driver exited with
an error: Ray's dashboard runs drivers of its own until the cluster ends); when the session is over, so do its nodes,
workers and actors that Ray still shows alive (with ``inferred_end_ns``). A terminal state that Ray reports later
always wins and clears them.
"""

from __future__ import annotations

from collections.abc import Callable

import duckdb

from raysight.store.event_stages import TERMINAL_SQL
from raysight.store.schema import task_actor_id_sql, task_kind_sql

# Every statement here reads only the rows of the sessions being reconciled (``$1``): a fold then costs what those
# hold, not what the whole history does.
_SESSIONS = "(SELECT unnest($1::VARCHAR[]))"

# What node agents saw gone, of the sessions meeting ``{scope}``: each process whose newest sighting (of any host)
# says so, with when it was last known running (``dead_ns``) and the words for it.
_GONE = """
    SELECT session, process, node_id, coalesce(arg_max(last_alive_ns, ns), max(ns)) AS dead_ns,
           printf('its %s (pid %s) on %s was gone by %s UTC, as raysight''s node agent saw', process,
                  coalesce(arg_max(pid, ns)::VARCHAR, 'unknown'), arg_max(host, ns),
                  strftime(make_timestamp(max(ns) // 1000), '%Y-%m-%d %H:%M:%S')) AS seen
    FROM node_evidence WHERE {scope} GROUP BY session, process, node_id HAVING NOT arg_max(alive, ns)"""


def _node_deaths(scope: str) -> str:
    """The dead nodes of the sessions meeting ``scope``: as Ray reported (its end and death reason), else as a node
    agent saw their raylet gone."""
    return f"""
    SELECT session, node_id, end_ns, coalesce(death_reason, 'unknown reason') AS why
    FROM nodes WHERE {scope} AND state = 'DEAD'
    UNION ALL
    SELECT g.session, g.node_id, g.dead_ns, g.seen
    FROM ({_GONE.format(scope=scope)}) g ANTI JOIN (SELECT session, node_id FROM nodes WHERE {scope} AND state = 'DEAD')
        USING (session, node_id)
    WHERE g.process = 'raylet'"""


# A session has ended when `raysight run` saw the driver that started its local cluster exit, or a node agent saw
# its GCS gone, or all its nodes died, or (for a cluster raysight run did not start: `ray start`, whose stop Ray
# never reports, watched by no agent) when its successor began: the session of the same label that began first after
# this one's last event (one cluster runs one session at a time). Sessions that overlap are different clusters
# under one label, and end none of each other.
_SUCCESSOR = """
    ASOF LEFT JOIN (SELECT session AS next_session, label, first_ns FROM sessions WHERE first_ns IS NOT NULL) l
    ON s.label = l.label AND s.last_ns < l.first_ns"""


ALL_NODES_DIED = "every node of the cluster died"
# The run exit (``r``) of a job (``j``, of session ``s``) whose driver `raysight run` ran: the driver it started the
# cluster for, or one that joined a cluster `raysight run` did not start (the session it joined, reported)
RUN_EXIT_OF_JOB = (
    "r.driver_pid = j.driver_pid AND (r.run_id = s.run_id OR r.session = j.session) "
    "AND r.ended_ns >= coalesce(j.start_ns, 0)"
)


def _session_ends(scope: str) -> str:
    """When each session whose ``session`` meets the condition ``scope`` ended (NULL while it runs), and why."""
    return f"""
    SELECT s.session,
           coalesce(r.ended_ns, g.dead_ns, CASE WHEN n.alive = 0 AND n.total > 0 THEN n.last_dead END,
                    CASE WHEN s.run_id IS NULL AND l.next_session IS NOT NULL THEN s.last_ns END) AS ended_ns,
           CASE WHEN r.ended_ns IS NOT NULL THEN 'the driver that started this local cluster exited'
                WHEN g.dead_ns IS NOT NULL THEN g.seen
                WHEN n.alive = 0 AND n.total > 0 THEN '{ALL_NODES_DIED}'
                WHEN s.run_id IS NULL AND l.next_session IS NOT NULL
                THEN printf('a later session of cluster %s began, %s; this one ended after its last event',
                            s.label, l.next_session) END AS end_reason
    FROM (SELECT * FROM sessions WHERE {scope}) s
    {_SUCCESSOR}
    LEFT JOIN run_exits r ON r.run_id = s.run_id
    LEFT JOIN ({_GONE.format(scope=scope)}) g ON g.session = s.session AND g.process = 'gcs_server'
    LEFT JOIN (SELECT n.session, count(*) AS total, count(*) FILTER (d.node_id IS NULL) AS alive,
                      max(d.end_ns) AS last_dead
               FROM (SELECT * FROM nodes WHERE {scope}) n LEFT JOIN ({_node_deaths(scope)}) d USING (session, node_id)
               GROUP BY n.session) n ON n.session = s.session
"""


SESSION_ENDS = _session_ends("true")
_ENDS = _session_ends(f"session IN {_SESSIONS}")
_DEATHS = _node_deaths(f"session IN {_SESSIONS}")
# The sessions whose inferences a fold of ``$1`` may change: those, the sessions they succeed, and the sessions of
# the same label they overlap (one of those may have had a successor here until this one's first event moved earlier).
_AFFECTED = f"""
    SELECT unnest($1::VARCHAR[])
    UNION SELECT s.session FROM (SELECT * FROM sessions WHERE run_id IS NULL) s {_SUCCESSOR}
          WHERE l.next_session IN {_SESSIONS}
    UNION SELECT s.session FROM sessions s JOIN sessions x ON x.label = s.label AND x.session <> s.session
          WHERE x.session IN {_SESSIONS} AND s.run_id IS NULL
            AND s.last_ns >= x.first_ns AND s.first_ns <= x.last_ns
"""

_CLEAR = f"""
UPDATE tasks SET inferred_state = NULL, inferred_reason = NULL, inferred_error_type = NULL
WHERE session IN {_SESSIONS} AND inferred_state IS NOT NULL AND reported_state IN {TERMINAL_SQL}
"""

_INFER = f"""
WITH open AS (
    SELECT session, task_id, attempt, coalesce(worker_id, exec_worker_id) AS worker_id, node_id, job_id,
           coalesce(reported_state, 'NIL') AS state, executed_ns, least(first_ns, exec_start_ns) AS begun_ns,
           {task_kind_sql("task_id")} = 'DRIVER_TASK' AS driver
    FROM tasks
    WHERE session IN {_SESSIONS} AND coalesce(reported_state, 'NIL') NOT IN {TERMINAL_SQL}
),
retried AS (
    SELECT o.session, o.task_id, o.attempt, min(t.attempt) AS next_attempt,
           min(least(t.first_ns, t.exec_start_ns)) AS next_begun_ns
    FROM open o JOIN tasks t ON t.session = o.session AND t.task_id = o.task_id AND t.attempt > o.attempt
    WHERE t.session IN {_SESSIONS}
    GROUP BY ALL
),
ends AS ({_ENDS}),
job_ends AS (
    SELECT j.session, j.job_id, coalesce(j.end_ns, r.ended_ns) AS ended_ns, r.exit_code
    FROM jobs j JOIN sessions s USING (session)
    LEFT JOIN run_exits r ON {RUN_EXIT_OF_JOB}
    WHERE j.session IN {_SESSIONS}
),
evidence AS (
    SELECT o.session, o.task_id, o.attempt, o.state, o.executed_ns, o.driver, rt.next_attempt,
           s.span_id, s.trace_id, s.error AS span_error,
           w.worker_id AS dead_worker, w.exit_type, w.exit_detail,
           n.node_id AS dead_node, n.why AS death_reason,
           je.ended_ns AS job_ended_ns, je.exit_code, e.ended_ns AS session_ended_ns, e.end_reason,
           (w.worker_id IS NOT NULL OR n.node_id IS NOT NULL OR je.ended_ns IS NOT NULL
            OR e.ended_ns IS NOT NULL) AS ended
    FROM open o
    LEFT JOIN retried rt USING (session, task_id, attempt)
    LEFT JOIN (SELECT * FROM workers WHERE session IN {_SESSIONS} AND state = 'DEAD') w
        ON w.session = o.session AND w.worker_id = o.worker_id
    LEFT JOIN ({_DEATHS}) n ON n.session = o.session AND n.node_id = o.node_id
    LEFT JOIN job_ends je ON je.session = o.session AND je.job_id = o.job_id
    LEFT JOIN ends e ON e.session = o.session
    LEFT JOIN (SELECT * FROM attempt_ends WHERE session IN {_SESSIONS}) s USING (session, task_id, attempt)
),
-- An actor creation task's ID holds its actor's. Each attempt runs the constructor once, so the actor's first ALIVE
-- or DEAD from that attempt's start until the next one's tells whether that attempt finished.
created AS (
    SELECT o.session, o.task_id, o.attempt,
           list_filter(a.history, lambda h: h.state IN ('ALIVE', 'DEAD') AND h.ts >= o.begun_ns
                                             AND (rt.next_begun_ns IS NULL OR h.ts < rt.next_begun_ns))[1] AS outcome
    FROM open o LEFT JOIN retried rt USING (session, task_id, attempt)
    JOIN actors a ON a.session = o.session AND a.actor_id = {task_actor_id_sql("o.task_id")}
    WHERE {task_kind_sql("o.task_id")} = 'ACTOR_CREATION_TASK' AND a.session IN {_SESSIONS}
),
verdict AS (
    SELECT session, task_id, attempt,
        CASE
          WHEN c.outcome.state = 'ALIVE' THEN 'FINISHED'
          WHEN c.outcome.state = 'DEAD' OR next_attempt IS NOT NULL THEN 'FAILED'
          WHEN spanned THEN CASE WHEN span_error IS NULL THEN 'FINISHED' ELSE 'FAILED' END
          WHEN driver_ended THEN CASE WHEN exit_code <> 0 THEN 'FAILED' ELSE 'FINISHED' END
          WHEN executed_ns IS NOT NULL AND ended THEN 'NIL'  -- Ray's "unknown": an end of execution is no success
          WHEN ended THEN 'FAILED'
        END AS state,
        CASE
          WHEN c.outcome.state = 'ALIVE'
            THEN 'its actor became ALIVE, so its creation finished; Ray never sent its end state'
          WHEN c.outcome.state = 'DEAD' THEN
            printf('its actor died before becoming ALIVE (%s), so its creation failed; Ray never sent its end state',
                   coalesce(c.outcome.death_message, 'no reason given'))
          WHEN next_attempt IS NOT NULL THEN
            printf('attempt %d was started, so this attempt failed; Ray never sent its end state', next_attempt)
          WHEN spanned AND span_error IS NULL THEN
            printf('raysight''s span of this attempt (span %s of trace %s) ended without an exception, so it '
                   || 'returned; Ray never sent its end state (it could still have failed storing the returned value)',
                   span_id, trace_id)
          WHEN spanned THEN
            printf('raysight''s span of this attempt (span %s of trace %s) recorded the exception it raised; Ray '
                   || 'never sent its end state:', span_id, trace_id) || chr(10) || span_error
          WHEN driver_ended THEN
            printf('a driver''s task lasts as long as its driver, which %s; Ray never sent its end state',
                   CASE WHEN exit_code IS NOT NULL THEN printf('exited with code %d', exit_code)
                        WHEN job_ended_ns IS NOT NULL THEN 'ended with its job'
                        ELSE printf('ran until the cluster ended (%s)', end_reason) END)
          WHEN executed_ns IS NOT NULL AND ended
            THEN 'outcome unknown: the executing worker recorded the end of execution, but its owner never sent '
                 || 'whether it finished or failed'
          WHEN dead_worker IS NOT NULL THEN
            printf('its worker died while it was %s (%s: %s); Ray never sent its end state',
                   state, coalesce(exit_type, 'unknown exit'), coalesce(exit_detail, ''))
          WHEN dead_node IS NOT NULL THEN
            printf('its node died while it was %s (%s); Ray never sent its end state',
                   state, coalesce(death_reason, 'unknown reason'))
          WHEN job_ended_ns IS NOT NULL THEN
            printf('its job ended while it was %s; Ray never sent its end state', state)
          WHEN session_ended_ns IS NOT NULL THEN
            printf('the cluster ended (%s) while it was %s; Ray never sent its end state', end_reason, state)
        END AS reason,
        CASE
          WHEN c.outcome.state = 'DEAD' THEN 'ACTOR_DIED'
          WHEN next_attempt IS NOT NULL OR c.outcome IS NOT NULL THEN NULL
          WHEN spanned AND span_error IS NOT NULL THEN 'TASK_EXECUTION_EXCEPTION'
          WHEN executed_ns IS NOT NULL OR spanned OR driver_ended THEN NULL
          WHEN dead_worker IS NOT NULL THEN 'WORKER_DIED'
          WHEN dead_node IS NOT NULL THEN 'NODE_DIED'
        END AS error_type
    FROM (SELECT *, span_id IS NOT NULL AND ended AS spanned,  -- its span says how it ended
                    driver AND dead_worker IS NULL AND dead_node IS NULL AND ended AS driver_ended  -- with its driver
          FROM evidence) LEFT JOIN created c USING (session, task_id, attempt)
)
UPDATE tasks SET inferred_state = v.state, inferred_reason = v.reason, inferred_error_type = v.error_type
FROM verdict v
WHERE tasks.session IN {_SESSIONS}
  AND tasks.session = v.session AND tasks.task_id = v.task_id AND tasks.attempt = v.attempt
  AND v.state IS NOT NULL
  AND (tasks.inferred_state IS DISTINCT FROM v.state OR tasks.inferred_reason IS DISTINCT FROM v.reason)
"""


# An attempt Ray sent no definition for (an actor's restart, a retry whose owner died) takes its attempt 0's.
_BORROW_DEFINITION = f"""
UPDATE tasks SET type = d.type, name = d.name, func_or_class_name = d.func_or_class_name, module_name = d.module_name,
       language = d.language, actor_id = d.actor_id, parent_task_id = d.parent_task_id,
       job_id = coalesce(tasks.job_id, d.job_id)
FROM tasks d
WHERE tasks.session IN {_SESSIONS} AND tasks.defined IS NULL AND d.session IN {_SESSIONS}
  AND d.session = tasks.session AND d.task_id = tasks.task_id AND d.defined AND d.attempt = 0 AND tasks.attempt > 0
"""


def _inferred_end(table: str, key: str, evidence: str) -> str:
    """Set ``table``'s inferred end for the sessions in ``$1`` from ``evidence`` (a SELECT of session, ``key``,
    state, reason and end_ns for the rows Ray still shows alive on a dead node or in an ended session, which may read
    ``ends`` and ``deaths``; any other row's is cleared), writing only the rows whose inference changed."""
    return f"""
WITH ends AS ({_ENDS}), deaths AS ({_DEATHS}),
verdict AS (
    SELECT x.session, x.{key}, v.state, v.reason, v.end_ns
    FROM {table} x LEFT JOIN ({evidence}) v USING (session, {key})
    WHERE x.session IN {_SESSIONS}
)
UPDATE {table} SET inferred_state = v.state, inferred_reason = v.reason, inferred_end_ns = v.end_ns
FROM verdict v
WHERE {table}.session IN {_SESSIONS} AND {table}.session = v.session AND {table}.{key} = v.{key}
  AND ({table}.inferred_state IS DISTINCT FROM v.state OR {table}.inferred_reason IS DISTINCT FROM v.reason
       OR {table}.inferred_end_ns IS DISTINCT FROM v.end_ns)
"""


def _ended(table: str, alias: str, state: str, node_died: str, on: str = "") -> str:
    """The columns state, reason and end_ns of the rows of ``table`` (as ``alias``, in ``state``) that ``d``
    (``deaths``, joined where their node is dead and ``on`` holds) or ``e`` (``ends``) end, and the clauses that keep
    only those rows; ``node_died``: the reason's words when the node died, with a %s for how."""
    return f"""'DEAD' AS state,
        CASE WHEN d.node_id IS NOT NULL THEN printf('{node_died}; Ray never sent its end', d.why)
             ELSE printf('the cluster ended (%s) while it was %s; Ray never sent its end', e.end_reason, {state})
        END AS reason,
        CASE WHEN d.node_id IS NOT NULL THEN d.end_ns ELSE e.ended_ns END AS end_ns
    FROM {table} {alias} LEFT JOIN deaths d ON d.session = {alias}.session AND d.node_id = {alias}.node_id{on}
    LEFT JOIN ends e ON e.session = {alias}.session
    WHERE {alias}.session IN {_SESSIONS} AND {alias}.state IS DISTINCT FROM 'DEAD'
      AND (d.node_id IS NOT NULL OR e.ended_ns IS NOT NULL)"""


_END_NODES = _inferred_end(
    "nodes",
    "node_id",
    "SELECT n.session, n.node_id, " + _ended("nodes", "n", "coalesce(n.state, 'ALIVE')", "%s"),
)
_END_WORKERS = _inferred_end(
    "workers",
    "worker_id",
    "SELECT w.session, w.worker_id, " + _ended("workers", "w", "'alive'", "its node died (%s)"),
)
# An actor is ended by its node's death only while it is ALIVE there (else Ray may be restarting it elsewhere).
_END_ACTORS = _inferred_end(
    "actors",
    "actor_id",
    "SELECT a.session, a.actor_id, "
    + _ended(
        "actors",
        "a",
        "coalesce(a.state, 'DEPENDENCIES_UNREADY')",
        "its node died while it was ALIVE (%s)",
        on=" AND a.state = 'ALIVE'",
    ),
)


# Nodes', workers' and actors' inferred ends change only where a session has ended, a node is dead, or an end was
# inferred before (to be kept, changed or cleared): a live, healthy session's fold skips their three statements.
_ENDS_AT_STAKE = f"""
SELECT EXISTS (SELECT 1 FROM ({_ENDS}) WHERE ended_ns IS NOT NULL)
    OR EXISTS (SELECT 1 FROM nodes WHERE session IN {_SESSIONS} AND (state = 'DEAD' OR inferred_state IS NOT NULL))
    OR EXISTS (SELECT 1 FROM node_evidence WHERE session IN {_SESSIONS} AND NOT alive)
    OR EXISTS (SELECT 1 FROM workers WHERE session IN {_SESSIONS} AND inferred_state IS NOT NULL)
    OR EXISTS (SELECT 1 FROM actors WHERE session IN {_SESSIONS} AND inferred_state IS NOT NULL)
"""


def reconcile(run: Callable[[str, list[list[str]]], duckdb.DuckDBPyConnection], sessions: list[str]) -> None:
    """Re-derive what is inferred of ``sessions`` (and of the sessions they end) with ``run`` (the store's, inside
    its transaction)."""
    if not sessions:
        return
    affected = [row[0] for row in run(_AFFECTED, [sessions]).fetchall()]
    for statement in (_BORROW_DEFINITION, _CLEAR, _INFER):
        run(statement, [affected])
    if run(_ENDS_AT_STAKE, [affected]).fetchall() == [(True,)]:
        for statement in (_END_NODES, _END_WORKERS, _END_ACTORS):
            run(statement, [affected])
