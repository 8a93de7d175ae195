"""Truth over Ray's own view: infer the end of task attempts whose terminal state Ray never sent.

Ray's stream loses a dying worker's last second and a local cluster's final events. When other evidence says an
attempt is over (a later attempt, its worker's or node's death, the end of its job or session), the attempt gets
``inferred_state`` and ``inferred_reason``. A terminal state that Ray reports later always wins and clears them.
"""

from __future__ import annotations

import duckdb

from raysight.store.schema import TERMINAL

# A session has ended when `raysight run` saw the driver that started its local cluster exit, or all its nodes died.
SESSION_ENDS = """
    SELECT s.session,
           coalesce(r.ended_ns, CASE WHEN n.alive = 0 AND n.total > 0 THEN n.last_dead END) AS ended_ns,
           CASE WHEN r.ended_ns IS NOT NULL THEN 'the driver that started this local cluster exited'
                WHEN n.alive = 0 AND n.total > 0 THEN 'every node of the cluster died' END AS end_reason
    FROM sessions s
    LEFT JOIN run_exits r ON r.run_id = s.run_id
    LEFT JOIN (SELECT session, count(*) AS total, count(*) FILTER (state IS DISTINCT FROM 'DEAD') AS alive,
                      max(end_ns) AS last_dead
               FROM nodes GROUP BY session) n ON n.session = s.session
"""

_CLEAR = f"""
UPDATE tasks SET inferred_state = NULL, inferred_reason = NULL, inferred_error_type = NULL
WHERE session IN (SELECT unnest($1::VARCHAR[])) AND inferred_state IS NOT NULL AND reported_state IN {TERMINAL}
"""

_INFER = f"""
WITH open AS (
    SELECT session, task_id, attempt, coalesce(worker_id, exec_worker_id) AS worker_id, node_id, job_id,
           coalesce(reported_state, 'NIL') AS state, executed_ns
    FROM tasks
    WHERE session IN (SELECT unnest($1::VARCHAR[])) AND coalesce(reported_state, 'NIL') NOT IN {TERMINAL}
),
retried AS (
    SELECT o.session, o.task_id, o.attempt, min(t.attempt) AS next_attempt
    FROM open o JOIN tasks t ON t.session = o.session AND t.task_id = o.task_id AND t.attempt > o.attempt
    GROUP BY ALL
),
ends AS ({SESSION_ENDS}),
job_ends AS (
    SELECT j.session, j.job_id, coalesce(j.end_ns, r.ended_ns) AS ended_ns
    FROM jobs j JOIN sessions s USING (session)
    LEFT JOIN run_exits r ON r.run_id = s.run_id AND r.driver_pid = j.driver_pid
),
evidence AS (
    SELECT o.session, o.task_id, o.attempt, o.state, o.executed_ns, rt.next_attempt,
           w.worker_id AS dead_worker, w.exit_type, w.exit_detail,
           n.node_id AS dead_node, n.death_reason,
           je.ended_ns AS job_ended_ns, e.ended_ns AS session_ended_ns, e.end_reason,
           (w.worker_id IS NOT NULL OR n.node_id IS NOT NULL OR je.ended_ns IS NOT NULL
            OR e.ended_ns IS NOT NULL) AS ended
    FROM open o
    LEFT JOIN retried rt USING (session, task_id, attempt)
    LEFT JOIN workers w ON w.session = o.session AND w.worker_id = o.worker_id AND w.state = 'DEAD'
    LEFT JOIN nodes n ON n.session = o.session AND n.node_id = o.node_id AND n.state = 'DEAD'
    LEFT JOIN job_ends je ON je.session = o.session AND je.job_id = o.job_id
    LEFT JOIN ends e ON e.session = o.session
),
verdict AS (
    SELECT session, task_id, attempt,
        CASE
          WHEN next_attempt IS NOT NULL THEN 'FAILED'
          WHEN executed_ns IS NOT NULL AND ended
            THEN 'FINISHED'
          WHEN ended THEN 'FAILED'
        END AS state,
        CASE
          WHEN next_attempt IS NOT NULL THEN
            printf('attempt %d was started, so this attempt failed; Ray never sent its end state', next_attempt)
          WHEN executed_ns IS NOT NULL AND ended
            THEN 'the executing worker recorded the end of execution, but its owner never sent the end state'
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
          WHEN next_attempt IS NOT NULL OR executed_ns IS NOT NULL THEN NULL
          WHEN dead_worker IS NOT NULL THEN 'WORKER_DIED'
          WHEN dead_node IS NOT NULL THEN 'NODE_DIED'
        END AS error_type
    FROM evidence
)
UPDATE tasks SET inferred_state = v.state, inferred_reason = v.reason, inferred_error_type = v.error_type
FROM verdict v
WHERE tasks.session = v.session AND tasks.task_id = v.task_id AND tasks.attempt = v.attempt
  AND v.state IS NOT NULL
  AND (tasks.inferred_state IS DISTINCT FROM v.state OR tasks.inferred_reason IS DISTINCT FROM v.reason)
"""


# An attempt Ray sent no definition for (an actor's restart, a retry whose owner died) takes its attempt 0's.
_BORROW_DEFINITION = """
UPDATE tasks SET type = d.type, name = d.name, func_or_class_name = d.func_or_class_name, module_name = d.module_name,
       language = d.language, actor_id = d.actor_id, parent_task_id = d.parent_task_id,
       job_id = coalesce(tasks.job_id, d.job_id)
FROM tasks d
WHERE tasks.session IN (SELECT unnest($1::VARCHAR[])) AND tasks.defined IS NULL
  AND d.session = tasks.session AND d.task_id = tasks.task_id AND d.defined AND d.attempt = 0 AND tasks.attempt > 0
"""


def reconcile(con: duckdb.DuckDBPyConnection, sessions: list[str]) -> None:
    """Re-derive inferred task states for ``sessions``, inside the caller's transaction."""
    if sessions:
        con.execute(_BORROW_DEFINITION, [sessions])
        con.execute(_CLEAR, [sessions])
        con.execute(_INFER, [sessions])
