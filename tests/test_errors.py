"""`raysight errors` over the recorded Ray session (a task that raises, a worker crash whose task is retried, an
actor whose worker crashes and which restarts, an actor killed with `ray.kill`): each root cause once, what
followed from it counted under it, normal ends left out; and the placeholders that make one cause of many values."""

from __future__ import annotations

import base64
from typing import Any

import duckdb
import pytest
from starlette.testclient import TestClient

from raysight.signals.ray_events.failures_query import template_sql
from tests.test_inference import AGENT_SAW_NS, end_run, record, rows, see, sessions, sighting
from tests.test_otlp_receiver import JSON, JSON_TRACE, json_export, json_span, settle
from tests.test_ray_state_ingest import NODE, send


def groups(server: TestClient, **params: Any) -> list[dict[str, Any]]:
    answer = server.get("/api/raysight/errors", params=params)
    assert answer.status_code == 200, answer.text
    found: list[dict[str, Any]] = answer.json()["groups"]
    return found


@pytest.mark.parametrize(
    ("text", "template"),
    [
        ("ValueError: shard 42 failed after 3.5 s", "ValueError: shard <n> failed after <n> s"),
        ("KeyError: 'user-17'", "KeyError: '<str>'"),
        ('OSError: cannot open "/data/x.parquet" on 10.0.0.7:6379', 'OSError: cannot open "<str>" on <addr>'),
        ("FileNotFoundError: [Errno 2] /tmp/ray/session_1/x.txt", "FileNotFoundError: [Errno <n>] <path>"),
        ("actor b51ba3824720f51ba2ca95c401000000 at 0x7f3a2c", "actor <id> at <id>"),
        ("\x1b[36mray::f()\x1b[39m died", "ray::f() died"),
        ("was 1.80GB used / 23.54GB limit; usage 1922826240B", "was <n> used / <n> limit; usage <n>"),
        ("object 847261553091722a of 01000000 at 0a0b0c0d", "object <id> of <n> at <id>"),
        ("OSError: Failed to download gcs://_ray_pkg_a1b2.zip from", "OSError: Failed to download <url> from"),
    ],
)
def test_a_cause_keeps_its_words_and_loses_its_values(text: str, template: str) -> None:
    assert duckdb.execute(f"SELECT {template_sql('$1')}", [text]).fetchall()[0][0] == template


def test_each_root_cause_once_with_what_followed_from_it(server: TestClient, ray_batches) -> None:
    record(server, ray_batches, "?cluster=rec&run=run-1")
    found = {g["kind"] + " " + g["error_type"]: g for g in groups(server)}
    assert set(found) == {"worker SYSTEM_ERROR", "task TASK_EXECUTION_EXCEPTION", "actor ACTOR_DIED"}
    crashes = found["worker SYSTEM_ERROR"]  # crash_once's first worker, and Fragile's: one cause, two workers
    assert crashes["count"] == 2 and crashes["consequences"] == {"tasks": 2, "actors": 1}
    assert {"crash_once", "Fragile", "Fragile.die"} <= set(crashes["affected"])
    assert crashes["error"].startswith("Worker unexpectedly exits with a connection error code <n>. End of file.")
    latest = server.get(f"/api/raysight/errors/{crashes['group_id']}").json()["failures"][-1]  # (in time order)
    assert crashes["example"]["id"] == latest["id"] and crashes["last_ms"] == latest["time_ms"]  # its latest failure
    assert crashes["example"]["error"].startswith("Worker unexpectedly exits with a connection error code 2. End of")
    raised = found["task TASK_EXECUTION_EXCEPTION"]
    assert (raised["exception_type"], raised["error"], raised["affected"]) == (
        "ValueError",
        "ValueError: boom",
        ["fails"],
    )
    assert raised["example"]["message"].endswith('raise ValueError("boom")\nValueError: boom')
    assert raised["example"]["error"] == "ValueError: boom"
    killed = found["actor ACTOR_DIED"]
    assert killed["error"] == "The actor is dead because it was killed by `ray.kill`." and killed["affected"] == [
        "Counter"
    ]
    assert len({g["group_id"] for g in found.values()}) == 3
    end_run(server, "run-1")  # the cluster ends cleanly: its nodes, workers and actors read dead, none a failure
    (session,) = sessions(server)
    (node,) = rows(server, "nodes")
    see(server, sighting(session["session"], "raylet", node["node_id"], False, AGENT_SAW_NS))  # gone with it
    assert not any(w["is_alive"] for w in rows(server, "workers", session["session"]))
    assert {g["group_id"]: g["count"] for g in groups(server)} == {g["group_id"]: g["count"] for g in found.values()}


def test_a_node_that_died_under_a_running_cluster_is_the_root_of_all_on_it(server: TestClient, ray_batches) -> None:
    record(server, ray_batches, "?cluster=prod")
    (session,) = sessions(server)
    (node,) = rows(server, "nodes")
    see(server, sighting(session["session"], "raylet", node["node_id"], False, AGENT_SAW_NS))
    (died,) = [g for g in groups(server) if g["kind"] == "node"]
    assert died["error_type"] == "NODE_DIED" and died["error"].startswith("its raylet (pid <n>) on node-<n> was gone")
    assert died["consequences"]["workers"] >= 1 and died["consequences"]["actors"] == 1  # Fragile, still ALIVE
    assert "Fragile" in died["affected"]


FRAGILE, ITS_WORKER = "tRujgkcg9RuiypXEAQAAAA==", "Mb6+BXy0u5yvxBxlLpDh82PbbVAoDJ094UOhOg=="  # (its second)


def ended_with_its_owner(worker_dead_at: str) -> list[dict[str, Any]]:
    """What Ray sent of the recorded Fragile when its driver exited (as a real run of the demo caught it): the actor
    dead with its owner at 19:46:28, then its worker stopped by a SIGTERM, at ``worker_dead_at``."""
    common = {"sourceType": "GCS", "severity": "INFO", "sessionName": "session_2026-11-21_19-46-15_579671_2021"}
    owner_died = {
        "reason": "OWNER_DIED",
        "errorMessage": "The actor is dead because its owner has died. Owner Id: 01000000ffffffffffffffffffffffffffff"
        "ffffffffffffffffffff Owner Ip address: 192.0.2.2 Owner worker exit type: INTENDED_USER_EXIT Worker exit "
        "detail: Owner's worker process has crashed.",
    }
    dead = {"state": "DEAD", "timestamp": "2026-11-21T19:46:28.000000000Z"}
    actor = {"actorId": FRAGILE, "stateTransitions": [{**dead, "deathCause": {"actorDiedErrorContext": owner_died}}]}
    stopped = {
        "exitType": "SYSTEM_ERROR",
        "exitDetail": "Worker exits unexpectedly by a signal. SystemExit is raised (sys.exit is called). Exit code: 1. "
        "The process receives a SIGTERM.",
    }
    transition = {"state": "DEAD", "timestamp": worker_dead_at, "endTimeMs": "1795290388012", "deathInfo": stopped}
    worker = {"workerId": ITS_WORKER, "jobId": "AQAAAA==", "stateTransitions": [transition]}
    return [
        {**common, "eventId": "ZW5kZWQtYWN0b3I=", "eventType": "ACTOR_LIFECYCLE_EVENT", "timestamp": dead["timestamp"]}
        | {"actorLifecycleEvent": actor},
        {**common, "eventId": "ZW5kZWQtd29ya2Vy", "eventType": "WORKER_LIFECYCLE_EVENT", "timestamp": worker_dead_at}
        | {"workerLifecycleEvent": worker},
    ]


@pytest.mark.parametrize(("worker_dead_at", "a_crash"), [("28.012", False), ("27.990", True)])
def test_a_worker_stopped_once_its_actor_ended_with_its_owner_is_no_crash(
    server: TestClient, ray_batches, worker_dead_at: str, a_crash: bool
) -> None:
    """The driver exits: Ray marks Fragile dead with its owner (no failure), then its raylet stops Fragile's worker,
    which, stopped by a SIGTERM, says it "exits unexpectedly by a signal", a SYSTEM_ERROR: no crash either. A worker
    that died before its actor ended so did crash."""
    record(server, [*ray_batches, ended_with_its_owner(f"2026-11-21T19:46:{worker_dead_at}000000Z")], "?cluster=rec")
    (actor,) = [a for a in rows(server, "actors") if a["class_name"] == "Fragile"]
    assert (actor["state"], actor["state_inferred"]) == ("DEAD", False)  # as Ray sent it
    worker = base64.b64decode(ITS_WORKER).hex()
    assert bool(server.get(f"/api/raysight/errors/{worker}").json()["failures"]) is a_crash
    crashes = [g for g in groups(server) if g["kind"] == "worker"]
    assert sum(g["count"] for g in crashes) == 2 + a_crash  # crash_once's first worker, Fragile's first
    assert [g["kind"] for g in groups(server) if g["kind"] == "actor"] == ["actor"]  # Counter's ray.kill


def test_errors_filter_by_type_job_and_time(server: TestClient, ray_batches) -> None:
    record(server, ray_batches, "?cluster=rec")
    assert [g["error_type"] for g in groups(server, type="task_execution_exception")] == ["TASK_EXECUTION_EXCEPTION"]
    assert len(groups(server, job="01000000")) == 3 and groups(server, job="ff000000") == []
    assert groups(server, since=2**62) == [] and len(groups(server, until=2**62)) == 3
    assert len(groups(server, since="2020-01-01")) == 3 and groups(server, until="2020-01-01T00:00:00Z") == []
    assert groups(server, since="-1d") == [] and len(groups(server, until="+1d")) == 3  # (recorded in 2026)
    bad = server.get("/api/raysight/errors", params={"since": "yesterday"})
    assert bad.status_code == 400 and "since" in bad.json()["error"]
    assert "nor an ISO 8601 time nor epoch ns" in bad.json()["error"]
    unknown = server.get("/api/raysight/errors", params={"session": "session_nope"})
    assert unknown.status_code == 404 and "raysight sessions" in unknown.json()["error"]


def test_show_gives_one_failure_whole_or_a_group_s_failures(server: TestClient, ray_batches) -> None:
    record(server, ray_batches, "?cluster=rec")
    tasks = {t["name"]: t for t in rows(server, "tasks") if t["attempt_number"] == 0}
    crash = server.get(f"/api/raysight/errors/{tasks['crash_once']['task_id']}").json()
    (first,) = crash["failures"]  # attempt 1 succeeded
    assert (first["attempt"], first["error_type"], first["root_kind"]) == (0, "WORKER_DIED", "worker")
    assert [(a["attempt"], a["state"]) for a in crash["attempts"]] == [(0, "FAILED"), (1, "FINISHED")]
    assert {b["kind"] for b in first["beside"]} >= {"worker"}  # its worker's death, on the same worker
    raised = server.get(f"/api/raysight/errors/{tasks['fails']['task_id']}").json()["failures"][0]
    assert raised["message"].endswith('raise ValueError("boom")\nValueError: boom') and raised["root_kind"] is None
    group = server.get(f"/api/raysight/errors/{first['group_id']}").json()
    assert {f["kind"] for f in group["failures"]} == {"task"} and group["group_id"] == first["group_id"]
    unknown = server.get("/api/raysight/errors/" + "ab" * 24)
    assert unknown.status_code == 404 and "`raysight errors` lists what failed" in unknown.json()["error"]
    malformed = server.get("/api/raysight/errors/not-an-id")
    assert malformed.status_code == 400 and "is no ID" in malformed.json()["error"]


ENTITY_IDS = {"tasks": "task_id", "actors": "actor_id", "workers": "worker_id", "nodes": "node_id", "jobs": "job_id"}


def test_an_entity_that_did_not_fail_has_no_failures_and_an_id_of_nothing_is_not_found(
    server: TestClient, ray_batches
) -> None:
    """What the dashboard's "its failures, if any" asks of every entity's page: an empty list, not a 404, for an
    entity that did not fail; a 404 only for an ID that names nothing in the session (another session's, say)."""
    record(server, ray_batches, "?cluster=rec")
    failed, fine = set(), set()
    for resource, key in ENTITY_IDS.items():
        for row in rows(server, resource):
            answer = server.get(f"/api/raysight/errors/{row[key]}")
            assert answer.status_code == 200, answer.text
            (failed if answer.json()["failures"] else fine).add(resource)
            assert answer.json()["id"] == row[key]
    assert fine == {"tasks", "workers", "nodes", "jobs"} and failed == {"tasks", "actors", "workers"}
    for nothing in ("ab" * 24, "ff000000"):
        answer = server.get(f"/api/raysight/errors/{nothing}")
        assert answer.status_code == 404 and f"has ID {nothing} in" in answer.json()["error"]


ESC = "\x1b"
LINK = f"{ESC}]8;;https://docs.ray.io{ESC}\\docs{ESC}]8;;{ESC}\\"  # an OSC 8 hyperlink, as rich writes one


def coloured(batches: list[list[dict[str, Any]]]) -> list[list[dict[str, Any]]]:
    """The recorded session with more escapes in what Ray says of each failure (a task's error, an actor's death, a
    worker's exit): a colour, a bold, a link. The failed task's error holds Ray's own colours already."""

    def paint(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: f"{ESC}[1;31m{v}{ESC}[0m {LINK}" if k in ("errorMessage", "exitDetail") else paint(v)
                for k, v in value.items()
            }
        return [paint(v) for v in value] if isinstance(value, list) else value

    return paint(batches)  # type: ignore[no-any-return]


def test_ray_s_colours_are_stored_as_sent_and_left_out_of_every_answer(server: TestClient, ray_batches) -> None:
    """Escapes in failures' messages (Ray's own colours, and made-up ones: a bold red, an OSC link) are kept in the
    store as Ray sent them, and no JSON answer holds one — raysight's lists and gets, the errors and each failure
    (its message and its detail), Ray's own list API (which Ray's CLI prints as YAML), a span's status and exception
    — except a failure's message asked for with ``colours``, for a terminal."""
    record(server, coloured(ray_batches), "?cluster=rec")
    raised = f"{ESC}[36mray::fails(){ESC}[39m (pid=2398)\nValueError: boom"  # a driver's ray.get re-raised it
    event = {"name": "exception", "attributes": [{"key": "exception.message", "value": {"stringValue": raised}}]}
    span = {**json_span("ray.get"), "status": {"code": 2, "message": raised}, "events": [event]}
    assert server.post("/v1/traces", content=json_export(span), headers=JSON).status_code == 200
    settle(server)
    job = {"type": "SUBMISSION", "submission_id": "raysubmit_1", "job_id": "02000000", "status": "FAILED"}
    polled = {
        "jobs": [{**job, "message": f"Job failed: {raised}"}],  # the tail of its driver's output
        "runtime_envs": [{"runtime_env": {"pip": ["nope"]}, "node_id": NODE, "success": False, "error": raised}],
    }
    assert send(server, 1_000, polled, session=sessions(server)[0]["session"]).status_code == 200
    (fails,) = [t for t in rows(server, "tasks") if t["name"] == "fails"]
    answers = [
        f"/api/raysight/{resource}?detail=true&limit=1000&session=*" for resource in ("tasks", "actors", "workers")
    ]
    answers += [f"/api/raysight/errors/{t['task_id']}" for t in rows(server, "tasks") if t["error_type"]]
    answers += [f"/api/raysight/errors/{a['actor_id']}" for a in rows(server, "actors")]
    answers += ["/api/raysight/errors", "/api/v0/tasks?detail=true", "/api/v0/actors?detail=true"]
    answers += ["/api/v0/workers?detail=true", "/api/jobs/", "/api/v0/runtime_envs?detail=true"]
    answers += [f"/api/raysight/traces/{JSON_TRACE.lower()}"]
    replies = {path: server.get(path) for path in answers}
    assert {path: r.status_code for path, r in replies.items()} == dict.fromkeys(answers, 200)
    texts = {path: reply.text for path, reply in replies.items()}
    assert not [path for path, text in texts.items() if "\\u001b" in text.lower() or ESC in text]
    assert texts[answers[-1]].count("ray::fails() (pid=2398)") == 2  # the span's status, its exception's message
    assert "ray::fails() (pid=2398" in texts["/api/raysight/errors"] and "docs" in texts[answers[1]]
    assert all("ray::fails() (pid=2398)" in texts[path] for path in ("/api/jobs/", "/api/v0/runtime_envs?detail=true"))
    kept = server.get(f"/api/raysight/errors/{fails['task_id']}", params={"colours": "true"}).json()["failures"]
    assert kept[0]["message"].startswith(f"{ESC}[1;31mUser exception:\n{ESC}[36mray::fails(){ESC}[39m (pid=2398")
    assert kept[0]["message"].endswith(f"ValueError: boom{ESC}[0m {LINK}")


def _b64(hex_id: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_id)).decode()


def serve_replicas_events() -> list[dict[str, Any]]:
    """Three Serve replicas in the recorded session, as Ray sends their actors and workers: Scorer's ``r1`` whose
    process exits (its actor dies with its worker, a SYSTEM_ERROR), Scorer's ``r2`` that Serve starts after it, and
    Greeter's ``g1`` that Serve stops (``ray.kill``: its worker exits as intended)."""
    common = {"sourceType": "GCS", "severity": "INFO", "sessionName": "session_2026-11-21_19-46-15_579671_2021"}
    node = "et+TUQojyNvveDlAErz4HhMF6gY2URbcjkpU6w=="
    events: list[dict[str, Any]] = []

    def event(kind: str, at: str, body: dict[str, Any]) -> None:
        stamp = f"2026-11-21T19:46:{at}000000Z"
        key = {"ACTOR_DEFINITION_EVENT": "actorDefinitionEvent", "ACTOR_LIFECYCLE_EVENT": "actorLifecycleEvent"}.get(
            kind, "workerDefinitionEvent" if kind == "WORKER_DEFINITION_EVENT" else "workerLifecycleEvent"
        )
        event_id = base64.b64encode(f"serve-{len(events)}".encode()).decode()
        events.append({**common, "eventId": event_id, "eventType": kind, "timestamp": stamp, key: body})

    def replica(n: int, deployment: str, replica_id: str, alive: str, dead: str | None, death: dict[str, Any]) -> None:
        actor, worker = _b64(f"{n:02x}" * 12 + "01000000"), _b64(f"{n:02x}" * 28)
        name = f"SERVE_REPLICA::greeter#{deployment}#{replica_id}"
        event("WORKER_DEFINITION_EVENT", alive, {"workerId": worker, "nodeId": node, "pid": 900 + n})
        definition = {"actorId": actor, "jobId": "AQAAAA==", "name": name, "rayNamespace": "serve"}
        event("ACTOR_DEFINITION_EVENT", alive, {**definition, "className": f"ServeReplica:greeter:{deployment}"})
        up = {"state": "ALIVE", "timestamp": f"2026-11-21T19:46:{alive}000000Z", "nodeId": node, "workerId": worker}
        event("ACTOR_LIFECYCLE_EVENT", alive, {"actorId": actor, "stateTransitions": [{**up, "pid": 900 + n}]})
        if dead is not None:
            cause = {"actorDiedErrorContext": {**death["actor"], "actorId": actor, "name": name}}
            down = {"state": "DEAD", "timestamp": f"2026-11-21T19:46:{dead}000000Z", "deathCause": cause}
            event("ACTOR_LIFECYCLE_EVENT", dead, {"actorId": actor, "stateTransitions": [down, down]})  # (twice)
            gone = {"state": "DEAD", "timestamp": f"2026-11-21T19:46:{dead}000000Z", "deathInfo": death["worker"]}
            event("WORKER_LIFECYCLE_EVENT", dead, {"workerId": worker, "jobId": "AQAAAA==", "stateTransitions": [gone]})

    exited = "Worker unexpectedly exits with a connection error code 2. End of file."
    crashed = {
        "actor": {
            "reason": "WORKER_DIED",
            "errorMessage": f"The actor is dead because its worker process has died. "
            f"Worker exit type: SYSTEM_ERROR Worker exit detail: {exited}",
        },
        "worker": {"exitType": "SYSTEM_ERROR", "exitDetail": exited},
    }
    killed = "The actor is dead because it was killed by `ray.kill`."
    stopped = {
        "actor": {"reason": "RAY_KILL", "errorMessage": killed},
        "worker": {
            "exitType": "INTENDED_SYSTEM_EXIT",
            "exitDetail": f"Worker exits because the actor is killed. {killed}",
        },
    }
    replica(0xA1, "Scorer", "r1", "24.100", "25.100", crashed)
    replica(0xA2, "Scorer", "r2", "26.100", None, {})
    replica(0xA3, "Greeter", "g1", "24.200", "27.100", stopped)
    return events


def test_a_crashed_serve_replica_is_a_failure_of_its_own_and_one_serve_stopped_is_none(
    server: TestClient, ray_batches
) -> None:
    """A Serve replica whose process exited is one failure, of kind replica (its worker's death the same event, not
    another), counted once though Ray sent its death twice, with the replica Serve started after it named; one that
    Serve stopped with ``ray.kill`` is no failure, nor is its worker's exit."""
    record(server, [*ray_batches, serve_replicas_events()], "?cluster=rec")
    (replica,) = [g for g in groups(server) if g["kind"] == "replica"]
    assert (replica["count"], replica["error_type"], replica["affected"]) == (
        1,
        "ACTOR_DIED",
        ["ServeReplica:greeter:Scorer"],
    )
    example = replica["example"]
    assert example["id"] == "a1" * 12 + "01000000" and example["replica_id"] == "r1", example
    assert example["replacement"]["replica_id"] == "r2" and example["failed_requests"] == [], example
    assert "SYSTEM_ERROR" in example["message"]
    assert sum(g["count"] for g in groups(server) if g["kind"] == "worker") == 2  # the recording's own crashes
    assert [g["affected"] for g in groups(server) if g["kind"] == "actor"] == [["Counter"]]  # not Greeter's g1
    shown = server.get(f"/api/raysight/errors/{example['id']}").json()["failures"]
    assert [(f["kind"], f["replica_id"], f["replacement"]["replica_id"]) for f in shown] == [("replica", "r1", "r2")]
