"""What the dashboard shows of a cluster's resources and processes: each node's use of its CPUs, GPUs, memory and object
store from Ray's node stats as scraped (``/api/raysight/usage``), and each worker's process title and actor."""

from __future__ import annotations

import base64
from typing import Any

from starlette.testclient import TestClient

from raysight import wire
from tests.test_inference import record, rows

SESSION = "session_2026-11-21_19-46-15_579671_2021"  # the recorded session's (tests/fixtures/ray_batches.json)
T0 = 1_795_290_390_000
N1, N2 = "a1" * 28, "b2" * 28


def scrape(server: TestClient, ms: int, text: str, job: str = "ray") -> None:
    body = {"session": SESSION, "scraped_ms": ms, "target": {"instance": "h:1", "job": job}, "text": text}
    assert server.post(wire.AGENT_METRICS, json=body).status_code == 200


def hex_id(b64: str) -> str:
    return base64.b64decode(b64).hex()


def test_each_nodes_newest_stats_are_its_use_of_what_it_has_and_the_cluster_sums_them(server: TestClient) -> None:
    for i, busy in enumerate((10, 50)):  # the newest scrape's values count
        scrape(
            server,
            T0 + 5_000 * i,
            f'ray_node_cpu_utilization{{NodeId="{N1}"}} {busy}\nray_node_cpu_count{{NodeId="{N1}"}} 4\n'
            f'ray_node_mem_used{{NodeId="{N1}"}} 1e9\nray_node_mem_total{{NodeId="{N1}"}} 8e9\n'
            f'ray_object_store_used_memory{{NodeId="{N1}",Component="raylet"}} 1e8\n'
            f'ray_object_store_available_memory{{NodeId="{N1}",Component="raylet"}} 3e8\n'
            f'ray_node_cpu_utilization{{NodeId="{N2}"}} 100\nray_node_cpu_count{{NodeId="{N2}"}} 2\n'
            f'ray_node_gpus_utilization{{NodeId="{N2}",GpuIndex="0"}} 30\n'
            f'ray_node_gpus_utilization{{NodeId="{N2}",GpuIndex="1"}} 70\n',
        )
    found = server.get("/api/raysight/usage").json()
    assert found["session"] == SESSION and [n["node_id"] for n in found["nodes"]] == [N1, N2]
    one, two = found["nodes"]
    assert one["sampled_ms"] == T0 + 5_000 and one["usage"] == {
        "CPU": {"used": 2.0, "total": 4.0},
        "memory": {"used": 1e9, "total": 8e9},
        "object_store_memory": {"used": 1e8, "total": 4e8},
    }
    assert two["usage"] == {"CPU": {"used": 2.0, "total": 2.0}, "GPU": {"used": 1.0, "total": 2.0}}
    assert found["usage"]["CPU"] == {"used": 4.0, "total": 6.0} and found["usage"]["GPU"] == {"used": 1.0, "total": 2.0}
    (only,) = server.get("/api/raysight/usage", params={"node": N2.upper()}).json()["nodes"]
    assert only["node_id"] == N2
    earlier = server.get("/api/raysight/usage", params={"at": T0 + 1_000}).json()["nodes"][0]
    assert earlier["usage"]["CPU"]["used"] == 0.4  # (at a moment: its newest sample before then)
    for params in ({"node": "n1"}, {"at": "soon"}):
        bad = server.get("/api/raysight/usage", params=params)
        assert bad.status_code == 400 and next(iter(params)) in bad.json()["error"]
    assert server.get("/api/raysight/usage", params={"session": "session_nope"}).status_code == 404


def test_a_workers_process_title_is_its_newest_and_its_actor_is_named(server: TestClient, ray_batches: Any) -> None:
    record(server, ray_batches, "?cluster=rec")
    fragile_worker = hex_id("Mb6+BXy0u5yvxBxlLpDh82PbbVAoDJ094UOhOg==")  # the Fragile actor's, once it restarted
    for i, title in enumerate(("ray::IDLE", "ray::Fragile")):  # a worker idle first, then its actor's
        labels = f'NodeId="{N1}",pid="2567",Component="{title}",WorkerId="{fragile_worker}"'
        scrape(server, T0 + 5_000 * i, f"raysight_process_cpu_seconds_total{{{labels}}} {i}\n", job="raysight")
    workers = {w["worker_id"]: w for w in rows(server, "workers", SESSION)}
    assert workers[fragile_worker]["process_name"] == "ray::Fragile"
    assert workers[fragile_worker]["actor_id"] == hex_id("tRujgkcg9RuiypXEAQAAAA==")
    others = [w for w in workers.values() if w["worker_id"] != fragile_worker]
    assert {w["process_name"] for w in others} == {None}
