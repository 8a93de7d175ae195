"""The dashboard's views of time over the recorded Ray session: its activity per interval, and its task stream (a
lane per worker, a bar per attempt in columns, `/api/raysight/task-stream`) — what they show, and that bad
parameters get a 400 that says why."""

from __future__ import annotations

from typing import Any

from starlette.testclient import TestClient

from tests.test_inference import record


def stream(server: TestClient, **params: Any) -> dict[str, Any]:
    answer = server.get("/api/raysight/task-stream", params=params)
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


def test_each_started_attempt_is_a_bar_in_its_workers_lane(server: TestClient, ray_batches: Any) -> None:
    record(server, ray_batches, "?cluster=rec")
    tasks = server.get("/api/raysight/tasks", params={"limit": 100, "detail": "true"}).json()["rows"]
    started = [t for t in tasks if t["start_time_ms"] is not None and t["type"] != "DRIVER_TASK"]
    s = stream(server)
    columns = ("lane", "start_us", "end_us", "fn", "task_id", "attempt", "state")
    assert {len(s[c]) for c in columns} == {len(started)} and not s["truncated"]
    bars = [dict(zip(columns, values)) for values in zip(*(s[c] for c in columns))]
    assert [(b["lane"], b["start_us"]) for b in bars] == sorted((b["lane"], b["start_us"]) for b in bars)
    by_attempt = {(t["task_id"], t["attempt_number"]): t for t in started}
    for bar in bars:
        task = by_attempt[(bar["task_id"], bar["attempt"])]
        lane = s["lanes"][bar["lane"]]
        assert lane["worker_id"] == task["worker_id"] and s["functions"][bar["fn"]] == task["func_or_class_name"]
        assert bar["start_us"] // 1000 == task["start_time_ms"] and bar["state"] == task["state"]
        assert bar["end_us"] is None if task["end_time_ms"] is None else bar["end_us"] // 1000 == task["end_time_ms"]
    assert len(s["lanes"]) == len({t["worker_id"] for t in started})  # one lane per worker, on the node it named
    assert all(lane["node_id"] for lane in s["lanes"]) and s["functions"] == sorted(s["functions"])


def test_a_limit_keeps_the_first_attempts_by_start_and_says_so(server: TestClient, ray_batches: Any) -> None:
    record(server, ray_batches, "?cluster=rec")
    whole = stream(server)
    first = stream(server, limit=3)
    assert first["truncated"] and len(first["task_id"]) == 3
    assert sorted(first["start_us"]) == sorted(whole["start_us"])[:3]
    assert not stream(server, job="ffffffff")["task_id"]  # no such job: no bars, no lanes
    assert stream(server, job="01000000")["task_id"]


def test_activity_timeline_and_task_stream_refuse_bad_parameters_with_a_400(
    server: TestClient, ray_batches: Any
) -> None:
    record(server, ray_batches, "?cluster=rec")
    for params in ({"buckets": "0"}, {"buckets": "10001"}, {"buckets": "many"}):
        assert server.get("/api/raysight/activity", params=params).status_code == 400
    for path in ("/api/raysight/timeline", "/api/raysight/task-stream"):
        bad = server.get(path, params={"job": "../x"})
        assert bad.status_code == 400 and "is no job ID" in bad.json()["error"]
        assert server.get(path, params={"session": "session_nope"}).status_code == 404
    for limit in ("0", "2000001", "all"):
        assert server.get("/api/raysight/task-stream", params={"limit": limit}).status_code == 400
    assert sum(server.get("/api/raysight/activity", params={"buckets": "7"}).json()["started"]) > 0
