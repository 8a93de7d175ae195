"""What a live cluster's dashboard answered for what Ray never sends as events (``POST /ingest/agent/ray-state``,
from the poller: ``agent/state_poll.py``): checked, and turned into rows. Pure.

The poller sends JSON (``wire.RayState``), one object a poll of one session::

    {"session": "session_…", "polled_ns": 1795288476000000000,
     "resources": {"placement_groups": [<PlacementGroupState rows, detail>], "objects": [...], "runtime_envs": [...],
                   "cluster_events": [...], "jobs": [<JobDetails, as /api/jobs/ lists them>],
                   "drivers": [<WorkerState rows of worker_type DRIVER, detail>]},
     "cluster_status": {<the dashboard's /api/cluster_status: loadMetricsReport (usage, resourceDemand, …) …>},
     "serve": {<Serve's /api/serve/applications/: ServeInstanceDetails (proxies, applications, …)>} or null,
     "errors": {"objects": "what went wrong fetching them"}}

A resource left out was not polled this time; ``cluster_status`` (what the cluster had and what waited for it, then)
is kept whole, a sample a poll; so is ``serve`` (Serve's state, polled once a ServeController lives: null before), a
sample each time it changed. Each row is kept as Ray gave it, under an ID that names the entity
from one poll to the next, with the state whose changes make its history. Drivers, whose workers Ray's event stream
never reports, become patches of the ``workers`` table, folded as its events are.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import orjson
import pyarrow as pa

from raysight import wire
from raysight.errors import BadIngest
from raysight.ingest.fields import int_field, json_object, session_field
from raysight.signals.ray_events.parse import Key, Patch
from raysight.tables import Column, Table, arrow_rows, columns


def _text(row: dict[str, Any], key: str) -> str:
    value = row.get(key)
    return "" if value is None else str(value)


def _digest(row: dict[str, Any], *keys: str) -> str:
    """An ID for an entity Ray gives none: a digest of the fields that tell it apart."""
    return hashlib.sha1(orjson.dumps([row.get(k) for k in keys], option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]


@dataclass(frozen=True)
class Kind:
    """A polled resource: how a row's ID and its state are read (``None``: not a row of this resource)."""

    id: Callable[[dict[str, Any]], str | None]
    state: Callable[[dict[str, Any]], str]
    sample: bool = False  # only the last poll's rows stand (they churn: objects)


KINDS = {
    "placement_groups": Kind(lambda r: r.get("placement_group_id") or None, lambda r: _text(r, "state")),
    # One object is listed once per worker that holds a reference to it
    "objects": Kind(
        lambda r: f"{r['object_id']}:{_text(r, 'pid')}:{_text(r, 'reference_type')}" if r.get("object_id") else None,
        lambda r: _text(r, "reference_type"),
        sample=True,
    ),
    "runtime_envs": Kind(
        lambda r: _digest(r, "runtime_env", "node_id") if "runtime_env" in r else None,
        lambda r: "success" if r.get("success") else "failed",
    ),
    "cluster_events": Kind(lambda r: r.get("event_id") or None, lambda r: _text(r, "severity")),
    "jobs": Kind(lambda r: r.get("submission_id") or r.get("job_id") or None, lambda r: _text(r, "status")),
    # Ray's workers of type DRIVER (its stream reports none), also folded into the workers table: driver_patch
    "drivers": Kind(
        lambda r: (
            r.get("worker_id") if r.get("worker_type") == "DRIVER" and isinstance(r.get("worker_id"), str) else None
        ),
        lambda r: "ALIVE" if r.get("is_alive") is not False else "DEAD",
    ),
    # The workers Ray's own debugger holds paused now (each poll's rows alone stand): its pauses, beside raysight's
    "paused_workers": Kind(
        lambda r: r.get("worker_id") if isinstance(r.get("worker_id"), str) else None,
        lambda r: "PAUSED",
        sample=True,
    ),
}
STATUS: Final = "cluster_status"  # (wire.RayState's)
SERVE: Final = "serve"  # (wire.RayState's)
MAX_BODY = 64 * 1024 * 1024  # a poll of every resource at Ray's list limits
MAX_ROWS = 20_000  # of one resource in one poll (Ray's own lists stop at 10,000)
# What the polls found (raw input): each entity's last row as Ray gave it, when first and last polled, its state then
# and every change of it (a sampled resource holds the last poll's rows only); what the cluster had and what waited
# for it (the dashboard's cluster status: usage and demand), each poll; how each resource's polls went: the last that
# succeeded, with its rows, and the last error (`raysight doctor`).
POLLED = Table(
    "polled",
    columns(
        session="VARCHAR",
        resource="VARCHAR",
        id="VARCHAR",
        first_ns="BIGINT",
        last_ns="BIGINT",
        state="VARCHAR",
        row="JSON",
    )
    + [Column("history", {"ts": "BIGINT", "state": "VARCHAR"}, "union")],
    key=("session", "resource", "id"),
)
CLUSTER_STATUS = Table("cluster_status", columns(session="VARCHAR", ns="BIGINT", status="JSON"), key=("session", "ns"))
# Serve's state as the dashboard gave it (ServeInstanceDetails), each time it changed: first polled so (``ns``), last
# polled so (``last_ns``)
SERVE_DETAILS = Table(
    "serve_details",
    columns(session="VARCHAR", ns="BIGINT", last_ns="BIGINT", details="JSON"),
    key=("session", "ns"),
)
POLLS = Table(
    "polls",
    columns(
        session="VARCHAR",
        resource="VARCHAR",
        last_ok_ns="BIGINT",
        rows="BIGINT",
        last_error="VARCHAR",
        last_error_ns="BIGINT",
    ),
    key=("session", "resource"),
)
POLL_TABLES = [POLLED, CLUSTER_STATUS, SERVE_DETAILS, POLLS]
# A poll's rows as staged: the store adds the session, the times and the history
SCHEMA = POLLED.arrow_schema(omit=("session", "first_ns", "last_ns", "history"))


@dataclass(frozen=True)
class Poll:
    session: str
    polled_ns: int
    rows: pa.Table  # one row an entity: resource, id, state, row (JSON)
    polled: list[str]  # the resources this poll fetched (a sampled one's earlier rows are replaced)
    errors: dict[str, str]  # resource → why it could not be fetched
    cluster_status: str | None = None  # JSON: the autoscaler's view then (usage, demand), when polled
    serve: str | None = None  # JSON: Serve's state then (ServeInstanceDetails), when polled
    drivers: list[tuple[str, Key, Patch]] = field(default_factory=list)  # patches of the workers table


def _rows(resource: str, values: Any) -> list[dict[str, str]]:
    if not isinstance(values, list):
        raise BadIngest(f"resources.{resource} must be a list of rows")
    if len(values) > MAX_ROWS:
        raise BadIngest(f"resources.{resource}: over {MAX_ROWS} rows in one poll")
    kind, out = KINDS[resource], {}
    for i, row in enumerate(values):
        entity = kind.id(row) if isinstance(row, dict) else None
        if not isinstance(entity, str):
            raise BadIngest(f"resources.{resource}[{i}] is not a row of {resource} (an object with its ID)")
        out[entity] = {"resource": resource, "id": entity, "state": kind.state(row), "row": orjson.dumps(row).decode()}
    return list(out.values())  # (a row listed twice is kept once: the last)


def _ms(row: dict[str, Any], key: str) -> int | None:
    value = row.get(key)
    return value if isinstance(value, int) and 0 < value < 1 << 62 else None  # (Ray's "unset": 0 or 2**64 - 1)


def driver_patch(session: str, row: dict[str, Any], seen_dead_ns: int) -> tuple[str, Key, Patch]:
    """The ``workers`` patch of a driver's row as Ray lists it (a row of ``drivers``). Its history is read from the
    row — alive since its start, dead at its end (else when it was first seen dead) — so the same row polled again
    adds nothing to it."""
    start, end = _ms(row, "start_time_ms"), _ms(row, "end_time_ms")
    history: list[Patch] = [{"ts": start * 1_000_000, "state": "ALIVE", "start_ms": start}] if start else []
    if row.get("is_alive") is False:
        exit_type, exit_detail = row.get("exit_type"), row.get("exit_detail")
        history.append(
            {
                "ts": end * 1_000_000 if end else seen_dead_ns,
                "state": "DEAD",
                "end_ms": end,
                "exit_type": exit_type if isinstance(exit_type, str) else None,
                "exit_detail": exit_detail if isinstance(exit_detail, str) else None,
            }
        )
    pid, node_id, worker_id = row.get("pid"), row.get("node_id"), str(row["worker_id"])
    patch: Patch = {
        "node_id": node_id if isinstance(node_id, str) else None,
        "worker_type": "DRIVER",
        "pid": pid if isinstance(pid, int) else None,
        "job_id": worker_id[:8],  # a driver's worker ID is its job's ID, then f's
        "defined": True,
        "history": history or None,
    }
    return ("workers", (session, worker_id), patch)


def parse(body: bytes) -> Poll:
    """The poll a body carries; BadIngest says what is wrong with one that is not well formed."""
    sent = json_object(body, "resources", dict, '{"session", "polled_ns", "resources": {...}, "errors": {...}}')
    poll = wire.shaped(sent, wire.RayState)
    session = session_field(poll["session"], "session")
    polled_ns = int_field(poll["polled_ns"], "polled_ns")
    assert polled_ns is not None
    unknown = set(poll["resources"]) - set(KINDS)
    if unknown:
        raise BadIngest(f"unknown resources {sorted(unknown)}: known are {', '.join(KINDS)}")
    errors = poll["errors"] or {}
    polled = [*KINDS, STATUS, SERVE]
    if not (isinstance(errors, dict) and all(k in polled and isinstance(v, str) for k, v in errors.items())):
        raise BadIngest("errors must map a resource to a message")
    status = poll[STATUS]
    if status is not None and not (isinstance(status, dict) and isinstance(status.get("loadMetricsReport"), dict)):
        raise BadIngest(f"{STATUS} must be the dashboard's cluster status, an object with its loadMetricsReport")
    serve = poll[SERVE]
    if serve is not None and not (isinstance(serve, dict) and isinstance(serve.get("applications"), dict)):
        raise BadIngest(f"{SERVE} must be Serve's ServeInstanceDetails, an object with its applications")
    fetched = sorted(poll["resources"]) + [STATUS] * (status is not None) + [SERVE] * (SERVE in sent)
    if both := set(errors) & set(fetched):
        raise BadIngest(f"{sorted(both)} both polled and failed")
    try:  # (kept as JSON: orjson writes at most 254 levels, which no row of Ray's comes near)
        rows = [row for resource, values in poll["resources"].items() for row in _rows(resource, values)]
        status_json, serve_json = (None if v is None else orjson.dumps(v).decode() for v in (status, serve))
    except orjson.JSONEncodeError as exc:
        raise BadIngest(f"a row, the cluster status or Serve's state cannot be kept: {exc}") from None
    drivers = [driver_patch(session, row, polled_ns) for row in poll["resources"].get("drivers", [])]  # (checked)
    return Poll(
        session,
        polled_ns,
        arrow_rows(rows, SCHEMA),
        fetched,
        {k: v[:2000] for k, v in errors.items()},
        status_json,
        serve_json,
        drivers,
    )
