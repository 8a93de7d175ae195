"""What a poll of a live cluster's dashboard sends (``POST /ingest/agent/ray-state``): kept per entity with its
state's history, a sampled resource replaced by the newest poll, each resource's last poll and error remembered,
and answered by Ray's own state API shape; a body that is not a poll gets a 400 that says what is wrong."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from raysight import wire
from tests.test_inference import end_run, record, rows

SESSION = "session_2026-11-24_10-00-00_000000_1"
PG = "0a" * 18
NODE = "ab" * 28


def group(state: str) -> dict[str, Any]:
    return {
        "placement_group_id": PG,
        "name": "pg-a",
        "creator_job_id": "01000000",
        "state": state,
        "bundles": [{"bundle_id": f"{PG}:0", "unit_resources": {"CPU": 1.0}}],
        "is_detached": False,
        "stats": None,
    }


def obj(n: int) -> dict[str, Any]:
    return {
        "object_id": f"{n:02x}" * 28,
        "object_size": 1024 * n,
        "task_status": "FINISHED",
        "attempt_number": 0,
        "reference_type": "LOCAL_REFERENCE",
        "call_site": "disabled",
        "type": "DRIVER",
        "pid": 4242,
        "ip": "10.0.0.1",
    }


def driver(job_id: str, **fields: Any) -> dict[str, Any]:
    """A driver's row as Ray's workers list it (its launch times unset: 2**64 - 1)."""
    return {
        "worker_id": job_id + "f" * 48,
        "is_alive": True,
        "worker_type": "DRIVER",
        "exit_type": None,
        "node_id": NODE,
        "ip": "10.0.0.1",
        "pid": 4242,
        "exit_detail": None,
        "worker_launch_time_ms": 2**64 - 1,
        "worker_launched_time_ms": 2**64 - 1,
        "start_time_ms": 1_795_000_000_000,
        "end_time_ms": 0,
        **fields,
    }


def send(
    server: TestClient,
    ns: int,
    resources: dict[str, Any],
    errors: dict[str, str] | None = None,
    cluster_status: dict[str, Any] | None = None,
    session: str = SESSION,
) -> Any:
    body = {"session": session, "polled_ns": ns, "resources": resources, "errors": errors or {}}
    if cluster_status is not None:
        body["cluster_status"] = cluster_status
    return server.post(wire.AGENT_RAY_STATE, json=body)


def ray_list(server: TestClient, resource: str, **params: Any) -> dict[str, Any]:
    answer = server.get(wire.path(wire.RAY_STATE, resource=resource), params={"detail": "True", **params})
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()["data"]["result"]
    return result


def test_each_change_is_kept_as_history_and_a_late_poll_changes_nothing(server: TestClient) -> None:
    assert send(server, 1_000, {"placement_groups": [group("PENDING")]}).json() == {"ok": True, "rows": 1}
    send(server, 2_000, {"placement_groups": [group("CREATED")]})
    send(server, 3_000, {"placement_groups": [group("CREATED")]})
    send(server, 1_500, {"placement_groups": [group("RESCHEDULING")]})  # older than what is kept
    send(server, 4_000, {"placement_groups": [group("REMOVED")]})
    (row,) = ray_list(server, "placement_groups")["result"]
    assert row["state"] == "REMOVED" and row["bundles"][0]["unit_resources"] == {"CPU": 1.0}
    assert [h["state"] for h in row["state_history"]] == ["PENDING", "CREATED", "REMOVED"]
    assert (
        ray_list(server, "placement_groups", filter_keys="name", filter_predicates="=", filter_values="PG-A")["total"]
        == 1
    )  # matched as Ray matches: case-insensitively


def test_objects_are_the_newest_sample_and_say_so(server: TestClient) -> None:
    send(server, 1_000, {"objects": [obj(1), obj(2), obj(3)]})
    send(server, 2_000, {"objects": [obj(3), obj(4)]})
    send(server, 1_500, {"objects": [obj(5)]})  # late: the newer sample stands
    answer = server.get("/api/v0/objects").json()["data"]["result"]
    assert sorted(o["object_size"] for o in answer["result"]) == [3072, 4096]
    assert answer["warnings"] and "sample" in answer["warnings"][0]
    summary = server.get("/api/v0/objects/summarize").json()["data"]["result"]
    cluster = summary["result"]["node_id_to_summary"]["cluster"]
    assert summary["total"] == 2 and cluster["summary_by"] == "callsite" and not cluster["callsite_enabled"]
    assert cluster["summary"]["disabled"] == {
        "total_objects": 2,
        "total_size_mb": (3072 + 4096) / 2**20,
        "total_num_workers": 1,
        "total_num_nodes": 1,
        "task_state_counts": {"FINISHED": 2},
        "task_attempt_number_counts": {"0": 2},
        "ref_type_counts": {"LOCAL_REFERENCE": 2},
    }


def test_a_failed_resource_is_remembered_and_the_others_stand(server: TestClient) -> None:
    send(
        server,
        1_000,
        {
            "cluster_events": [
                {
                    "event_id": "e1",
                    "severity": "INFO",
                    "time": "2026-11-24 10:00:00",
                    "source_type": "GCS",
                    "message": "node added",
                }
            ]
        },
        {"objects": "ReadTimeout: the dashboard took too long"},
    )
    (event,) = ray_list(server, "cluster_events")["result"]
    assert event["message"] == "node added" and event["severity"] == "INFO"
    doctor = server.get("/api/raysight/doctor").json()
    polls = {p["resource"]: p for p in doctor["polls"] if p["session"] == SESSION}
    assert polls["cluster_events"]["rows"] == 1 and polls["cluster_events"]["last_ok_ms"] is not None
    assert polls["objects"]["last_error"].startswith("ReadTimeout") and polls["objects"]["last_ok_ms"] is None


def test_drivers_polled_are_workers_with_their_lives(server: TestClient) -> None:
    """Ray's stream reports no driver's worker: the polled drivers are listed among the workers, as Ray lists them,
    each polled again adding nothing, and a driver's end polled kept with its exit."""
    for ns in (1_000, 2_000):
        send(server, ns, {"drivers": [driver("01000000"), driver("02000000", pid=4343)]})
    ended = driver("02000000", pid=4343, is_alive=False, end_time_ms=1_795_000_060_000, exit_type="INTENDED_USER_EXIT")
    endless = driver("03000000", is_alive=False)  # dead, its end unknown: as first polled dead
    first_dead_ns = 1_795_000_100_000_000_000
    for ns in (first_dead_ns, first_dead_ns + 5_000_000_000):
        send(server, ns, {"drivers": [driver("01000000"), ended, endless]})
    workers = {w["worker_id"][:8]: w for w in ray_list(server, "workers")["result"]}
    alive, dead = workers["01000000"], workers["02000000"]
    assert (alive["worker_type"], alive["is_alive"], alive["pid"], alive["node_id"]) == ("DRIVER", True, 4242, NODE)
    assert alive["start_time_ms"] == 1_795_000_000_000 and alive["worker_launch_time_ms"] is None  # (Ray's unset)
    assert (dead["is_alive"], dead["exit_type"], dead["end_time_ms"]) == (
        False,
        "INTENDED_USER_EXIT",
        1_795_000_060_000,
    )
    (own,) = server.get("/api/raysight/workers/" + alive["worker_id"]).json()["rows"]
    assert own["job_id"] == "01000000"
    histories = server.app.state.raysight.writer.call(  # type: ignore[attr-defined]
        lambda store: store._run("SELECT worker_id[:8], len(history) FROM workers ORDER BY 1").fetchall()
    ).result(10)
    # alive; alive then dead (twice): each poll again added nothing
    assert histories == [("01000000", 1), ("02000000", 2), ("03000000", 2)]
    assert workers["03000000"]["end_time_ms"] == first_dead_ns // 1_000_000 and not workers["03000000"]["is_alive"]
    drivers = {"filter_keys": "worker_type", "filter_predicates": "=", "filter_values": "DRIVER"}
    before = ray_list(server, "workers", **drivers)
    assert before["total"] == 3
    server.post(
        "/api/raysight/reindex", json={}
    )  # rebuilt from the raw events, which hold no driver: kept all the same
    assert ray_list(server, "workers", **drivers) == before


def test_a_driver_alive_when_its_session_ended_is_inferred_dead(server: TestClient, ray_batches: Any) -> None:
    record(server, ray_batches, "?cluster=rec&run=run-1")
    (job,) = rows(server, "jobs")
    session = job["session"]
    send(server, 1_000, {"drivers": [driver(job["job_id"], pid=int(job["driver_info"]["pid"]))]}, session=session)
    (polled,) = [w for w in rows(server, "workers") if w["worker_type"] == "DRIVER"]
    assert polled["is_alive"] and not polled["state_inferred"]
    end_run(server, "run-1")
    (polled,) = [w for w in rows(server, "workers") if w["worker_type"] == "DRIVER"]
    assert (polled["is_alive"], polled["state_inferred"]) == (False, True), polled
    assert "the driver that started this local cluster exited" in polled["inferred_reason"]


def sample(cpus_used: float, demand: list[Any]) -> dict[str, Any]:
    usage = {"CPU": [cpus_used, 2.0], "objectStoreMemory": [0.0, 1e9]}
    return {"time": 1.0, "loadMetricsReport": {"usage": usage, "usageByNode": {NODE: usage}, "resourceDemand": demand}}


def test_status_at_a_moment_is_the_sample_at_or_before_it(server: TestClient) -> None:
    base = 1_795_000_000_000_000_000
    send(server, base, {}, cluster_status=sample(2.0, [[{"CPU": 4.0}, 1]]))
    send(server, base + 5_000_000_000, {}, cluster_status=sample(0.0, []))

    def status(**params: Any) -> dict[str, Any]:
        answer = server.get("/api/raysight/status", params={"session": SESSION, **params})
        assert answer.status_code == 200, answer.text
        found: dict[str, Any] = answer.json()
        return found

    then = status(at=base + 4_999_999_999)
    assert then["sampled_ms"] == base // 1_000_000 and then["demands"] == [{"shape": {"CPU": 4.0}, "count": 1}]
    assert then["usage"]["object_store_memory"] == {"used": 0.0, "total": 1e9}  # Ray's name, not the dashboard's
    assert status()["demands"] == [] and status()["usage"]["CPU"]["used"] == 0.0  # the last sample
    assert status(at=base - 1)["sampled_ms"] is None  # before any sample
    assert server.get("/api/raysight/status", params={"at": "yesterday"}).status_code == 400


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"not json", "not JSON"),
        (b"[]", "must be a JSON object"),
        (b'{"session": "session_s", "polled_ns": 1, "resources": {"secrets": []}}', "unknown resources"),
        (b'{"session": "session_s", "polled_ns": 1, "resources": {"objects": {}}}', "must be a list"),
        (b'{"session": "session_s", "polled_ns": 1, "resources": {"objects": [{"pid": 1}]}}', "not a row of objects"),
        (
            b'{"session": "session_s", "polled_ns": 1, "resources": {"drivers": [{"worker_id": "x"}]}}',
            "not a row of drivers",
        ),
        (b'{"session": "session_s", "polled_ns": "now", "resources": {}}', "polled_ns"),
        (b'{"session": "session_s", "polled_ns": 1, "resources": {"jobs": []}, "errors": {"jobs": "x"}}', "both"),
        (
            b'{"session": "session_s", "polled_ns": 1, "resources": {"cluster_events": ['
            + b",".join(b'{"event_id": "e%d"}' % i for i in range(20_001))
            + b"]}}",
            "over 20000 rows",
        ),
        (
            b'{"session": "session_s", "polled_ns": 1, "resources": {}, "cluster_status": {"time": 1}}',
            "loadMetricsReport",
        ),
        (b'{"session": "x\' OR 1=1 --", "polled_ns": 1, "resources": {}}', "the name of a Ray session"),
        (  # a row nested 1,000 deep was answered 500
            b'{"session": "session_s", "polled_ns": 1, "resources": {"placement_groups": [{"placement_group_id": "p", '
            + b'"x": '
            + b"[" * 1000
            + b"]" * 1000
            + b"}]}}",
            "cannot be kept",
        ),
    ],
)
def test_a_body_that_is_not_a_poll_gets_a_400_that_says_why(server: TestClient, body: bytes, says: str) -> None:
    answer = server.post(wire.AGENT_RAY_STATE, content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == 400 and says in answer.json()["error"], answer.text
    assert ray_list(server, "objects")["total"] == 0


def test_a_task_that_waited_shows_what_the_cluster_had_then(server: TestClient, ray_batches: Any) -> None:
    """`raysight get tasks ID` (the task's detail) for an attempt that was pending while the poller sampled the
    cluster: how long it waited, and the last sample's usage and demand; an attempt no sample saw pending: none."""
    record(server, ray_batches, "?cluster=rec")
    tasks = server.get("/api/raysight/tasks", params={"detail": "true", "limit": 100}).json()["rows"]
    waited = next(t for t in tasks if t["start_time_ms"] and t["start_time_ms"] - t["creation_time_ms"] >= 10)
    session = server.get("/api/raysight/sessions").json()["sessions"][0]["session"]
    pending_ns = (waited["creation_time_ms"] + 5) * 1_000_000
    body = {
        "session": session,
        "polled_ns": pending_ns,
        "resources": {},
        "cluster_status": sample(2.0, [[{"CPU": 1.0}, 3]]),
    }
    assert server.post(wire.AGENT_RAY_STATE, json=body).status_code == 200
    (row,) = [
        r
        for r in server.get(f"/api/raysight/tasks/{waited['task_id']}").json()["rows"]
        if r["attempt_number"] == waited["attempt_number"]
    ]
    assert row["waited"] == {
        "pending_ms": waited["start_time_ms"] - waited["creation_time_ms"],
        "samples": 1,
        "usage": {"CPU": {"used": 2.0, "total": 2.0}, "object_store_memory": {"used": 0.0, "total": 1e9}},
        "demands": [{"shape": {"CPU": 1.0}, "count": 3}],
    }
    others = server.get("/api/v0/tasks", params={"detail": "True", "limit": 100}).json()["data"]["result"]["result"]
    assert sum(t["waited"] is not None for t in others) >= 1 and any(t["waited"] is None for t in others)


def test_a_sample_taken_when_no_node_was_alive_is_not_shown(server: TestClient, ray_batches: Any) -> None:
    """A cluster shutting down still answers its last cluster status for a moment: a sample from a time when no
    node of the session was alive (raysight's own record) is stale, and the one before it stands."""
    record(server, ray_batches, "?cluster=rec")
    (node,) = server.get("/api/raysight/nodes", params={"detail": "true"}).json()["rows"]
    session = node["session"]
    alive_ns = (node["start_time_ms"] + 1000) * 1_000_000
    for ns, used in ((alive_ns, 1.0), ((node["start_time_ms"] - 1000) * 1_000_000, 2.0)):
        body = {"session": session, "polled_ns": ns, "resources": {}, "cluster_status": sample(used, [])}
        assert server.post(wire.AGENT_RAY_STATE, json=body).status_code == 200
    before = server.get("/api/raysight/status", params={"at": alive_ns - 1}).json()
    assert before["sampled_ms"] is None  # the one sample then came before the node: not shown
    assert server.get("/api/raysight/status").json()["usage"]["CPU"]["used"] == 1.0
