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

from raysight.signals.ray_events.event_stages import SESSIONS, TERMINAL_SQL
from raysight.store.schema import task_actor_id_sql, task_kind_sql
from raysight.store.statements import Group, Macro, Query, Stage, bind

# Every statement here reads only the rows of the sessions being reconciled (``$sessions``, or a macro's
# ``of_sessions``): a fold then costs what those hold, not what the whole history does.
_SESSIONS = "(SELECT unnest($sessions::VARCHAR[]))"
_OF_SESSIONS = "(SELECT unnest(of_sessions::VARCHAR[]))"

# What node agents saw gone: each process whose newest sighting (of any host) says so, with when it was last known
# running (``dead_ns``) and the words for it.
GONE_PROCESSES = Macro(
    "gone_processes",
    ("of_sessions",),
    f"""
    SELECT session, process, node_id, coalesce(arg_max(last_alive_ns, ns), max(ns)) AS dead_ns,
           printf('its %s (pid %s) on %s was gone by %s UTC, as raysight''s node agent saw', process,
                  coalesce(arg_max(pid, ns)::VARCHAR, 'unknown'), arg_max(host, ns),
                  strftime(make_timestamp(max(ns) // 1000), '%Y-%m-%d %H:%M:%S')) AS seen
    FROM node_evidence WHERE session IN {_OF_SESSIONS}
    GROUP BY session, process, node_id HAVING NOT arg_max(alive, ns)""",
    table=True,
)
# The dead nodes: as Ray reported (its end and death reason), else as a node agent saw their raylet gone.
NODE_DEATHS = Macro(
    "node_deaths",
    ("of_sessions",),
    f"""
    SELECT session, node_id, end_ns, coalesce(death_reason, 'unknown reason') AS why
    FROM nodes WHERE session IN {_OF_SESSIONS} AND state = 'DEAD'
    UNION ALL
    SELECT g.session, g.node_id, g.dead_ns, g.seen
    FROM gone_processes(of_sessions) g
    ANTI JOIN (SELECT session, node_id FROM nodes WHERE session IN {_OF_SESSIONS} AND state = 'DEAD')
        USING (session, node_id)
    WHERE g.process = 'raylet'""",
    table=True,
)
# Each session with ``next_session``, its successor: the session of the same label that began first after this one's
# last event (one cluster runs one session at a time), if any.
SESSION_SUCCESSORS = Macro(
    "session_successors",
    (),
    """
    SELECT s.*, l.next_session FROM sessions s
    ASOF LEFT JOIN (SELECT session AS next_session, label, first_ns FROM sessions WHERE first_ns IS NOT NULL) l
    ON s.label = l.label AND s.last_ns < l.first_ns""",
    table=True,
)

ALL_NODES_DIED = "every node of the cluster died"
# When each session ended (NULL while it runs), and why. A session has ended when `raysight run` saw the driver that
# started its local cluster exit, or a node agent saw its GCS gone, or all its nodes died, or (for a cluster raysight
# run did not start: `ray start`, whose stop Ray never reports, watched by no agent) when its successor began.
# Sessions that overlap are different clusters under one label, and end none of each other.
SESSION_ENDS = Macro(
    "session_ends",
    ("of_sessions",),
    f"""
    SELECT s.session,
           coalesce(r.ended_ns, g.dead_ns, CASE WHEN n.alive = 0 AND n.total > 0 THEN n.last_dead END,
                    CASE WHEN s.run_id IS NULL AND s.next_session IS NOT NULL THEN s.last_ns END) AS ended_ns,
           CASE WHEN r.ended_ns IS NOT NULL THEN 'the driver that started this local cluster exited'
                WHEN g.dead_ns IS NOT NULL THEN g.seen
                WHEN n.alive = 0 AND n.total > 0 THEN '{ALL_NODES_DIED}'
                WHEN s.run_id IS NULL AND s.next_session IS NOT NULL
                THEN printf('a later session of cluster %s began, %s; this one ended after its last event',
                            s.label, s.next_session) END AS end_reason
    FROM (SELECT * FROM session_successors() WHERE session IN {_OF_SESSIONS}) s
    LEFT JOIN run_exits r ON r.run_id = s.run_id
    LEFT JOIN gone_processes(of_sessions) g ON g.session = s.session AND g.process = 'gcs_server'
    LEFT JOIN (SELECT n.session, count(*) AS total, count(*) FILTER (d.node_id IS NULL) AS alive,
                      max(d.end_ns) AS last_dead
               FROM (SELECT * FROM nodes WHERE session IN {_OF_SESSIONS}) n
               LEFT JOIN node_deaths(of_sessions) d USING (session, node_id)
               GROUP BY n.session) n ON n.session = s.session""",
    table=True,
)
ALL_SESSION_ENDS = Macro("all_session_ends", (), "FROM session_ends((SELECT list(session) FROM sessions))", table=True)
# The run exit of each job whose driver `raysight run` ran: the driver it started the cluster for, or one that joined
# a cluster `raysight run` did not start (the session it joined, reported)
JOB_RUN_EXITS = Macro(
    "job_run_exits",
    (),
    """
    SELECT j.session, j.job_id, r.ended_ns, r.exit_code
    FROM jobs j JOIN sessions s ON s.session = j.session
    JOIN run_exits r ON r.driver_pid = j.driver_pid AND (r.run_id = s.run_id OR r.session = j.session)
        AND r.ended_ns >= coalesce(j.start_ns, 0)""",
    table=True,
)
MACROS = (GONE_PROCESSES, NODE_DEATHS, SESSION_SUCCESSORS, SESSION_ENDS, ALL_SESSION_ENDS, JOB_RUN_EXITS)

# The sessions whose inferences a fold of ``$sessions`` may change: those, the sessions they succeed, and the sessions
# of the same label they overlap (one of those may have had a successor here until this one's first event moved
# earlier).
AFFECTED = Query(
    "affected",
    f"""
    SELECT unnest($sessions::VARCHAR[])
    UNION SELECT session FROM session_successors() WHERE run_id IS NULL AND next_session IN {_SESSIONS}
    UNION SELECT s.session FROM sessions s JOIN sessions x ON x.label = s.label AND x.session <> s.session
          WHERE x.session IN {_SESSIONS} AND s.run_id IS NULL
            AND s.last_ns >= x.first_ns AND s.first_ns <= x.last_ns""",
    about="the sessions to reconcile",
)
ENDED = Stage("ended_sessions", "FROM session_ends($sessions)", about="when each session ended, and why")
DEAD_NODES = Stage("dead_nodes", "FROM node_deaths($sessions)", about="the nodes that died, and how")

# An attempt Ray sent no definition for (an actor's restart, a retry whose owner died) takes its attempt 0's.
# ``{only}``: every task of the sessions, or (in :data:`RECONCILE_TASKS`) the tasks of ``$tasks`` alone.
_BORROW = f"""
    UPDATE tasks SET type = d.type, name = d.name, func_or_class_name = d.func_or_class_name,
           module_name = d.module_name, language = d.language, actor_id = d.actor_id,
           parent_task_id = d.parent_task_id, job_id = coalesce(tasks.job_id, d.job_id)
    FROM tasks d
    WHERE tasks.session IN {_SESSIONS} AND tasks.defined IS NULL AND d.session IN {_SESSIONS}
      AND d.session = tasks.session AND d.task_id = tasks.task_id AND d.defined AND d.attempt = 0
      AND tasks.attempt > 0{{only}}"""
_CLEAR = f"""
    UPDATE tasks SET inferred_state = NULL, inferred_reason = NULL, inferred_error_type = NULL
    WHERE session IN {_SESSIONS} AND inferred_state IS NOT NULL AND reported_state IN {TERMINAL_SQL}{{only}}"""
_TASKS = " AND tasks.task_id IN (SELECT unnest($tasks::VARCHAR[]))"
BORROW_DEFINITION = Query(
    "borrowed definitions",
    _BORROW.replace("{only}", ""),
    about="what an attempt sent no definition for takes its attempt 0's",
)
CLEAR = Query(
    "cleared",
    _CLEAR.replace("{only}", ""),
    about="an inference Ray's own end state has since replaced, cleared",
)

# What may have ended each open attempt, in stages: the attempts still open, whether a later attempt began, how their
# jobs ended, the evidence of each, how their actors' creation went, and the verdict each is given.
_OPEN = f"""
    SELECT session, task_id, attempt, coalesce(worker_id, exec_worker_id) AS worker_id, node_id, job_id,
           coalesce(reported_state, 'NIL') AS state, executed_ns, least(first_ns, exec_start_ns) AS begun_ns,
           {task_kind_sql("task_id")} = 'DRIVER_TASK' AS driver
    FROM tasks
    WHERE session IN {_SESSIONS} AND coalesce(reported_state, 'NIL') NOT IN {TERMINAL_SQL}{{only}}"""
OPEN = Stage("open_attempts", _OPEN.replace("{only}", ""), about="the attempts Ray has sent no end state of")
RETRIED = Stage(
    "retried_attempts",
    f"""
    SELECT o.session, o.task_id, o.attempt, min(t.attempt) AS next_attempt,
           min(least(t.first_ns, t.exec_start_ns)) AS next_begun_ns
    FROM {OPEN.name} o JOIN tasks t ON t.session = o.session AND t.task_id = o.task_id AND t.attempt > o.attempt
    WHERE t.session IN {_SESSIONS}
    GROUP BY ALL""",
    about="the open attempts a later attempt followed",
)
JOB_ENDS = Stage(
    "job_ends",
    f"""
    SELECT j.session, j.job_id, coalesce(j.end_ns, r.ended_ns) AS ended_ns, r.exit_code
    FROM jobs j JOIN sessions s USING (session)
    LEFT JOIN job_run_exits() r USING (session, job_id)
    WHERE j.session IN {_SESSIONS}""",
    about="when each job ended, and how its driver exited",
)
EVIDENCE = Stage(
    "attempt_evidence",
    f"""
    SELECT o.session, o.task_id, o.attempt, o.state, o.executed_ns, o.driver, rt.next_attempt,
           s.span_id, s.trace_id, s.error AS span_error,
           w.worker_id AS dead_worker, w.exit_type, w.exit_detail,
           n.node_id AS dead_node, n.why AS death_reason,
           je.ended_ns AS job_ended_ns, je.exit_code, e.ended_ns AS session_ended_ns, e.end_reason,
           (w.worker_id IS NOT NULL OR n.node_id IS NOT NULL OR je.ended_ns IS NOT NULL
            OR e.ended_ns IS NOT NULL) AS ended
    FROM {OPEN.name} o
    LEFT JOIN {RETRIED.name} rt USING (session, task_id, attempt)
    LEFT JOIN (SELECT * FROM workers WHERE session IN {_SESSIONS} AND state = 'DEAD') w
        ON w.session = o.session AND w.worker_id = o.worker_id
    LEFT JOIN {DEAD_NODES.name} n ON n.session = o.session AND n.node_id = o.node_id
    LEFT JOIN {JOB_ENDS.name} je ON je.session = o.session AND je.job_id = o.job_id
    LEFT JOIN {ENDED.name} e ON e.session = o.session
    LEFT JOIN (SELECT * FROM attempt_ends WHERE session IN {_SESSIONS}) s USING (session, task_id, attempt)""",
    about="what says each open attempt ended: its span, its worker's or node's death, its job's or session's end",
)
# An actor creation task's ID holds its actor's. Each attempt runs the constructor once, so the actor's first ALIVE
# or DEAD from that attempt's start until the next one's tells whether that attempt finished.
CREATED = Stage(
    "creations",
    f"""
    SELECT o.session, o.task_id, o.attempt,
           list_filter(a.history, lambda h: h.state IN ('ALIVE', 'DEAD') AND h.ts >= o.begun_ns
                                             AND (rt.next_begun_ns IS NULL OR h.ts < rt.next_begun_ns))[1] AS outcome
    FROM {OPEN.name} o LEFT JOIN {RETRIED.name} rt USING (session, task_id, attempt)
    JOIN actors a ON a.session = o.session AND a.actor_id = {task_actor_id_sql("o.task_id")}
    WHERE {task_kind_sql("o.task_id")} = 'ACTOR_CREATION_TASK' AND a.session IN {_SESSIONS}""",
    about="how the actor of each open creation attempt came alive or died",
)
VERDICTS = Stage(
    "verdicts",
    f"""
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
          FROM {EVIDENCE.name}) LEFT JOIN {CREATED.name} c USING (session, task_id, attempt)""",
    about="each open attempt's inferred state, the reason, and the error type",
)
INFER = Query(
    "inferred",
    f"""
    UPDATE tasks SET inferred_state = v.state, inferred_reason = v.reason, inferred_error_type = v.error_type
    FROM {VERDICTS.name} v
    WHERE tasks.session IN {_SESSIONS}
      AND tasks.session = v.session AND tasks.task_id = v.task_id AND tasks.attempt = v.attempt
      AND v.state IS NOT NULL
      AND (tasks.inferred_state IS DISTINCT FROM v.state OR tasks.inferred_reason IS DISTINCT FROM v.reason)""",
    about="the attempts whose inference changed, written",
)


def _ends_inferred(table: str, key: str, state: str, node_died: str, on: str = "") -> Query:
    """Set ``table``'s inferred end for the sessions in ``$sessions``: DEAD for the rows (``y``) Ray still shows alive,
    in the state ``state`` (SQL over ``y``), on a dead node (where ``on`` holds too) or in an ended session; any other
    row's is cleared. Only the rows whose inference changed are written. ``node_died``: the reason's words when the node
    died, with a %s for how."""
    return Query(
        f"{table} ended",
        f"""
    WITH verdict AS (
        SELECT x.session, x.{key}, v.state, v.reason, v.end_ns
        FROM {table} x LEFT JOIN (
            SELECT y.session, y.{key}, 'DEAD' AS state,
                CASE WHEN d.node_id IS NOT NULL THEN printf('{node_died}; Ray never sent its end', d.why)
                     ELSE printf('the cluster ended (%s) while it was %s; Ray never sent its end',
                                 e.end_reason, {state})
                END AS reason,
                CASE WHEN d.node_id IS NOT NULL THEN d.end_ns ELSE e.ended_ns END AS end_ns
            FROM {table} y LEFT JOIN {DEAD_NODES.name} d ON d.session = y.session AND d.node_id = y.node_id{on}
            LEFT JOIN {ENDED.name} e ON e.session = y.session
            WHERE y.session IN {_SESSIONS} AND y.state IS DISTINCT FROM 'DEAD'
              AND (d.node_id IS NOT NULL OR e.ended_ns IS NOT NULL)
        ) v USING (session, {key})
        WHERE x.session IN {_SESSIONS}
    )
    UPDATE {table} SET inferred_state = v.state, inferred_reason = v.reason, inferred_end_ns = v.end_ns
    FROM verdict v
    WHERE {table}.session IN {_SESSIONS} AND {table}.session = v.session AND {table}.{key} = v.{key}
      AND ({table}.inferred_state IS DISTINCT FROM v.state OR {table}.inferred_reason IS DISTINCT FROM v.reason
           OR {table}.inferred_end_ns IS DISTINCT FROM v.end_ns)""",
        about=f"the {table} Ray still shows alive on a dead node or in an ended session, ended",
    )


ENDS_INFERRED = (
    _ends_inferred("nodes", "node_id", "coalesce(y.state, 'ALIVE')", "%s"),
    _ends_inferred("workers", "worker_id", "'alive'", "its node died (%s)"),
    # An actor is ended by its node's death only while it is ALIVE there (else Ray may be restarting it elsewhere).
    _ends_inferred(
        "actors",
        "actor_id",
        "coalesce(y.state, 'DEPENDENCIES_UNREADY')",
        "its node died while it was ALIVE (%s)",
        on=" AND y.state = 'ALIVE'",
    ),
)
# Nodes', workers' and actors' inferred ends change only where a session has ended, a node is dead, or an end was
# inferred before (to be kept, changed or cleared): a live, healthy session's fold skips their three statements.
AT_STAKE = Query(
    "ends at stake",
    f"""
    SELECT EXISTS (SELECT 1 FROM {ENDED.name} WHERE ended_ns IS NOT NULL)
        OR EXISTS (SELECT 1 FROM nodes WHERE session IN {_SESSIONS} AND (state = 'DEAD' OR inferred_state IS NOT NULL))
        OR EXISTS (SELECT 1 FROM node_evidence WHERE session IN {_SESSIONS} AND NOT alive)
        OR EXISTS (SELECT 1 FROM workers WHERE session IN {_SESSIONS} AND inferred_state IS NOT NULL)
        OR EXISTS (SELECT 1 FROM actors WHERE session IN {_SESSIONS} AND inferred_state IS NOT NULL)""",
    about="whether any node's, worker's or actor's inferred end may change",
)

_INFERENCE = (ENDED, DEAD_NODES, BORROW_DEFINITION, CLEAR, OPEN, RETRIED, JOB_ENDS, EVIDENCE, CREATED, VERDICTS, INFER)
RECONCILE = Group(
    "reconcile",
    (AFFECTED, *_INFERENCE, AT_STAKE, *ENDS_INFERRED),
    "what is inferred of the sessions a write touched (the last three only where ends are at stake)",
)

# A fold that changed only task rows, and left its sessions' spans as they were but for a later last event (where no
# session of the label began after it: one with a successor ends at its last event), changes no session's end, and no
# node, worker, actor or job: only the inferences of its tasks' attempts may change (an attempt's reads its own row,
# its task's other attempts, and those). True when each session of the group (``staged_sessions``) keeps its label,
# run ID, first event and successor as the store has them.
SPANS_KEPT = Query(
    "spans kept",
    f"""
    SELECT count(*) = (SELECT count(*) FROM {SESSIONS.name})
    FROM {SESSIONS.name} n JOIN sessions s USING (session)
    WHERE (n.label IS NULL OR s.label IS NOT NULL) AND (n.run_id IS NULL OR s.run_id IS NOT NULL)
      AND s.first_ns <= n.first_ns
      AND (n.last_ns <= s.last_ns
           OR NOT EXISTS (SELECT 1 FROM sessions l WHERE l.label = s.label AND l.first_ns > s.last_ns))""",
    about="whether the group leaves every session's span as reconciliation reads it",
)
_OF_TASKS = " AND tasks.task_id IN (SELECT unnest($tasks::VARCHAR[]))"
_VERDICT = (ENDED, DEAD_NODES, RETRIED, JOB_ENDS, EVIDENCE, CREATED, VERDICTS, INFER)
RECONCILE_TASKS = Group(
    "reconcile tasks",
    (
        Query(f"{BORROW_DEFINITION.name} of $tasks", _BORROW.replace("{only}", _OF_TASKS), BORROW_DEFINITION.about),
        Query(f"{CLEAR.name} of $tasks", _CLEAR.replace("{only}", _OF_TASKS), CLEAR.about),
        Stage(OPEN.name, _OPEN.replace("{only}", _OF_TASKS), about=f"{OPEN.about}, of $tasks"),
        *_VERDICT,
    ),
    "what is inferred of the attempts of the tasks a write of task events alone touched, where the spans were kept "
    "(the rest only where one of them is open)",
)
Run = Callable[[str, object], duckdb.DuckDBPyConnection]


def reconcile(run: Run, sessions: list[str]) -> None:
    """Re-derive what is inferred of ``sessions`` (and of the sessions they end) with ``run`` (the store's, inside
    its transaction), by the statements of :data:`RECONCILE`."""
    if not sessions:
        return
    affected = {"sessions": [row[0] for row in run(AFFECTED.sql, {"sessions": sessions}).fetchall()]}
    for step in _INFERENCE:
        run(step.sql, bind(step.sql, affected))
    if run(AT_STAKE.sql, bind(AT_STAKE.sql, affected)).fetchall() == [(True,)]:
        for query in ENDS_INFERRED:
            run(query.sql, bind(query.sql, affected))
    for stage in _INFERENCE:
        if isinstance(stage, Stage):
            run(stage.drop, None)


def reconcile_tasks(run: Run, sessions: list[str], tasks: list[str]) -> None:
    """Re-derive what is inferred of the attempts of ``tasks`` in ``sessions``, after a fold that changed nothing else
    reconciliation reads (:data:`SPANS_KEPT`), by the statements of :data:`RECONCILE_TASKS`: what :func:`reconcile`
    would have written."""
    if not tasks:
        return
    values = {"sessions": sessions, "tasks": tasks}
    borrow, clear, open_attempts, *verdict = RECONCILE_TASKS.steps
    for step in (borrow, clear):
        run(step.sql, bind(step.sql, values))
    ((opened,),) = run(open_attempts.sql, bind(open_attempts.sql, values)).fetchall()
    made = [open_attempts, *(verdict if opened else ())]
    for step in made[1:]:
        run(step.sql, bind(step.sql, values))
    for stage in made:
        if isinstance(stage, Stage):
            run(stage.drop, None)
