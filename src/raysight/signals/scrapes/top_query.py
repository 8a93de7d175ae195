"""`raysight metrics top`: a session's busiest nodes, workers and actors at a moment, from each Ray process's own
stats (``raysight_process_*``, ``agent/process_stats.py``), joined by worker ID to what ran in it: the worker's type
and job, its actor, and the tasks it was running then. Ray's own node stats beside each node (``ray_node_*``, which
raysight labels with the node's ID)."""

from __future__ import annotations

import math
from typing import Any

import duckdb

from raysight.errors import QueryFailed, QueryTimeout, Unavailable
from raysight.promql.budget import Budget
from raysight.promql.evaluator import evaluate
from raysight.promql.values import Vector
from raysight.settings import QueryLimits
from raysight.signals.scrapes.metrics_query import SessionMetrics

# What each process used at the moment (a rate over the last minute for CPU): key -> PromQL
PER_PROCESS = {
    "cpu": "rate(raysight_process_cpu_seconds_total[1m])",
    "rss_bytes": "raysight_process_resident_memory_bytes",
    "gpu_memory_bytes": "sum without (GpuIndex, GpuUuid) (raysight_process_gpu_memory_bytes)",
    "gpu_utilization": "sum without (GpuIndex, GpuUuid) (raysight_process_gpu_utilization_percent)",
}
PER_NODE = {
    "node_cpu_percent": "max by (NodeId) (ray_node_cpu_utilization)",
    "node_mem_used_bytes": "max by (NodeId) (ray_node_mem_used)",
    "node_mem_total_bytes": "max by (NodeId) (ray_node_mem_total)",
}
USAGE = ("cpu", "rss_bytes", "gpu_memory_bytes", "gpu_utilization")

# The worker, actor and running tasks of each worker ID (parameters: $session, $workers, $at_ns)
_WORKERS = """
SELECT w.worker_id, w.worker_type, w.job_id, a.actor_id, a.class_name, a.name AS actor_name,
       (SELECT list(DISTINCT coalesce(t.name, t.profile_name) ORDER BY coalesce(t.name, t.profile_name))
        FROM tasks t WHERE t.session = $session AND t.exec_worker_id = w.worker_id
          AND coalesce(t.exec_start_ns, t.start_ns) <= $at_ns
          AND (t.end_ns > $at_ns OR t.end_ns IS NULL AND t.inferred_state IS NULL)) AS running
FROM (SELECT unnest($workers::VARCHAR[]) AS worker_id) ids
LEFT JOIN workers w ON w.session = $session AND w.worker_id = ids.worker_id
LEFT JOIN actors a ON a.session = $session AND a.worker_id = ids.worker_id
"""


def _at(source: SessionMetrics, expr: str, at_ms: int, limits: QueryLimits) -> list[tuple[dict[str, str], float]]:
    try:
        value = evaluate(expr, source, at_ms, at_ms, 1, Budget(limits))
    except (QueryFailed, QueryTimeout) as exc:  # (the server's query budget: a session of too many processes to rank)
        raise Unavailable(
            f"ranking the processes goes over the server's query budget ({exc}); raise "
            "--query-max-samples or --query-timeout"
        ) from None
    assert isinstance(value, Vector)
    return [(s.labels, float(s.values[0])) for s in value.series if not math.isnan(s.values[0])]


def top(
    con: duckdb.DuckDBPyConnection, session: str, at_ms: int | None, limit: int, limits: QueryLimits
) -> dict[str, Any]:
    """The ``limit`` busiest nodes, workers and actors of ``session`` at ``at_ms`` (None: now, or an ended session's
    last scrape), by CPU, each query within ``limits`` (Unavailable past them)."""
    source = SessionMetrics(con, session)
    at_ms = source.default_at_ms() if at_ms is None else at_ms
    processes: dict[tuple[str, str], dict[str, Any]] = {}
    for key, expr in PER_PROCESS.items():
        for labels, value in _at(source, expr, at_ms, limits):
            process = processes.setdefault(
                (labels.get("NodeId", ""), labels.get("pid", "")),
                {
                    "node_id": labels.get("NodeId"),
                    "pid": int(labels["pid"]) if labels.get("pid", "").isdigit() else None,
                    "component": labels.get("Component"),
                    "worker_id": labels.get("WorkerId"),
                    **dict.fromkeys(USAGE),
                },
            )
            process[key] = value
    worker_ids = sorted({p["worker_id"] for p in processes.values() if p["worker_id"]})
    known = {
        row[0]: row
        for row in con.execute(
            _WORKERS, {"session": session, "workers": worker_ids, "at_ns": at_ms * 1_000_000}
        ).fetchall()
    }
    workers, actors = [], []
    for process in processes.values():
        if not process["worker_id"]:
            continue
        _, worker_type, job_id, actor_id, class_name, actor_name, running = known.get(process["worker_id"], (None,) * 7)
        worker = {**process, "worker_type": worker_type, "job_id": job_id, "actor_id": actor_id}
        workers.append({**worker, "running": running or []})
        if actor_id:
            actors.append({**worker, "class_name": class_name, "name": actor_name})
    return {
        "session": session,
        "at_ms": at_ms,
        "nodes": _busiest(_nodes(source, processes.values(), at_ms, limits), limit),
        "workers": _busiest(workers, limit),
        "actors": _busiest(actors, limit),
    }


def _nodes(source: SessionMetrics, processes: Any, at_ms: int, limits: QueryLimits) -> list[dict[str, Any]]:
    """Each node's processes summed, and Ray's own stats of the node."""
    nodes: dict[str, dict[str, Any]] = {}
    for process in processes:
        node = nodes.setdefault(
            process["node_id"] or "", {"node_id": process["node_id"], "processes": 0, **dict.fromkeys(USAGE)}
        )
        node["processes"] += 1
        for key in USAGE:
            if process[key] is not None:
                node[key] = (node[key] or 0) + process[key]
    for key, expr in PER_NODE.items():
        for labels, value in _at(source, expr, at_ms, limits):
            if (node_id := labels.get("NodeId")) is not None:
                nodes.setdefault(node_id, {"node_id": node_id, "processes": 0, **dict.fromkeys(USAGE)})[key] = value
    return list(nodes.values())


def _busiest(rows: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: (-(r.get("cpu") or 0), -(r.get("rss_bytes") or 0)))[:limit]
