"""What Ray never sends as events, as Ray's state API lists it (``signals/ray_events/state_query.py``): placement
groups, objects, runtime envs and cluster events, from the poller's rows (``parse.py``)."""

from __future__ import annotations

from raysight.ansi import plain_sql
from raysight.signals.ray_events.state_query import MS, Field, Resource, field_of


def polled(path: str, cast: str = "") -> str:
    """SQL: a field of a polled row as Ray gave it (text, or cast), by its JSON path."""
    return f"(p.row->>'$.{path}'){cast}"


def polled_json(path: str) -> str:
    return f"(p.row->'$.{path}')"


# What Ray never sends as events, as the poller recorded it (``signals/polls/parse.py``): each row's fields as Ray's
# state API gives them, and raysight's own: when the entity was first and last seen and its state's history.
_POLLED_TIMES = [
    field_of("first_seen_ms", f"p.first_ns {MS}", "time_ms"),
    field_of("last_seen_ms", f"p.last_ns {MS}", "time_ms"),
    field_of(
        "state_history", "list_transform(p.history, lambda x: {'state': x.state, 'ts_ms': x.ts // 1000000})", "list"
    ),
    field_of("session", "p.session"),
]


def polled_resource(name: str, id_field: str, fields: list[Field], order: tuple[str, ...] = ()) -> Resource:
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


PLACEMENT_GROUPS = polled_resource(
    "placement_groups",
    "placement_group_id",
    [
        field_of("placement_group_id", polled("placement_group_id"), "id", True),
        field_of("name", f"coalesce({polled('name')}, '')", base=True),
        field_of("creator_job_id", polled("creator_job_id"), "id", True),
        field_of("state", "p.state", base=True),
        field_of("bundles", polled_json("bundles"), "json"),
        field_of("is_detached", polled("is_detached", "::BOOLEAN"), "bool"),
        field_of("stats", polled_json("stats"), "json"),
        field_of("placed", _PLACED, "list", late=True),
    ],
)
OBJECTS = polled_resource(
    "objects",
    "object_id",
    [
        field_of("object_id", polled("object_id"), "id", True),
        field_of("object_size", polled("object_size", "::BIGINT"), "int", True),
        field_of("task_status", polled("task_status"), base=True),
        field_of("attempt_number", polled("attempt_number", "::INTEGER"), "int", True),
        field_of("reference_type", "p.state", base=True),
        field_of("call_site", polled("call_site"), base=True),
        field_of("type", polled("type"), base=True),
        field_of("pid", polled("pid", "::BIGINT"), "int", True),
        field_of("ip", polled("ip"), base=True),
    ],
)
RUNTIME_ENVS = polled_resource(
    "runtime_envs",
    "node_id",
    [
        field_of("runtime_env", polled_json("runtime_env"), "json", True),
        field_of("success", "p.state = 'success'", "bool", True),
        field_of("creation_time_ms", polled("creation_time_ms", "::DOUBLE"), "float", True),
        field_of("node_id", polled("node_id"), "id", True),
        field_of("ref_cnt", polled("ref_cnt", "::INTEGER"), "int"),
        field_of("error", plain_sql(polled("error"))),
    ],
    order=("-creation_time_ms",),
)
CLUSTER_EVENTS = polled_resource(
    "cluster_events",
    "event_id",
    [
        field_of("severity", "p.state", base=True),
        field_of("time", polled("time"), base=True),
        field_of("source_type", polled("source_type"), base=True),
        field_of("message", polled("message"), base=True),
        field_of("event_id", polled("event_id"), base=True),
        field_of("custom_fields", polled_json("custom_fields"), "json"),
    ],
    order=("time", "event_id"),
)
POLLED = (PLACEMENT_GROUPS, OBJECTS, RUNTIME_ENVS, CLUSTER_EVENTS)
