"""Ray's entities as its state API lists them (``state_query.py``): tasks (an attempt a row), actors, nodes, workers
and jobs, folded from Ray's events and what else raysight knows of them (the poller's jobs and drivers, `raysight run`'s
exits, inferred ends). What Ray says of a failure (an error, a death, an exit) is given without a terminal's escapes
(:mod:`raysight.ansi`)."""

from __future__ import annotations

from raysight.ansi import plain_json_sql, plain_sql
from raysight.errors import BadQuery
from raysight.signals.polls.polled_resources import POLLED, polled, polled_json
from raysight.signals.ray_events.state_query import MS, Field, Resource, field_of
from raysight.store.schema import task_actor_id_sql, task_kind_sql
from raysight.store.statements import Macro

# What a task attempt is, of its own columns: any statement reads them of the tasks it reads, whatever their alias.
MACROS = (
    Macro("task_state", ("inferred_state", "reported_state"), "coalesce(inferred_state, reported_state, 'NIL')"),
    # the ID tells it when the definition never came
    Macro("task_type", ("type", "task_id"), f"coalesce(type, {task_kind_sql('task_id')})"),
    # When the owner's definition was lost (its worker died within a second), the executor's profile names the task.
    Macro("task_name", ("name", "profile_name"), "coalesce(name, profile_name)"),
    Macro(
        "task_function",
        ("func_or_class_name", "name", "profile_name"),
        "coalesce(func_or_class_name, task_name(name, profile_name), '')",
    ),
    # When the executor's RUNNING event was lost, its profile still says when execution began.
    Macro("task_start", ("start_ns", "exec_start_ns"), "coalesce(start_ns, exec_start_ns)"),
)
# The same of the tasks ``t`` of :data:`TASKS`
_TASK_STATE = "task_state(t.inferred_state, t.reported_state)"
_TASK_TYPE = "task_type(t.type, t.task_id)"
_TASK_START = "task_start(t.start_ns, t.exec_start_ns)"
_OF_ATTEMPT = "x.session = t.session AND x.task_id = t.task_id AND x.attempt = t.attempt"
# Owner and executor may both report a transition: each is shown once, in time order.
TASK_EVENTS = f"""(SELECT list_transform(list_sort(list_distinct(list({{'ts': x.ts, 'state': x.state}}))),
                                   lambda e: {{'state': e.state, 'created_ms': e.ts / 1e6}})
                   FROM task_transitions x WHERE {_OF_ATTEMPT})"""
# While an attempt was pending (created, not running yet): what the cluster had and what waited, as the poller last
# sampled it then (``cluster_status``: `raysight run`, `raysight poll`), and how long it waited
TASK_WAITED = f"""(SELECT CASE WHEN count(*) > 0 THEN {{
        'pending_ms': coalesce({_TASK_START}, t.end_ns, max(c.ns)) // 1000000 - t.creation_ns // 1000000,
        'samples': count(*),
        'usage': arg_max(c.status->'$.loadMetricsReport.usage', c.ns)::VARCHAR,
        'demands': arg_max(c.status->'$.loadMetricsReport.resourceDemand', c.ns)::VARCHAR}} END
    FROM cluster_status c WHERE c.session = t.session AND c.ns >= t.creation_ns
      AND c.ns < coalesce({_TASK_START}, t.end_ns, 9223372036854775807))"""
TASK_PROFILING = f"""(SELECT CASE WHEN count(*) > 0 THEN {{
        'component_type': any_value(x.component), 'component_id': any_value(x.component_id),
        'node_ip_address': any_value(x.node_ip),
        'events': list({{'event_name': x.name, 'start_time': x.start_ns / 1e6, 'end_time': x.end_ns / 1e6,
                         'extra_data': x.extra}} ORDER BY x.start_ns)}} END
    FROM task_profile x WHERE {_OF_ATTEMPT})"""


def _inferred(alias: str) -> list[Field]:
    """A node's, worker's or actor's inferred end (see reconcile.py), beside the state Ray reported."""
    return [
        field_of("state_inferred", f"{alias}.inferred_state IS NOT NULL", "bool", True),
        field_of("inferred_reason", f"{alias}.inferred_reason"),
        field_of("reported_state", f"{alias}.state"),
    ]


TASKS = Resource(
    "tasks",
    "tasks t",
    "task_id",
    [
        field_of("task_id", "t.task_id", "id", True),
        field_of("attempt_number", "t.attempt", "int", True),
        field_of("name", "coalesce(task_name(t.name, t.profile_name), '')", base=True),
        field_of("state", _TASK_STATE, base=True),
        field_of("job_id", "coalesce(t.job_id, '')", "id", True),
        field_of(
            "actor_id",
            f"coalesce(t.actor_id, CASE WHEN {_TASK_TYPE} LIKE 'ACTOR%' THEN {task_actor_id_sql('t.task_id')} END)",
            "id",
            True,
        ),
        field_of("type", _TASK_TYPE, base=True),
        field_of("func_or_class_name", "task_function(t.func_or_class_name, t.name, t.profile_name)", base=True),
        field_of("parent_task_id", "coalesce(t.parent_task_id, '')", "id", True),
        field_of("node_id", "t.node_id", "id", True),
        field_of("worker_id", "coalesce(t.worker_id, t.exec_worker_id)", "id", True),
        field_of("worker_pid", "t.worker_pid", "int", True),
        field_of("error_type", "coalesce(t.error_type, t.inferred_error_type)", base=True),
        field_of("state_inferred", "t.inferred_state IS NOT NULL", "bool", True),
        field_of("inferred_reason", "t.inferred_reason"),
        field_of("reported_state", "t.reported_state"),
        field_of("language", "t.language"),
        field_of("required_resources", "t.required_resources", "json"),
        field_of("runtime_env_info", "t.runtime_env", "runtime_env"),
        field_of("placement_group_id", "t.placement_group_id", "id"),
        field_of("events", TASK_EVENTS, "list", late=True),
        field_of("profiling_data", TASK_PROFILING, "profile", late=True),
        field_of("waited", TASK_WAITED, "waited", late=True),
        field_of("creation_time_ms", f"t.creation_ns {MS}", "time_ms"),
        field_of("start_time_ms", f"{_TASK_START} {MS}", "time_ms"),
        field_of("end_time_ms", f"t.end_ns {MS}", "time_ms"),
        field_of("duration_ms", f"(t.end_ns - {_TASK_START}) / 1e6", "float"),
        field_of(
            "task_log_info",
            "CASE WHEN t.stdout_file IS NOT NULL OR t.stderr_file IS NOT NULL THEN {'stdout_file': t.stdout_file, "
            "'stderr_file': t.stderr_file, 'stdout_start': t.stdout_start, 'stdout_end': t.stdout_end, "
            "'stderr_start': t.stderr_start, 'stderr_end': t.stderr_end} END",
            "list",
        ),
        field_of("error_message", plain_sql("coalesce(t.error_message, t.inferred_reason)")),
        field_of("is_debugger_paused", "t.is_debugger_paused", "bool"),
        field_of("call_site", "t.call_site"),
        field_of("label_selector", "t.label_selector", "json"),
        field_of("session", "t.session"),
    ],
    keys=("t.session", "t.task_id", "t.attempt"),
    tiebreak="t.attempt",
    not_driver=f"{_TASK_TYPE} <> 'DRIVER_TASK'",
    sorts={"failed": f"{_TASK_STATE} = 'FAILED'"},  # ``-failed``: the failed attempts first
)

ACTORS = Resource(
    "actors",
    "actors a",
    "actor_id",
    [
        field_of("actor_id", "a.actor_id", "id", True),
        field_of("class_name", "coalesce(a.class_name, '')", base=True),
        field_of("state", "coalesce(a.inferred_state, a.state, 'DEPENDENCIES_UNREADY')", base=True),
        field_of("job_id", "coalesce(a.job_id, substr(a.actor_id, 25, 8))", "id", True),
        field_of("name", "coalesce(a.name, '')", base=True),
        field_of("node_id", "a.node_id", "id", True),
        field_of("pid", "a.pid", "int", True),
        field_of("ray_namespace", "a.ray_namespace", base=True),
        field_of("serialized_runtime_env", "a.serialized_runtime_env"),
        field_of("required_resources", "a.required_resources", "json"),
        field_of("death_cause", plain_json_sql("a.death_cause"), "json"),
        field_of("death_message", plain_sql("coalesce(a.death_message, a.inferred_reason)")),
        field_of("is_detached", "a.is_detached", "bool"),
        field_of("placement_group_id", "a.placement_group_id", "id"),
        field_of("repr_name", "coalesce(a.repr_name, '')"),
        field_of("num_restarts", "coalesce(a.num_restarts, 0)", "int"),
        field_of("num_restarts_due_to_lineage_reconstruction", "coalesce(a.num_restarts_lineage, 0)", "int"),
        field_of("num_restarts_due_to_node_preemption", "coalesce(a.num_restarts_preemption, 0)", "int"),
        field_of("call_site", "a.call_site"),
        field_of("label_selector", "a.label_selector", "json"),
        field_of("worker_id", "a.worker_id", "id"),
        field_of("start_time_ms", f"a.start_ns {MS}", "time_ms"),
        field_of("end_time_ms", f"coalesce(a.end_ns, a.inferred_end_ns) {MS}", "time_ms"),
        *_inferred("a"),
        field_of(
            "events",
            "list_transform(a.history, lambda x: {'state': x.state, 'created_ms': x.ts / 1e6, 'pid': x.pid, "
            "'node_id': x.node_id, 'worker_id': x.worker_id, 'restart_reason': x.restart_reason, "
            f"'death_message': {plain_sql('x.death_message')}}})",
            "list",
        ),
        field_of("session", "a.session"),
    ],
)

NODES = Resource(
    "nodes",
    "nodes n",
    "node_id",
    [
        field_of("node_id", "n.node_id", "id", True),
        field_of("node_ip", "coalesce(n.node_ip, '')", base=True),
        field_of("is_head_node", "coalesce(n.resources_total LIKE '%node:__internal_head__%', false)", "bool", True),
        field_of("state", "coalesce(n.inferred_state, n.state, 'ALIVE')", base=True),
        field_of("state_message", plain_sql("coalesce(n.death_message, n.inferred_reason)"), base=True),
        field_of("node_name", "coalesce(n.node_name, n.node_ip, '')", base=True),
        field_of("resources_total", "coalesce(n.resources_total, '{}')", "json", True),
        field_of("labels", "coalesce(n.labels, '{}')", "json", True),
        field_of("hostname", "n.hostname"),
        field_of("death_reason", "n.death_reason"),
        field_of("start_time_ms", f"coalesce(n.start_ns, n.alive_ns) {MS}", "time_ms"),
        field_of("end_time_ms", f"coalesce(n.end_ns, n.inferred_end_ns) {MS}", "time_ms"),
        *_inferred("n"),
        field_of("session", "n.session"),
    ],
)

# A worker's process title (ray::IDLE, ray::Counter) as raysight's own process stats labelled it (``Component``), the
# newest of its series; and the actor it ran
_PROCESS_NAME = """(SELECT arg_max(ms.labels['Component'], ms.series_no) FROM metric_series ms
    WHERE ms.session = w.session AND ms.name = 'raysight_process_cpu_seconds_total'
      AND ms.labels['WorkerId'] = w.worker_id)"""
_ACTOR_OF_WORKER = """(SELECT arg_max(a.actor_id, a.start_ns) FROM actors a
    WHERE a.session = w.session AND a.worker_id = w.worker_id)"""

WORKERS = Resource(
    "workers",
    "workers w LEFT JOIN nodes n ON n.session = w.session AND n.node_id = w.node_id",
    "worker_id",
    [
        field_of("worker_id", "w.worker_id", "id", True),
        field_of("is_alive", "coalesce(w.inferred_state, w.state) IS DISTINCT FROM 'DEAD'", "bool", True),
        field_of("worker_type", "coalesce(w.worker_type, 'WORKER')", base=True),
        field_of("exit_type", "w.exit_type", base=True),
        field_of("node_id", "coalesce(w.node_id, '')", "id", True),
        field_of("ip", "coalesce(n.node_ip, '')", base=True),
        field_of("pid", "coalesce(w.pid, 0)", "int", True),
        field_of("job_id", "w.job_id", "id"),
        field_of("exit_detail", plain_sql("w.exit_detail")),
        field_of("worker_launch_time_ms", "w.launch_ms", "time_ms"),
        field_of("worker_launched_time_ms", "w.launched_ms", "time_ms"),
        field_of("start_time_ms", "w.start_ms", "time_ms"),
        field_of("end_time_ms", f"coalesce(w.end_ms, w.end_ns {MS}, w.inferred_end_ns {MS})", "time_ms"),
        field_of("process_name", _PROCESS_NAME, late=True),
        field_of("actor_id", _ACTOR_OF_WORKER, "id", late=True),
        *_inferred("w"),
        field_of("session", "w.session"),
    ],
    keys=("w.session", "w.worker_id"),
)


# A submitted job's status, message, exit code and times are its job manager's, as polled (``p``): the driver's
# events cannot tell a failed entrypoint from a finished one
_JOB_STATUS = """CASE WHEN p.row IS NOT NULL THEN p.state
    WHEN r.exit_code IS NOT NULL THEN (CASE WHEN r.exit_code = 0 THEN 'SUCCEEDED' ELSE 'FAILED' END)
    WHEN j.state = 'FINISHED' THEN 'SUCCEEDED' WHEN e.ended_ns IS NOT NULL THEN 'FAILED' ELSE 'RUNNING' END"""

_SESSION_OF_JOB = "coalesce(j.session, p.session)"
JOBS = Resource(
    "jobs",
    f"""(SELECT *, rowid AS polled_rowid FROM polled WHERE resource = 'jobs' AND row->>'$.type' = 'SUBMISSION') p
        FULL OUTER JOIN jobs j ON j.session = p.session AND j.job_id = p.row->>'$.job_id'
        JOIN sessions s ON s.session = {_SESSION_OF_JOB}
        LEFT JOIN job_run_exits() r ON r.session = j.session AND r.job_id = j.job_id
        LEFT JOIN all_session_ends() e ON e.session = {_SESSION_OF_JOB}
        LEFT JOIN nodes n ON n.session = j.session AND n.node_id = j.driver_node_id""",
    "job_id",
    [
        field_of("job_id", f"coalesce(j.job_id, {polled('job_id')})", "id", True),
        field_of("submission_id", f"coalesce(j.submission_id, {polled('submission_id')})", base=True),
        field_of("entrypoint", f"coalesce({polled('entrypoint')}, j.entrypoint, '')", base=True),
        field_of(
            "type",
            f"CASE WHEN coalesce(j.submission_id, {polled('submission_id')}) IS NULL THEN 'DRIVER' "
            "ELSE 'SUBMISSION' END",
            base=True,
        ),
        field_of("status", _JOB_STATUS, base=True),
        field_of(
            "message",
            f"CASE WHEN p.row IS NOT NULL THEN {plain_sql(polled('message'))} "
            "WHEN r.exit_code IS NOT NULL THEN printf('driver exited with code %d', r.exit_code) "
            "WHEN j.state IS DISTINCT FROM 'FINISHED' AND e.ended_ns IS NOT NULL "
            "THEN printf('the cluster ended (%s) before Ray reported the end of this job', e.end_reason) END",
            base=True,
        ),
        field_of(
            "error_type",
            f"CASE WHEN p.row IS NOT NULL THEN {polled('error_type')} "
            "WHEN r.exit_code <> 0 THEN 'JOB_ENTRYPOINT_COMMAND_ERROR' END",
            base=True,
        ),
        field_of(
            "driver_info",
            "CASE WHEN j.job_id IS NOT NULL THEN {'id': j.job_id, 'node_ip_address': coalesce(n.node_ip, ''),"
            " 'pid': coalesce(CAST(j.driver_pid AS VARCHAR), '')}"
            f" ELSE {polled_json('driver_info')}::STRUCT(id VARCHAR, node_ip_address VARCHAR, pid VARCHAR) END",
            "list",
            True,
        ),
        field_of(
            "state_inferred",
            "p.row IS NULL AND r.exit_code IS NULL AND j.state IS DISTINCT FROM 'FINISHED' AND e.ended_ns IS NOT NULL",
            "bool",
            True,
        ),
        field_of(
            "start_time",
            f"coalesce(nullif({polled('start_time', '::BIGINT')}, 0), j.start_ns {MS})",
            "time_ms",
        ),
        field_of(
            "end_time",
            f"coalesce(nullif({polled('end_time', '::BIGINT')}, 0), (coalesce(j.end_ns, r.ended_ns, e.ended_ns) {MS}))",
            "time_ms",
        ),
        field_of("metadata", f"coalesce({polled_json('metadata')}, j.metadata, '{{}}')", "json"),
        field_of(
            "runtime_env",  # as it was submitted, or as the driver's job config serialized it
            f"coalesce({polled_json('runtime_env')}, CASE WHEN json_valid(j.runtime_env) THEN j.runtime_env::JSON END)",
            "json",
        ),
        field_of("driver_node_id", f"coalesce(j.driver_node_id, {polled('driver_node_id')})", "id"),
        field_of(
            "driver_exit_code",
            f"coalesce({polled('driver_exit_code', '::INTEGER')}, r.exit_code)",
            "int",
            True,
        ),  # Ray's field; base here, as Ray reports no failed driver
        field_of("session", _SESSION_OF_JOB),
    ],
    session=_SESSION_OF_JOB,
    row_id="coalesce(j.rowid, -1 - p.polled_rowid)",
)
RESOURCES = {r.name: r for r in (TASKS, ACTORS, NODES, WORKERS, JOBS, *POLLED)}


def resource(name: str) -> Resource:
    try:
        return RESOURCES[name.replace("-", "_")]
    except KeyError:
        raise BadQuery(f"unknown resource {name!r}; choose one of {', '.join(RESOURCES)}") from None
