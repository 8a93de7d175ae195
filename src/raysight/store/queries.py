"""list / get / summary over the folded entities, with the field names of Ray's state API (plus raysight's own).

Each resource is described once as data (:data:`RESOURCES`): its SQL source, its fields with their kinds,
which fields are Ray's base columns, and its ID. Queries filter and sort in DuckDB; nothing is capped. What Ray says
of a failure (an error, a death, an exit) is given without a terminal's escapes (:mod:`raysight.ansi`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np
import orjson

from raysight.ansi import plain_json_sql, plain_sql
from raysight.errors import BadQuery, NotFound
from raysight.store import resources
from raysight.store.filters import Filter, filter_sql, parse_sort
from raysight.store.schema import task_actor_id_sql, task_kind_sql
from raysight.store.statements import Macro

MS = "// 1000000"
CHUNK_ROWS = 1000  # rows of a page read, rendered and sent at once


@dataclass(frozen=True)
class Field:
    name: str
    sql: str
    kind: str = "str"  # str | id | int | float | bool | time_ms | json | list | profile | waited
    base: bool = False
    late: bool = False  # costly (a subquery per row): computed for the page's rows only, after paging


@dataclass(frozen=True)
class Resource:
    name: str
    source: str  # a FROM clause; its rows carry a `session` column
    id_field: str
    fields: list[Field]
    keys: tuple[str, ...] = ()  # SQL of the row's key (session first, ID second), needed by late fields
    condition: str = ""  # SQL that every row of the source must meet too
    session: str = ""  # SQL of a row's session, where it is not the first table's `session`
    order: tuple[str, ...] = ()  # the sort when none is asked for (else by ID)
    row_id: str = ""  # SQL of a BIGINT unique to each row, where its first table's rowid is not
    by_name: dict[str, Field] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.by_name.update({f.name: f for f in self.fields})

    def field(self, name: str) -> Field:
        try:
            return self.by_name[name]
        except KeyError:
            known = ", ".join(sorted(self.by_name))
            raise BadQuery(f"{self.name} have no field {name!r}; known fields: {known}") from None

    def columns(self, detail: bool) -> list[Field]:
        return [f for f in self.fields if detail or f.base]

    @property
    def session_sql(self) -> str:
        """SQL of a row's session."""
        return self.session or f"{self.source.split()[1]}.session"

    @property
    def locator(self) -> str:
        """SQL that finds a row again: what a page is sorted by, and its rows read back with (``list_page``)."""
        return self.row_id or f"{self.source.split()[1]}.rowid"


def _f(name: str, sql: str | None = None, kind: str = "str", base: bool = False, late: bool = False) -> Field:
    return Field(name, sql or name, kind, base, late)


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
    """A node's, worker's or actor's inferred end (see store.reconcile), beside the state Ray reported."""
    return [
        _f("state_inferred", f"{alias}.inferred_state IS NOT NULL", "bool", True),
        _f("inferred_reason", f"{alias}.inferred_reason"),
        _f("reported_state", f"{alias}.state"),
    ]


TASKS = Resource(
    "tasks",
    "tasks t",
    "task_id",
    [
        _f("task_id", "t.task_id", "id", True),
        _f("attempt_number", "t.attempt", "int", True),
        _f("name", "coalesce(task_name(t.name, t.profile_name), '')", base=True),
        _f("state", _TASK_STATE, base=True),
        _f("job_id", "coalesce(t.job_id, '')", "id", True),
        _f(
            "actor_id",
            f"coalesce(t.actor_id, CASE WHEN {_TASK_TYPE} LIKE 'ACTOR%' THEN {task_actor_id_sql('t.task_id')} END)",
            "id",
            True,
        ),
        _f("type", _TASK_TYPE, base=True),
        _f("func_or_class_name", "task_function(t.func_or_class_name, t.name, t.profile_name)", base=True),
        _f("parent_task_id", "coalesce(t.parent_task_id, '')", "id", True),
        _f("node_id", "t.node_id", "id", True),
        _f("worker_id", "coalesce(t.worker_id, t.exec_worker_id)", "id", True),
        _f("worker_pid", "t.worker_pid", "int", True),
        _f("error_type", "coalesce(t.error_type, t.inferred_error_type)", base=True),
        _f("state_inferred", "t.inferred_state IS NOT NULL", "bool", True),
        _f("inferred_reason", "t.inferred_reason"),
        _f("reported_state", "t.reported_state"),
        _f("language", "t.language"),
        _f("required_resources", "t.required_resources", "json"),
        _f("runtime_env_info", "t.runtime_env", "runtime_env"),
        _f("placement_group_id", "t.placement_group_id", "id"),
        _f("events", TASK_EVENTS, "list", late=True),
        _f("profiling_data", TASK_PROFILING, "profile", late=True),
        _f("waited", TASK_WAITED, "waited", late=True),
        _f("creation_time_ms", f"t.creation_ns {MS}", "time_ms"),
        _f("start_time_ms", f"{_TASK_START} {MS}", "time_ms"),
        _f("end_time_ms", f"t.end_ns {MS}", "time_ms"),
        _f("duration_ms", f"(t.end_ns - {_TASK_START}) / 1e6", "float"),
        _f(
            "task_log_info",
            "CASE WHEN t.stdout_file IS NOT NULL OR t.stderr_file IS NOT NULL THEN {'stdout_file': t.stdout_file, "
            "'stderr_file': t.stderr_file, 'stdout_start': t.stdout_start, 'stdout_end': t.stdout_end, "
            "'stderr_start': t.stderr_start, 'stderr_end': t.stderr_end} END",
            "list",
        ),
        _f("error_message", plain_sql("coalesce(t.error_message, t.inferred_reason)")),
        _f("is_debugger_paused", "t.is_debugger_paused", "bool"),
        _f("call_site", "t.call_site"),
        _f("label_selector", "t.label_selector", "json"),
        _f("session", "t.session"),
    ],
    keys=("t.session", "t.task_id", "t.attempt"),
)

ACTORS = Resource(
    "actors",
    "actors a",
    "actor_id",
    [
        _f("actor_id", "a.actor_id", "id", True),
        _f("class_name", "coalesce(a.class_name, '')", base=True),
        _f("state", "coalesce(a.inferred_state, a.state, 'DEPENDENCIES_UNREADY')", base=True),
        _f("job_id", "coalesce(a.job_id, substr(a.actor_id, 25, 8))", "id", True),
        _f("name", "coalesce(a.name, '')", base=True),
        _f("node_id", "a.node_id", "id", True),
        _f("pid", "a.pid", "int", True),
        _f("ray_namespace", "a.ray_namespace", base=True),
        _f("serialized_runtime_env", "a.serialized_runtime_env"),
        _f("required_resources", "a.required_resources", "json"),
        _f("death_cause", plain_json_sql("a.death_cause"), "json"),
        _f("death_message", plain_sql("coalesce(a.death_message, a.inferred_reason)")),
        _f("is_detached", "a.is_detached", "bool"),
        _f("placement_group_id", "a.placement_group_id", "id"),
        _f("repr_name", "coalesce(a.repr_name, '')"),
        _f("num_restarts", "coalesce(a.num_restarts, 0)", "int"),
        _f("num_restarts_due_to_lineage_reconstruction", "coalesce(a.num_restarts_lineage, 0)", "int"),
        _f("num_restarts_due_to_node_preemption", "coalesce(a.num_restarts_preemption, 0)", "int"),
        _f("call_site", "a.call_site"),
        _f("label_selector", "a.label_selector", "json"),
        _f("worker_id", "a.worker_id", "id"),
        _f("start_time_ms", f"a.start_ns {MS}", "time_ms"),
        _f("end_time_ms", f"coalesce(a.end_ns, a.inferred_end_ns) {MS}", "time_ms"),
        *_inferred("a"),
        _f(
            "events",
            "list_transform(a.history, lambda x: {'state': x.state, 'created_ms': x.ts / 1e6, 'pid': x.pid, "
            "'node_id': x.node_id, 'worker_id': x.worker_id, 'restart_reason': x.restart_reason, "
            f"'death_message': {plain_sql('x.death_message')}}})",
            "list",
        ),
        _f("session", "a.session"),
    ],
)

NODES = Resource(
    "nodes",
    "nodes n",
    "node_id",
    [
        _f("node_id", "n.node_id", "id", True),
        _f("node_ip", "coalesce(n.node_ip, '')", base=True),
        _f("is_head_node", "coalesce(n.resources_total LIKE '%node:__internal_head__%', false)", "bool", True),
        _f("state", "coalesce(n.inferred_state, n.state, 'ALIVE')", base=True),
        _f("state_message", plain_sql("coalesce(n.death_message, n.inferred_reason)"), base=True),
        _f("node_name", "coalesce(n.node_name, n.node_ip, '')", base=True),
        _f("resources_total", "coalesce(n.resources_total, '{}')", "json", True),
        _f("labels", "coalesce(n.labels, '{}')", "json", True),
        _f("hostname", "n.hostname"),
        _f("death_reason", "n.death_reason"),
        _f("start_time_ms", f"coalesce(n.start_ns, n.alive_ns) {MS}", "time_ms"),
        _f("end_time_ms", f"coalesce(n.end_ns, n.inferred_end_ns) {MS}", "time_ms"),
        *_inferred("n"),
        _f("session", "n.session"),
    ],
)

WORKERS = Resource(
    "workers",
    "workers w LEFT JOIN nodes n ON n.session = w.session AND n.node_id = w.node_id",
    "worker_id",
    [
        _f("worker_id", "w.worker_id", "id", True),
        _f("is_alive", "coalesce(w.inferred_state, w.state) IS DISTINCT FROM 'DEAD'", "bool", True),
        _f("worker_type", "coalesce(w.worker_type, 'WORKER')", base=True),
        _f("exit_type", "w.exit_type", base=True),
        _f("node_id", "coalesce(w.node_id, '')", "id", True),
        _f("ip", "coalesce(n.node_ip, '')", base=True),
        _f("pid", "coalesce(w.pid, 0)", "int", True),
        _f("job_id", "w.job_id", "id"),
        _f("exit_detail", plain_sql("w.exit_detail")),
        _f("worker_launch_time_ms", "w.launch_ms", "time_ms"),
        _f("worker_launched_time_ms", "w.launched_ms", "time_ms"),
        _f("start_time_ms", "w.start_ms", "time_ms"),
        _f("end_time_ms", f"coalesce(w.end_ms, w.end_ns {MS}, w.inferred_end_ns {MS})", "time_ms"),
        *_inferred("w"),
        _f("session", "w.session"),
    ],
)


def _polled(path: str, cast: str = "") -> str:
    """SQL: a field of a polled row as Ray gave it (text, or cast), by its JSON path."""
    return f"(p.row->>'$.{path}'){cast}"


def _polled_json(path: str) -> str:
    return f"(p.row->'$.{path}')"


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
        _f("job_id", f"coalesce(j.job_id, {_polled('job_id')})", "id", True),
        _f("submission_id", f"coalesce(j.submission_id, {_polled('submission_id')})", base=True),
        _f("entrypoint", f"coalesce({_polled('entrypoint')}, j.entrypoint, '')", base=True),
        _f(
            "type",
            f"CASE WHEN coalesce(j.submission_id, {_polled('submission_id')}) IS NULL THEN 'DRIVER' "
            "ELSE 'SUBMISSION' END",
            base=True,
        ),
        _f("status", _JOB_STATUS, base=True),
        _f(
            "message",
            f"CASE WHEN p.row IS NOT NULL THEN {plain_sql(_polled('message'))} "
            "WHEN r.exit_code IS NOT NULL THEN printf('driver exited with code %d', r.exit_code) "
            "WHEN j.state IS DISTINCT FROM 'FINISHED' AND e.ended_ns IS NOT NULL "
            "THEN printf('the cluster ended (%s) before Ray reported the end of this job', e.end_reason) END",
            base=True,
        ),
        _f(
            "error_type",
            f"CASE WHEN p.row IS NOT NULL THEN {_polled('error_type')} "
            "WHEN r.exit_code <> 0 THEN 'JOB_ENTRYPOINT_COMMAND_ERROR' END",
            base=True,
        ),
        _f(
            "driver_info",
            "CASE WHEN j.job_id IS NOT NULL THEN {'id': j.job_id, 'node_ip_address': coalesce(n.node_ip, ''),"
            " 'pid': coalesce(CAST(j.driver_pid AS VARCHAR), '')}"
            f" ELSE {_polled_json('driver_info')}::STRUCT(id VARCHAR, node_ip_address VARCHAR, pid VARCHAR) END",
            "list",
            True,
        ),
        _f(
            "state_inferred",
            "p.row IS NULL AND r.exit_code IS NULL AND j.state IS DISTINCT FROM 'FINISHED' AND e.ended_ns IS NOT NULL",
            "bool",
            True,
        ),
        _f(
            "start_time",
            f"coalesce(nullif({_polled('start_time', '::BIGINT')}, 0), j.start_ns {MS})",
            "time_ms",
        ),
        _f(
            "end_time",
            f"coalesce(nullif({_polled('end_time', '::BIGINT')}, 0), "
            f"(coalesce(j.end_ns, r.ended_ns, e.ended_ns) {MS}))",
            "time_ms",
        ),
        _f("metadata", f"coalesce({_polled_json('metadata')}, j.metadata, '{{}}')", "json"),
        _f(
            "runtime_env",  # as it was submitted, or as the driver's job config serialized it
            f"coalesce({_polled_json('runtime_env')}, "
            "CASE WHEN json_valid(j.runtime_env) THEN j.runtime_env::JSON END)",
            "json",
        ),
        _f("driver_node_id", f"coalesce(j.driver_node_id, {_polled('driver_node_id')})", "id"),
        _f(
            "driver_exit_code",
            f"coalesce({_polled('driver_exit_code', '::INTEGER')}, r.exit_code)",
            "int",
            True,
        ),  # Ray's field; base here, as Ray reports no failed driver
        _f("session", _SESSION_OF_JOB),
    ],
    session=_SESSION_OF_JOB,
    row_id="coalesce(j.rowid, -1 - p.polled_rowid)",
)


# What Ray never sends as events, as the poller recorded it (``signals/polls/parse.py``): each row's fields as Ray's
# state API gives them, and raysight's own: when the entity was first and last seen and its state's history.
_POLLED_TIMES = [
    _f("first_seen_ms", f"p.first_ns {MS}", "time_ms"),
    _f("last_seen_ms", f"p.last_ns {MS}", "time_ms"),
    _f("state_history", "list_transform(p.history, lambda x: {'state': x.state, 'ts_ms': x.ts // 1000000})", "list"),
    _f("session", "p.session"),
]


def _polled_resource(name: str, id_field: str, fields: list[Field], order: tuple[str, ...] = ()) -> Resource:
    return Resource(
        name,
        "polled p",
        id_field,
        [*fields, *_POLLED_TIMES],
        keys=("p.session", "p.id"),
        condition=f"p.resource = '{name}'",
        order=order,
    )


# The tasks and actors placed in a placement group (``p``), as Ray's events name their group
_PLACED = """{
    'tasks': coalesce((SELECT list(DISTINCT t.task_id ORDER BY t.task_id) FROM tasks t
                       WHERE t.session = p.session AND t.placement_group_id = p.id), []),
    'actors': coalesce((SELECT list(a.actor_id ORDER BY a.actor_id) FROM actors a
                        WHERE a.session = p.session AND a.placement_group_id = p.id), [])}"""


PLACEMENT_GROUPS = _polled_resource(
    "placement_groups",
    "placement_group_id",
    [
        _f("placement_group_id", _polled("placement_group_id"), "id", True),
        _f("name", f"coalesce({_polled('name')}, '')", base=True),
        _f("creator_job_id", _polled("creator_job_id"), "id", True),
        _f("state", "p.state", base=True),
        _f("bundles", _polled_json("bundles"), "json"),
        _f("is_detached", _polled("is_detached", "::BOOLEAN"), "bool"),
        _f("stats", _polled_json("stats"), "json"),
        _f("placed", _PLACED, "list", late=True),
    ],
)
OBJECTS = _polled_resource(
    "objects",
    "object_id",
    [
        _f("object_id", _polled("object_id"), "id", True),
        _f("object_size", _polled("object_size", "::BIGINT"), "int", True),
        _f("task_status", _polled("task_status"), base=True),
        _f("attempt_number", _polled("attempt_number", "::INTEGER"), "int", True),
        _f("reference_type", "p.state", base=True),
        _f("call_site", _polled("call_site"), base=True),
        _f("type", _polled("type"), base=True),
        _f("pid", _polled("pid", "::BIGINT"), "int", True),
        _f("ip", _polled("ip"), base=True),
    ],
)
RUNTIME_ENVS = _polled_resource(
    "runtime_envs",
    "node_id",
    [
        _f("runtime_env", _polled_json("runtime_env"), "json", True),
        _f("success", "p.state = 'success'", "bool", True),
        _f("creation_time_ms", _polled("creation_time_ms", "::DOUBLE"), "float", True),
        _f("node_id", _polled("node_id"), "id", True),
        _f("ref_cnt", _polled("ref_cnt", "::INTEGER"), "int"),
        _f("error", plain_sql(_polled("error"))),
    ],
    order=("-creation_time_ms",),
)
CLUSTER_EVENTS = _polled_resource(
    "cluster_events",
    "event_id",
    [
        _f("severity", "p.state", base=True),
        _f("time", _polled("time"), base=True),
        _f("source_type", _polled("source_type"), base=True),
        _f("message", _polled("message"), base=True),
        _f("event_id", _polled("event_id"), base=True),
        _f("custom_fields", _polled_json("custom_fields"), "json"),
    ],
    order=("time", "event_id"),
)
POLLED = (PLACEMENT_GROUPS, OBJECTS, RUNTIME_ENVS, CLUSTER_EVENTS)
RESOURCES = {r.name: r for r in (TASKS, ACTORS, NODES, WORKERS, JOBS, *POLLED)}


@dataclass
class ListResult:
    rows: list[dict[str, Any]]
    total: int
    session: str | None


def resource(name: str) -> Resource:
    try:
        return RESOURCES[name.replace("-", "_")]
    except KeyError:
        raise BadQuery(f"unknown resource {name!r}; choose one of {', '.join(RESOURCES)}") from None


def latest_session(con: duckdb.DuckDBPyConnection) -> str | None:
    row = con.execute("SELECT session FROM sessions ORDER BY first_ns DESC NULLS LAST, session DESC LIMIT 1").fetchone()
    return row[0] if row else None


def resolve_session(con: duckdb.DuckDBPyConnection, session: str | None) -> str | None:
    """The named session (by name or label), or the one that started last when none is named."""
    if not session:
        return latest_session(con)
    row = con.execute(
        "SELECT session FROM sessions WHERE session = ? OR label = ? ORDER BY first_ns DESC NULLS LAST LIMIT 1",
        [session, session],
    ).fetchone()
    if row is None:
        raise NotFound(f"no session named {session!r}; `raysight sessions` lists them")
    return row[0]


def recorded_session(con: duckdb.DuckDBPyConnection, session: str | None) -> str:
    """:func:`resolve_session`, and NotFound when no session is recorded yet."""
    resolved = resolve_session(con, session)
    if resolved is None:
        raise NotFound("no session has been recorded yet")
    return resolved


@dataclass(frozen=True)
class ListPage:
    """The rows a list found (:func:`list_page`), in order, to be read a chunk at a time (:func:`page_rows`)."""

    res: Resource
    session: str | None
    total: int
    detail: bool
    located: np.ndarray  # each row's locator (:attr:`Resource.locator`), in the page's order


def list_page(
    con: duckdb.DuckDBPyConnection,
    res: Resource,
    *,
    session: str | None,
    filters: list[Filter] = (),  # type: ignore[assignment]
    sort: list[str] = (),  # type: ignore[assignment]
    limit: int | None = 100,
    offset: int = 0,
    detail: bool = False,
    exclude_driver: bool = False,
) -> ListPage:
    """Which rows of ``res`` in one session (``"*"`` for all), filtered, sorted, and paged, are on the page; ``total``
    counts every match. Only the rows' locators are sorted (a row's fields are read later, a chunk at a time)."""
    if limit is not None and limit < 0:
        raise BadQuery("limit must be 0 or more")
    if offset < 0:
        raise BadQuery("offset must be 0 or more")
    resolved = None if session == "*" else resolve_session(con, session)
    if session != "*" and resolved is None:
        return ListPage(res, None, 0, detail, np.empty(0, np.int64))  # an empty store
    where, params = _where(res, resolved, filters, exclude_driver)
    page = "" if limit is None else f" LIMIT {int(limit)}"
    located = con.execute(
        f"SELECT {res.locator} AS locator FROM {res.source} WHERE {where} ORDER BY {_order(res, sort)}{page} "
        f"OFFSET {int(offset)}",
        params,
    ).fetchnumpy()["locator"]
    total_row = con.execute(f"SELECT count(*) FROM {res.source} WHERE {where}", params).fetchone()
    return ListPage(res, resolved, int(total_row[0]) if total_row else 0, detail, located)


def page_rows(con: duckdb.DuckDBPyConnection, page: ListPage) -> Iterator[list[dict[str, Any]]]:
    """The page's rows, :data:`CHUNK_ROWS` at a time, each with its fields (late ones too, for those rows only). A
    row deleted since the page was found is left out (a row's locator stays its own: DuckDB never moves the rows of a
    table with a primary key)."""
    res, fields = page.res, page.res.columns(page.detail)
    late = [f for f in fields if f.late]
    decoded = [f for f in fields if f.kind in DECODED]
    select = [f"{f.sql} AS {f.name}" for f in fields if not f.late]
    select += [f"{k} AS __key{i}" for i, k in enumerate(res.keys)] if late else []
    for start in range(0, len(page.located), CHUNK_ROWS):
        located = page.located[start : start + CHUNK_ROWS].tolist()
        cursor = con.execute(
            f"SELECT {', '.join(select)}, {res.locator} AS __locator FROM {res.source} "
            f"WHERE {res.locator} IN (SELECT unnest($1::BIGINT[]))",
            [located],
        )
        names = [d[0] for d in cursor.description]
        found: dict[int, list[dict[str, Any]]] = {}
        for values in cursor.fetchall():
            row = dict(zip(names, values))
            found.setdefault(row.pop("__locator"), []).append(row)
        rows = [row for locator in located for row in found.pop(locator, ())]
        if late and rows:
            _add_late(con, res, late, rows)
        yield [_decode(decoded, {f.name: row[f.name] for f in fields}) for row in rows]


def list_rows(con: duckdb.DuckDBPyConnection, res: Resource, *, session: str | None, **page: Any) -> ListResult:
    """:func:`list_page`'s rows read whole: for answers that a caller reads at once."""
    found = list_page(con, res, session=session, **page)
    return ListResult([row for rows in page_rows(con, found) for row in rows], found.total, found.session)


def _add_late(con: duckdb.DuckDBPyConnection, res: Resource, late: list[Field], rows: list[dict[str, Any]]) -> None:
    """Fill the late fields of ``rows`` (one page) with a query over just their keys."""
    hidden = [f"__key{i}" for i in range(len(res.keys))]
    ids = sorted({row["__key1"] for row in rows})
    cursor = con.execute(
        f"SELECT {', '.join(res.keys)}, {', '.join(f.sql for f in late)} FROM {res.source} "
        f"WHERE {res.keys[1]} IN (SELECT unnest($1::VARCHAR[])){f' AND {res.condition}' if res.condition else ''}",
        [ids],
    )
    found = {tuple(r[: len(hidden)]): r[len(hidden) :] for r in cursor.fetchall()}
    for row in rows:
        values = found.get(tuple(row.pop(k) for k in hidden), (None,) * len(late))
        row.update(zip((f.name for f in late), values))


def get_rows(con: duckdb.DuckDBPyConnection, res: Resource, entity_id: str, *, session: str | None) -> ListResult:
    """Every row with this ID (tasks: one per attempt), all fields; NotFound when there is none."""
    result = list_rows(
        con, res, session=session, filters=[Filter(res.id_field, "=", entity_id)], limit=None, detail=True
    )
    if not result.rows:
        where = f"session {result.session}" if result.session else "any session"
        raise NotFound(f"no {res.name[:-1]} with id {entity_id} in {where}")
    return result


def _where(res: Resource, session: str | None, filters: list[Filter], exclude_driver: bool) -> tuple[str, list[object]]:
    """The WHERE clause and its parameters: one session (None: every session), the filters."""
    conditions: list[str] = []
    params: list[object] = []
    if session is not None:
        conditions.append(f"{res.session_sql} = ?")
        params.append(session)
    if res.condition:
        conditions.append(res.condition)
    if exclude_driver and res is TASKS:
        conditions.append(f"{_TASK_TYPE} <> 'DRIVER_TASK'")
    for f in filters:
        column = res.field(f.key)
        sql, values = filter_sql(f, column.sql, column.kind)
        conditions.append(sql)
        params.extend(values)
    return " AND ".join(conditions) or "true", params


def _order(res: Resource, sort: list[str]) -> str:
    terms = []
    for text in sort or res.order or [res.id_field]:
        name, descending = parse_sort(text)
        column = res.field(name)
        terms.append(f"{column.sql} {'DESC' if descending else 'ASC'} NULLS LAST")
    if res.name == "tasks":
        terms.append("t.attempt")
    return ", ".join(terms)


def _json_object(text: str | None) -> Any:
    """A profile event's extra data (JSON text, as a worker reported it); ``{}`` when none or not JSON."""
    try:
        return orjson.loads(text) if text else {}
    except orjson.JSONDecodeError:
        return {}


DECODED = ("json", "runtime_env", "profile", "waited")  # the kinds of field read as text and given as objects


def _decode(fields: list[Field], row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with its ``fields`` (of the kinds :data:`DECODED`) given as objects."""
    for f in fields:
        value = row[f.name]
        if f.kind == "json" and isinstance(value, str):
            row[f.name] = orjson.loads(value)
        elif f.kind == "runtime_env" and isinstance(value, str):
            row[f.name] = {"serialized_runtime_env": value}
        elif f.kind == "profile" and value:  # each event's extra data parsed, as Ray's state API gives it
            for event in value["events"]:
                event["extra_data"] = _json_object(event["extra_data"])
        elif f.kind == "waited" and value:
            value["usage"] = resources.usage(orjson.loads(value["usage"] or "{}"))
            value["demands"] = resources.demands(orjson.loads(value["demands"] or "[]"))
    return row
