"""What each node used of what it had, and the cluster's sum: the newest of Ray's node stats that raysight scraped
(``ray_node_*``, ``ray_object_store_*``, which raysight labels with the node's ID), as ``{"used", "total"}`` by Ray's
resource names, as `ray status` gives them (``signals/polls/status_query.py``)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import duckdb

from raysight.promql.source import LOOKBACK_MS
from raysight.store.statements import Query

# Ray's node stats read, each one node's newest sample in the lookback before the moment asked (an ended node's: before
# its end); the physical use, not what Ray's scheduler reserved (the poller's cluster status, sampled less often)
NODE_STATS: tuple[str, ...] = (
    "ray_node_cpu_utilization",
    "ray_node_cpu_count",
    "ray_node_mem_used",
    "ray_node_mem_total",
)
NODE_STATS += ("ray_object_store_used_memory", "ray_object_store_available_memory", "ray_node_gpus_utilization")
NODE_USAGE = Query(
    "node usage",
    f"""WITH moment AS (SELECT coalesce($at, least((SELECT max(ts_ms) FROM metric_scrapes WHERE session = $session),
                                             (SELECT coalesce(end_ns, inferred_end_ns) // 1000000 FROM nodes
                                              WHERE session = $session AND node_id = $node))) AS at_ms),
            s AS (SELECT series_no, name, labels['NodeId'] AS node_id FROM metric_series
                  WHERE session = $session AND name IN {NODE_STATS} AND ($node IS NULL OR labels['NodeId'] = $node))
        SELECT s.node_id, s.name, max(m.ts_ms) AS ts_ms, arg_max(m.value, m.ts_ms) AS value
        FROM metric_samples m JOIN s USING (series_no), moment
        WHERE m.ts_ms BETWEEN moment.at_ms - {LOOKBACK_MS} AND moment.at_ms
        GROUP BY s.node_id, s.name, m.series_no""",
    about="the newest sample of each of Ray's node stats of each node (or $node) at $at, or the session's last scrape",
)


def node_usage(
    con: duckdb.DuckDBPyConnection, session: str | None, node_id: str | None = None, at_ms: int | None = None
) -> dict[str, Any]:
    """What each node (or ``node_id``) used of its CPUs (cores busy), GPUs, memory and object store at ``at_ms``
    (default: the session's last scrape, or the node's last before it ended), and the sum over them: each by Ray's
    resource names as ``{"used", "total"}``; a node's ``sampled_ms``, its newest sample's moment."""
    stats: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    sampled: dict[str, int] = {}
    for node, name, ts_ms, value in con.execute(
        NODE_USAGE.sql, {"session": session, "node": node_id, "at": at_ms}
    ).fetchall():
        stats[node or ""][name].append(value)
        sampled[node or ""] = max(ts_ms, sampled.get(node or "", ts_ms))
    usages = {node: _usage(found) for node, found in stats.items()}
    cluster: dict[str, dict[str, float]] = {}
    for usage in usages.values():
        for name, pair in usage.items():
            summed = cluster.setdefault(name, {"used": 0.0, "total": 0.0})
            summed["used"] += pair["used"]
            summed["total"] += pair["total"]
    nodes = [{"node_id": node, "sampled_ms": sampled[node], "usage": usages[node]} for node in sorted(usages)]
    return {"session": session, "nodes": nodes, "usage": cluster}


def _usage(stats: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    """One node's stats (each series' value) as used and total of each resource it reported both of."""

    def one(name: str) -> float | None:
        return max(stats[name]) if stats.get(name) else None

    out = {}
    cores, busy = one("ray_node_cpu_count"), one("ray_node_cpu_utilization")
    if cores is not None and busy is not None:
        out["CPU"] = {"used": cores * busy / 100, "total": cores}
    if gpus := stats.get("ray_node_gpus_utilization"):  # a series a GPU, each in percent
        out["GPU"] = {"used": sum(gpus) / 100, "total": float(len(gpus))}
    used, total = one("ray_node_mem_used"), one("ray_node_mem_total")
    if used is not None and total is not None:
        out["memory"] = {"used": used, "total": total}
    used, free = one("ray_object_store_used_memory"), one("ray_object_store_available_memory")
    if used is not None and free is not None:
        out["object_store_memory"] = {"used": used, "total": used + free}
    return out
