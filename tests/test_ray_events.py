"""Parsing Ray's event stream: pure functions over recorded batches and hand-made bad events."""

from __future__ import annotations

import copy

from raysight.ingest.ids import b64_to_hex, parse_ts_ns
from raysight.ingest.ray_events import parse_batch
from raysight.store.fold import fold


def test_ids_decode_to_rays_hex_and_nil_ids_to_none() -> None:
    assert b64_to_hex("yO9FzNARJXH///////////////8BAAAA") == "c8ef45ccd0112571" + "ff" * 12 + "01000000"
    assert b64_to_hex("////////////////////////") is None
    assert b64_to_hex("") is None


def test_timestamps_keep_nanoseconds() -> None:
    assert parse_ts_ns("2026-11-21T19:46:20.382588593Z") == 1795290380382588593
    assert parse_ts_ns("2026-11-21T19:46:20.380Z") == 1795290380380000000
    assert parse_ts_ns("yesterday") is None


def test_every_recorded_event_is_kept_raw_and_folded(ray_batches) -> None:
    events = [e for b in ray_batches for e in b]
    batch = parse_batch(events, label="lab")
    assert len(batch.events) == len(events) and not batch.quarantined
    assert all(e.raw.supported for e in batch.events)
    tasks = fold(batch.events).rows["tasks"]
    fails = next(p for p in tasks.values() if p.get("name") == "fails")
    assert fails["error_type"] == "TASK_EXECUTION_EXCEPTION" and "boom" in fails["error_message"]
    crash = sorted((k[2], p) for k, p in tasks.items() if p.get("name") == "crash_once")
    assert [a for a, _ in crash] == [0, 1]
    assert crash[0][1]["error_type"] == "WORKER_DIED"
    (session,) = batch.sessions.values()
    assert session["label"] == "lab" and session["first_ns"] < session["last_ns"]


def test_owner_and_executor_halves_merge_into_one_attempt(ray_batches) -> None:
    events = [e for b in ray_batches for e in b]
    folded = fold(parse_batch(events).events)
    counter_inc = {k: p for k, p in folded.rows["tasks"].items() if p.get("name") == "Counter.inc"}
    assert len(counter_inc) == 3
    for key, p in counter_inc.items():
        states = {t["state"] for t in folded.appends["task_transitions"] if (t["task_id"], t["attempt"]) == key[1:]}
        assert {"RUNNING", "FINISHED"} <= states  # executor's RUNNING and owner's FINISHED
        assert p["state_key"][0] and p["state_key"][2] == "FINISHED" and p["start_ns"] < p["state_key"][1]
        assert p["worker_pid"] and p["worker_id"] and p["stdout_file"]


def test_malformed_events_are_quarantined_with_reasons_and_the_rest_kept(ray_batches) -> None:
    good = ray_batches[0][0]
    no_payload = {k: v for k, v in good.items() if k != "nodeDefinitionEvent"}
    bad_transitions = copy.deepcopy(ray_batches[0][1])
    bad_transitions["nodeLifecycleEvent"]["stateTransitions"] = "ALIVE"
    unknown = {**good, "eventType": "SOMETHING_NEW_EVENT", "eventId": "AAAA"}
    events = [good, 42, {"eventType": "TASK_DEFINITION_EVENT"}, no_payload, bad_transitions, unknown]
    batch = parse_batch(events)
    assert [e.raw.event_type for e in batch.events] == ["NODE_DEFINITION_EVENT", "SOMETHING_NEW_EVENT"]
    assert [e.raw.supported for e in batch.events] == [True, False]
    reasons = [q.reason for q in batch.quarantined]
    assert len(reasons) == 4
    assert "not an object" in reasons[0] and "sessionName" in reasons[1]
    assert "nodeDefinitionEvent" in reasons[2] and "stateTransitions" in reasons[3]
