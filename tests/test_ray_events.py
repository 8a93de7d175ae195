"""Parsing Ray's event stream: recorded batches and hand-made bad events through the store's parsers (DuckDB for
task events, Python for the cluster-level ones)."""

from __future__ import annotations

import base64
import copy
from pathlib import Path

import orjson
import pytest

from raysight.signals.ray_events.apply import Post, apply_posts
from raysight.signals.ray_events.conversions import b64_to_hex, parse_ts_ns
from raysight.store.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path)
    yield s
    s.close()


def rows(store: Store, sql: str) -> list[dict]:
    cursor = store.con.execute(sql)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("yO9FzNARJXH///////////////8BAAAA", "c8ef45ccd0112571" + "ff" * 12 + "01000000"),
        ("////////////////////////", None),
        ("", None),
    ],
)
def test_ids_decode_to_rays_hex_and_nil_ids_to_none_alike_in_python_and_sql(store: Store, text, expected) -> None:
    assert b64_to_hex(text) == expected
    assert store.con.execute("SELECT ray_id(?)", [text]).fetchall() == [(expected,)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-21T19:46:20.382588593Z", 1795290380382588593),
        ("2026-11-21T19:46:20.380Z", 1795290380380000000),
        ("2026-11-21T19:46:20Z", 1795290380000000000),
        ("2026-11-21T19:46:20.5z", 1795290380500000000),  # RFC 3339 allows a lowercase z
        ("9999-12-31T00:00:00Z", None),  # past what int64 nanoseconds hold
        ("yesterday", None),
        ("2026-11-21 19:46:20Z", None),  # only the shape Ray writes: a T, ...
        ("2026-11-21T24:00:00Z", None),  # hours to 23, ...
        ("2026-11-21T19:46:20.-5Z", None),  # digits after the point, ...
        ("2026-11-21T19:46:20", None),  # the zone, ...
        ("2026-11-21T19:46:20Z ", None),  # and nothing after it
        ("2026-02-30T00:00:00Z", None),
    ],
)
def test_timestamps_keep_nanoseconds_alike_in_python_and_sql(store: Store, text, expected) -> None:
    assert parse_ts_ns(text) == expected
    assert store.con.execute("SELECT ray_ts_ns(?)", [text]).fetchall() == [(expected,)]


def test_every_recorded_event_is_kept_raw_and_folded(store: Store, ray_batches) -> None:
    events = [e for b in ray_batches for e in b]
    result = apply_posts(store, [Post(orjson.dumps(events), label="lab")])
    assert result.stored == len(events) and result.quarantined == result.unsupported == 0
    tasks = rows(store, "SELECT * FROM tasks")
    fails = next(t for t in tasks if t["name"] == "fails")
    assert fails["error_type"] == "TASK_EXECUTION_EXCEPTION" and "boom" in fails["error_message"]
    assert fails["reported_state"] == "FAILED" and fails["func_or_class_name"] == "fails"
    crash = sorted((t["attempt"], t) for t in tasks if t["name"] == "crash_once")
    assert [a for a, _ in crash] == [0, 1]
    assert crash[0][1]["error_type"] == "WORKER_DIED" and crash[1][1]["reported_state"] == "FINISHED"
    creation = next(t for t in tasks if t["type"] == "ACTOR_CREATION_TASK")
    assert creation["actor_id"] == creation["task_id"][16:]  # an actor's creation task ID embeds its actor ID
    (session,) = rows(store, "SELECT * FROM sessions")
    assert session["label"] == "lab" and session["first_ns"] < session["last_ns"]
    assert session["events"] == len(events)


def test_owner_and_executor_halves_merge_into_one_attempt(store: Store, ray_batches) -> None:
    apply_posts(store, [Post(orjson.dumps(b)) for b in ray_batches])
    counter_inc = rows(store, "SELECT * FROM tasks WHERE name = 'Counter.inc'")
    assert len(counter_inc) == 3
    for task in counter_inc:
        states = {
            r["state"]
            for r in rows(
                store,
                f"SELECT state FROM task_transitions WHERE task_id = "
                f"'{task['task_id']}' AND attempt = {task['attempt']}",
            )
        }
        assert {"RUNNING", "FINISHED"} <= states  # executor's RUNNING and owner's FINISHED
        assert task["reported_state"] == "FINISHED" and task["start_ns"] < task["end_ns"]
        assert task["worker_pid"] and task["worker_id"] and task["stdout_file"] and task["actor_id"]
        assert task["exec_worker_id"] and task["exec_start_ns"] <= task["executed_ns"]


def test_malformed_events_are_quarantined_with_reasons_and_the_rest_kept(store: Store, ray_batches) -> None:
    events = [e for b in ray_batches for e in b]
    good = events[0]
    no_payload = {k: v for k, v in good.items() if k != "nodeDefinitionEvent"}
    bad_transitions = copy.deepcopy(events[1])
    bad_transitions["nodeLifecycleEvent"]["stateTransitions"] = "ALIVE"
    task = next(e for e in events if e["eventType"] == "TASK_LIFECYCLE_EVENT")
    bad_task_transitions = copy.deepcopy(task)
    bad_task_transitions["taskLifecycleEvent"]["stateTransitions"] = [{"state": 3, "timestamp": "now"}]
    no_task_id = copy.deepcopy(task)
    del no_task_id["taskLifecycleEvent"]["taskId"]
    bad_id = copy.deepcopy(task)
    bad_id["taskLifecycleEvent"]["jobId"] = "%%%"
    unknown = {**good, "eventType": "SOMETHING_NEW_EVENT", "eventId": "AAAA"}
    batch = [
        good,
        42,
        None,
        {"eventType": "TASK_DEFINITION_EVENT"},
        {**good, "sessionName": 7},
        no_payload,
        bad_transitions,
        bad_task_transitions,
        no_task_id,
        bad_id,
        unknown,
    ]
    result = apply_posts(store, [Post(orjson.dumps(batch))])
    assert result.stored == 2 and result.unsupported == 1 and result.quarantined == len(batch) - 2
    kept = rows(store, "SELECT event_type, supported FROM raw_events ORDER BY event_type")
    assert kept == [
        {"event_type": "NODE_DEFINITION_EVENT", "supported": True},
        {"event_type": "SOMETHING_NEW_EVENT", "supported": False},
    ]
    reasons = {r["body"]: r["reason"] for r in rows(store, "SELECT body, reason FROM quarantine")}
    assert reasons["42"] == "event is a number, not an object" and reasons["null"] == "event is null, not an object"

    def reason(event: dict) -> str:
        return next(why for body, why in reasons.items() if body != "null" and orjson.loads(body) == event)

    assert "sessionName" in reason({"eventType": "TASK_DEFINITION_EVENT"})
    assert "sessionName" in reason({**good, "sessionName": 7})
    assert "nodeDefinitionEvent" in reason(no_payload)
    assert "stateTransitions" in reason(bad_transitions)
    assert "state transition has no state" in reason(bad_task_transitions)
    assert reason(no_task_id) == "taskId is missing"
    assert reason(bad_id) == "not a base64 ID: %%%"


def test_a_task_event_is_read_from_its_own_payload_and_bad_transitions_never_reach_a_task(
    store: Store, ray_batches
) -> None:
    """A state transition without a state or a time is quarantined (it would rank above every real state), and
    only the payload an event's type names is folded."""
    events = [e for b in ray_batches for e in b]
    lifecycle = next(e for e in events if e["eventType"] == "TASK_LIFECYCLE_EVENT")

    def variant(n: int, **changes) -> dict:
        event = copy.deepcopy(lifecycle)
        event["eventId"] = base64.b64encode(bytes([n]) * 28).decode()
        event["taskLifecycleEvent"].update(changes)
        return event

    no_state = variant(1, stateTransitions=[{"timestamp": "2026-11-21T19:46:21Z"}])
    no_time = variant(2, stateTransitions=[{"state": "FINISHED"}])
    not_object = variant(3, stateTransitions=[1])
    lenient = variant(4, taskAttempt="abc", workerPid=True)  # not numbers: read as absent, as Ray would mean
    stray = {**copy.deepcopy(lifecycle), "eventType": "SOME_FUTURE_EVENT", "eventId": "c3RyYXlzdHJheQ=="}
    stray["taskLifecycleEvent"]["taskId"] = base64.b64encode(b"\x07" * 24).decode()
    result = apply_posts(store, [Post(orjson.dumps([no_state, no_time, not_object, lenient, stray]))])
    reasons = sorted(r for (r,) in store.con.execute("SELECT reason FROM quarantine").fetchall())
    assert reasons == [
        "a state transition has a bad timestamp: none",
        "a state transition has no state",
        "a state transition has no state",
    ]
    assert result.stored == 2 and result.unsupported == 1
    (task,) = rows(store, "SELECT * FROM tasks")
    assert (
        task["attempt"] == 0
        and task["worker_pid"] is None
        and task["task_id"] == b64_to_hex(lifecycle["taskLifecycleEvent"]["taskId"])
    )  # the future event's stray payload made no task
    assert None not in {t["state"] for t in rows(store, "SELECT state FROM task_transitions")}


def test_an_event_of_the_nil_task_folds_into_no_task_and_leaves_its_batch_whole(store: Store, ray_batches) -> None:
    """Ray 2.60 profiles work of no task (``task:store_outputs`` with a taskId of all ones: the nil ID); in a real
    run's batch it made the whole batch fail to fold (a task of no ID), quarantining the events beside it."""
    events = [e for b in ray_batches for e in b]
    lifecycle = next(e for e in events if e["eventType"] == "TASK_LIFECYCLE_EVENT")
    nil = base64.b64encode(b"\xff" * 24).decode()
    profiled = {
        "eventId": "ShT1AhMVlH5xrxg8onrjqfAZnnj5bDO34XQkXw==",  # as the run sent it
        "sourceType": "CORE_WORKER",
        "eventType": "TASK_PROFILE_EVENT",
        "timestamp": "2026-11-26T16:50:36.692705702Z",
        "severity": "INFO",
        "sessionName": lifecycle["sessionName"],
        "taskProfileEvents": {
            "taskId": nil,
            "jobId": "AQAAAA==",
            "profileEvents": {
                "componentType": "worker",
                "componentId": "fswC+hvvbG52lJoVobcolbdeIOHW29MTg41sKQ==",
                "nodeIpAddress": "192.0.2.2",
                "events": [
                    {
                        "startTime": "1795711836692705702",
                        "endTime": "1795711836692730359",
                        "extraData": "{}",
                        "eventName": "task:store_outputs",
                    }
                ],
            },
            "attemptNumber": 0,
        },
        "nodeId": "C4uNJs4D9RsIJwytdc0Pq4NnqIPKNYk6OQDzew==",
        "message": "",
    }
    transitions = copy.deepcopy(lifecycle)  # a lifecycle event of the nil task, its transitions included
    transitions["eventId"] = base64.b64encode(b"\x09" * 28).decode()
    transitions["taskLifecycleEvent"]["taskId"] = nil
    result = apply_posts(store, [Post(orjson.dumps([profiled, transitions, lifecycle]))])
    assert (result.stored, result.quarantined) == (3, 0)
    (task,) = rows(store, "SELECT task_id FROM tasks")
    assert task["task_id"] == b64_to_hex(lifecycle["taskLifecycleEvent"]["taskId"])
    assert rows(store, "SELECT * FROM task_profile WHERE task_id IS NULL") == []
    assert rows(store, "SELECT * FROM task_transitions WHERE task_id IS NULL") == []
