"""`ray status` at any moment of a session: what its cluster had and what waited for it, from the poller's samples
(``cluster_status``), beside the nodes raysight recorded."""

from __future__ import annotations

from typing import Any

import duckdb
import orjson

from raysight.signals.polls import resources
from raysight.signals.ray_events.entities import NODES
from raysight.store.statements import Query, dict_rows

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
    resolved = session
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
