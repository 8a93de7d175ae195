"""What raysight infers of a Ray session whose ends Ray never sent, through the HTTP API: every inference says so and
why, an end of execution alone is no success, and a driver that sent no task events is named by the doctor."""

from __future__ import annotations

import base64
from typing import Any

import orjson
from starlette.testclient import TestClient

from tests.test_server import post

RUN_ENDED_NS = 1795290400000000000  # after the recording's last event


def record(server: TestClient, batches: list[list[dict[str, Any]]], query: str) -> None:
    for batch in batches:
        post(server, batch, query)


def rows(server: TestClient, resource: str, session: str = "*") -> list[dict[str, Any]]:
    return server.get(f"/api/raysight/{resource}", params={"detail": "true", "limit": 1000, "session": session}).json()[
        "rows"
    ]


def sessions(server: TestClient) -> list[dict[str, Any]]:
    return server.get("/api/raysight/sessions").json()["sessions"]


def end_run(server: TestClient, run_id: str) -> None:
    """What `raysight run` reports when its driver exits."""
    (job,) = rows(server, "jobs")
    driver_pid = int(job["driver_info"]["pid"])
    reply = server.post(
        "/ingest/agent/run-exit",
        json={"run_id": run_id, "driver_pid": driver_pid, "exit_code": 0, "ended_ns": RUN_ENDED_NS},
    )
    assert reply.status_code == 200


def test_nodes_workers_and_actors_of_an_ended_session_read_dead_and_say_why(server: TestClient, ray_batches) -> None:
    record(server, ray_batches, "?cluster=rec&run=run-1")
    (node,) = rows(server, "nodes")
    assert (node["state"], node["state_inferred"]) == ("ALIVE", False)  # the session is not over yet
    end_run(server, "run-1")
    (node,) = rows(server, "nodes")
    assert (node["state"], node["reported_state"], node["state_inferred"]) == ("DEAD", "ALIVE", True)
    assert "the driver that started this local cluster exited" in node["inferred_reason"]
    assert node["state_message"] == node["inferred_reason"] and node["end_time_ms"] == RUN_ENDED_NS // 1_000_000
    actors = {a["class_name"]: a for a in rows(server, "actors")}
    fragile, counter = actors["Fragile"], actors["Counter"]
    assert (fragile["state"], fragile["reported_state"], fragile["state_inferred"]) == ("DEAD", "ALIVE", True)
    assert "Ray never sent its end" in fragile["death_message"]
    assert (counter["state"], counter["state_inferred"]) == ("DEAD", False)  # Ray said so itself
    workers = rows(server, "workers")
    assert not any(w["is_alive"] for w in workers)
    assert all(w["inferred_reason"] for w in workers if w["state_inferred"])
    assert {w["reported_state"] for w in workers if w["state_inferred"]} == {"ALIVE"}
    ray_nodes = server.get("/api/v0/nodes", params={"detail": "1"}).json()["data"]["result"]["result"]
    assert [n["state"] for n in ray_nodes] == ["DEAD"]  # Ray's own CLI sees the same


def test_an_end_of_execution_alone_is_not_success(server: TestClient, ray_batches) -> None:
    """The recording lost the owner's end of three nested tasks; their executors recorded the end of execution."""
    record(server, ray_batches, "?cluster=rec&run=run-1")
    end_run(server, "run-1")
    children = [t for t in rows(server, "tasks") if t["name"] == "child"]
    unknown = [t for t in children if t["state_inferred"]]
    assert unknown, "the recording has children whose owner never sent their end"
    for task in unknown:
        assert (task["state"], task["reported_state"], task["error_type"]) == ("NIL", "RUNNING", None)
        assert task["inferred_reason"].startswith("outcome unknown: the executing worker recorded the end")
    (creation,) = [t for t in rows(server, "tasks") if t["name"] == "Fragile.__init__" and t["state_inferred"]]
    assert creation["state"] == "FINISHED" and creation["inferred_reason"].startswith("its actor became ALIVE")


def test_a_later_session_of_the_same_cluster_ends_the_one_before(server: TestClient, ray_batches) -> None:
    """`ray start` clusters (no `raysight run`): Ray never reports their stop; their next session is the evidence."""
    record(server, ray_batches, "?cluster=prod")
    (earlier,) = sessions(server)
    assert earlier["end_time_ms"] is None
    node_event = next(e for b in ray_batches for e in b if e["eventType"] == "NODE_DEFINITION_EVENT")
    later = {**node_event, "eventId": "bmV4dHNlc3Npb24=", "sessionName": "session_2026-11-22_00-00-00_000000_1"}
    later["timestamp"] = "2026-11-22T00:00:00Z"
    post(server, [later], "?cluster=prod")
    ended = {s["session"]: s for s in sessions(server)}[earlier["session"]]
    assert ended["end_time_ms"] == earlier["last_event_ms"]
    assert ended["end_reason"].startswith(f"a later session of cluster prod began, {later['sessionName']}")
    (node,) = rows(server, "nodes", earlier["session"])
    assert (node["state"], node["state_inferred"]) == ("DEAD", True) and later["sessionName"] in node["inferred_reason"]
    post(server, [{**later, "eventId": "b3RoZXJsYWJlbA==", "sessionName": "session_other"}], "?cluster=staging")
    (still,) = rows(server, "nodes", later["sessionName"])
    assert (still["state"], still["state_inferred"]) == ("ALIVE", False)  # another cluster's session ends nothing


def test_sessions_of_one_label_that_overlap_end_none_of_each_other(server: TestClient, ray_batches) -> None:
    """Two `ray start` clusters under one `--cluster` label run at once: neither's events end the other; a session
    that begins after both ends both, until an earlier event of it arrives and shows it overlapping them."""
    node_event = next(e for b in ray_batches for e in b if e["eventType"] == "NODE_DEFINITION_EVENT")

    def at(session: str, second: int) -> None:
        event_id = base64.b64encode(f"{session}-{second}".encode()).decode()
        event = {**node_event, "eventId": event_id, "sessionName": session}
        post(server, [{**event, "timestamp": f"2026-11-22T00:00:{second:02d}Z"}], "?cluster=prod")

    def ends() -> dict[str, str | None]:
        return {s["session"]: s["end_reason"] for s in sessions(server)}

    for second in range(4):  # a and b alternate
        at("session_a" if second % 2 == 0 else "session_b", second)
    assert ends() == {"session_a": None, "session_b": None}
    assert [n["state_inferred"] for n in rows(server, "nodes")] == [False, False]
    at("session_c", 10)  # began after both stopped: their successor
    reasons = ends()
    assert reasons["session_c"] is None
    for earlier in ("session_a", "session_b"):
        assert (reasons[earlier] or "").startswith("a later session of cluster prod began, session_c;")
    assert {n["session"]: n["state"] for n in rows(server, "nodes")} == {
        "session_a": "DEAD",
        "session_b": "DEAD",
        "session_c": "ALIVE",
    }
    at("session_c", 1)  # its aggregator's first batch came late: c ran beside a and b all along
    assert ends() == {"session_a": None, "session_b": None, "session_c": None}
    assert {n["state"] for n in rows(server, "nodes")} == {"ALIVE"}


OWNER_SIDE = ("TASK_DEFINITION_EVENT", "ACTOR_TASK_DEFINITION_EVENT")


def executor_side_only(batches: list[list[dict[str, Any]]], session: str) -> list[list[dict[str, Any]]]:
    """What arrives (as ``session``) from a driver started without the export variables: its tasks' executors'
    events (lifecycle events that carry the executing worker's pid, and profiles), not its owner's."""

    def from_executor(event: dict[str, Any]) -> bool:
        if event["eventType"] in OWNER_SIDE:
            return False
        return event["eventType"] != "TASK_LIFECYCLE_EVENT" or bool(event["taskLifecycleEvent"].get("workerPid"))

    return [[{**e, "sessionName": session} for e in batch if from_executor(e)] for batch in batches]


FRAGILE_INIT = "//////////+1G6OCRyD1G6LKlcQBAAAA"  # the creation task of the recording's restarted actor


def creation_attempts(server: TestClient, session: str) -> dict[int, dict[str, Any]]:
    task_id = base64.b64decode(FRAGILE_INIT).hex()
    return {t["attempt_number"]: t for t in rows(server, "tasks", session) if t["task_id"] == task_id}


def test_each_attempt_of_an_actors_creation_is_judged_by_the_actors_history(server: TestClient, ray_batches) -> None:
    """Fragile was restarted once (ALIVE, RESTARTING, ALIVE) and its owner's events are missing: the attempt that
    made it ALIVE finished although a later one began; where its restart failed (DEAD after RESTARTING), the last
    attempt failed although the actor had been ALIVE before."""
    executed = executor_side_only(ray_batches, "session_restarted")
    attempt_1 = next(
        e
        for batch in executed
        for e in batch
        if e["eventType"] == "TASK_LIFECYCLE_EVENT" and e["taskLifecycleEvent"]["taskId"] == FRAGILE_INIT
    )
    # The recording lost attempt 0's RUNNING with its worker (which died within the second); this is what it sends.
    running = [{"state": "RUNNING", "timestamp": "2026-11-21T19:46:24.400000000Z"}]
    lifecycle = {**attempt_1["taskLifecycleEvent"], "taskAttempt": 0, "workerPid": 2538, "stateTransitions": running}
    attempt_0 = {**attempt_1, "eventId": "YXR0ZW1wdDA=", "taskLifecycleEvent": lifecycle}
    record(server, [*executed, [attempt_0]], "?cluster=restarted")
    attempts = creation_attempts(server, "session_restarted")
    assert [attempts[n]["state"] for n in (0, 1)] == ["FINISHED", "FINISHED"]
    assert all(a["inferred_reason"].startswith("its actor became ALIVE") for a in attempts.values())

    def restart_fails(event: dict[str, Any]) -> dict[str, Any]:
        if event["eventType"] != "ACTOR_LIFECYCLE_EVENT":
            return {**event, "sessionName": "session_failed"}
        transitions = [
            {**t, "state": "DEAD", "deathCause": {"actorDiedErrorContext": {"errorMessage": "restart failed"}}}
            if t["timestamp"] == "2026-11-21T19:46:25.006843924Z"
            else t
            for t in event["actorLifecycleEvent"]["stateTransitions"]
        ]
        actor = {**event["actorLifecycleEvent"], "stateTransitions": transitions}
        return {**event, "sessionName": "session_failed", "actorLifecycleEvent": actor}

    record(server, [[restart_fails(e) for e in batch] for batch in [*executed, [attempt_0]]], "?cluster=failed")
    attempts = creation_attempts(server, "session_failed")
    assert attempts[0]["state"] == "FINISHED"
    assert (attempts[1]["state"], attempts[1]["error_type"]) == ("FAILED", "ACTOR_DIED")
    assert attempts[1]["inferred_reason"].startswith("its actor died before becoming ALIVE (restart failed)")


def test_the_doctor_names_a_driver_that_sent_no_task_events(server: TestClient, ray_batches) -> None:
    record(server, ray_batches, "?cluster=rec")
    assert server.get("/api/raysight/doctor").json()["drivers_without_task_events"] == []  # a crash is no warning
    record(server, executor_side_only(ray_batches, "session_plain"), "?cluster=plain")
    (warning,) = server.get("/api/raysight/doctor").json()["drivers_without_task_events"]
    assert (warning["label"], warning["job_id"]) == ("plain", "01000000") and warning["tasks"] > 0
    assert "RAY_enable_core_worker_ray_event_to_aggregator=1" in warning["message"]
    assert "--system-config" in warning["message"]
    types = {t["name"]: t["type"] for t in rows(server, "tasks", "plain")}  # the IDs still tell the types
    assert types["Counter.inc"] == "ACTOR_TASK" and types["my_counter:Counter.__init__"] == "ACTOR_CREATION_TASK"
    assert types["child"] == "NORMAL_TASK"


AGENT_SAW_NS = 1795290400000000000  # after the recording's last event


def see(server: TestClient, *sightings: dict[str, Any], host: str = "node-1") -> int:
    """Post what a node agent on ``host`` saw; how many sightings changed what the store kept."""
    reply = server.post("/ingest/agent/node-life", json={"host": host, "sightings": list(sightings)})
    assert reply.status_code == 200, reply.text
    changed: int = reply.json()["changed"]
    return changed


def sighting(session: str, process: str, node_id: str, alive: bool, ns: int, last_alive_ns: int | None = None):
    return {
        "session": session,
        "process": process,
        "node_id": node_id,
        "pid": 4242,
        "alive": alive,
        "ns": ns,
        "last_alive_ns": last_alive_ns,
    }


def test_a_node_whose_raylet_an_agent_saw_gone_is_dead_and_so_is_all_on_it(server: TestClient, ray_batches) -> None:
    """A `ray start` cluster killed whole: Ray's last events are lost, the node agent's sightings are the evidence."""
    record(server, ray_batches, "?cluster=prod")
    (session,) = sessions(server)
    (node,) = rows(server, "nodes")
    assert (node["state"], node["state_inferred"]) == ("ALIVE", False)
    name, node_id, last_alive = session["session"], node["node_id"], AGENT_SAW_NS - 1_000_000_000
    raylet = lambda alive, ns: sighting(name, "raylet", node_id, alive, ns, last_alive)  # noqa: E731
    assert see(server, raylet(True, last_alive), raylet(False, AGENT_SAW_NS)) == 1  # the newest of one process
    (node,) = rows(server, "nodes")
    assert (node["state"], node["reported_state"], node["state_inferred"]) == ("DEAD", "ALIVE", True)
    assert node["inferred_reason"].startswith("its raylet (pid 4242) on node-1 was gone by 2026-11-21 19:46:40 UTC")
    assert node["inferred_reason"].endswith("as raysight's node agent saw; Ray never sent its end")
    assert node["end_time_ms"] == last_alive // 1_000_000
    workers = rows(server, "workers")
    assert not any(w["is_alive"] for w in workers)
    for worker in (w for w in workers if w["state_inferred"]):
        assert worker["inferred_reason"].startswith("its node died (its raylet (pid 4242) on node-1 was gone")
    fragile = next(a for a in rows(server, "actors") if a["class_name"] == "Fragile")
    assert (fragile["state"], fragile["reported_state"]) == ("DEAD", "ALIVE")
    assert fragile["death_message"].startswith("its node died while it was ALIVE (its raylet (pid 4242)")
    open_tasks = [t for t in rows(server, "tasks") if t["reported_state"] not in ("FINISHED", "FAILED")]
    assert open_tasks and all(t["state_inferred"] and t["inferred_reason"] for t in open_tasks)
    (ended,) = sessions(server)
    assert (ended["end_reason"], ended["end_time_ms"]) == ("every node of the cluster died", last_alive // 1_000_000)
    assert see(server, raylet(True, last_alive)) == 0  # a resent older sighting changes nothing
    assert rows(server, "nodes")[0]["state"] == "DEAD"


def test_a_session_whose_gcs_an_agent_saw_gone_has_ended_until_it_is_seen_again(
    server: TestClient, ray_batches
) -> None:
    record(server, ray_batches, "?cluster=prod")
    (session,) = sessions(server)
    gcs = lambda alive, ns: sighting(session["session"], "gcs_server", "", alive, ns)  # noqa: E731
    assert see(server, gcs(True, AGENT_SAW_NS - 1)) == 1  # running: a healthy session's sighting ends nothing
    assert sessions(server)[0]["end_reason"] is None
    see(server, gcs(False, AGENT_SAW_NS))
    (ended,) = sessions(server)
    assert ended["end_reason"].startswith("its gcs_server (pid 4242) on node-1 was gone by 2026-11-21 19:46:40 UTC")
    assert ended["end_time_ms"] == AGENT_SAW_NS // 1_000_000  # (no last_alive_ns: when it was seen gone)
    (node,) = rows(server, "nodes")
    assert node["state"] == "DEAD" and node["inferred_reason"].startswith("the cluster ended (its gcs_server")
    see(server, gcs(True, AGENT_SAW_NS + 1))  # a GCS restarted (Ray's GCS fault tolerance): the session goes on
    (going_on,) = sessions(server)
    assert going_on["end_reason"] is None
    assert (rows(server, "nodes")[0]["state"], rows(server, "nodes")[0]["state_inferred"]) == ("ALIVE", False)


def test_bad_node_sightings_are_refused_saying_why_and_keep_nothing(server: TestClient, ray_batches) -> None:
    record(server, ray_batches, "?cluster=prod")
    (session,) = sessions(server)
    good = sighting(session["session"], "gcs_server", "", False, AGENT_SAW_NS)
    for body, says in [
        (b"not json", "body is not JSON"),
        (b"[]", "must be a JSON object"),
        (orjson.dumps({"host": "h", "sightings": [{**good, "process": "dashboard"}]}), "process must be one of"),
        (orjson.dumps({"host": "h", "sightings": [{**good, "process": "raylet"}]}), "node_id must be a raylet's"),
        (orjson.dumps({"host": "h", "sightings": [{**good, "alive": 0}]}), "alive must be true or false"),
        (orjson.dumps({"host": "h", "sightings": [{**good, "ns": -1}]}), "ns must be an integer"),
        (orjson.dumps({"host": "", "sightings": [good]}), "host must be a string"),
        (orjson.dumps({"host": "h", "sightings": [good] * 10_001}), "over 10000 sightings"),
    ]:
        reply = server.post("/ingest/agent/node-life", content=body, headers={"Content-Type": "application/json"})
        assert reply.status_code == 400 and says in reply.json()["error"], (body[:80], reply.text)
    assert sessions(server)[0]["end_reason"] is None
