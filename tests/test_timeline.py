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
    bad_params: list[dict[str, Any]] = [{"step": "0"}, {"step": "1ms"}, {"step": "often"}, {"end": "soon"}]
    bad_params += [{"start": "later"}, {"start": 2_000_000_000_000, "end": 1_000_000_000_000}]
    for params in bad_params:  # (1 ms: a week's millions)
        bad = server.get("/api/raysight/activity", params=params)
        assert bad.status_code == 400 and next(iter(params)) in bad.json()["error"], bad.text
    for path in ("/api/raysight/timeline", "/api/raysight/task-stream"):
        bad = server.get(path, params={"job": "../x"})
        assert bad.status_code == 400 and "is no job ID" in bad.json()["error"]
        assert server.get(path, params={"session": "session_nope"}).status_code == 404
    for limit in ("0", "2000001", "all"):
        assert server.get("/api/raysight/task-stream", params={"limit": limit}).status_code == 400
    assert sum(server.get("/api/raysight/activity", params={"step": "1h"}).json()["started"]) > 0


def test_activity_is_counted_in_whole_steps_of_the_ladder_from_the_start_to_now_or_the_end_asked(
    server: TestClient, ray_batches: Any
) -> None:
    """Bins of a width from the ladder by the span (the recorded session's 9 s: 1 s), each a whole multiple of it (so
    that a live session's bins stay put), from its start to now while it is live, or to the ``end`` asked."""
    record(server, ray_batches, "?cluster=rec")
    tasks = server.get("/api/raysight/tasks", params={"limit": 100, "detail": "true"}).json()["rows"]
    tasks = [t for t in tasks if t["type"] != "DRIVER_TASK"]
    last = max(t["end_time_ms"] or t["start_time_ms"] for t in tasks)
    found = server.get("/api/raysight/activity", params={"end": last}).json()
    first, step = found["start_ms"], found["step_ms"]
    assert step == 1000 and first % step == 0 and found["end_ms"] == last and found["live"]
    assert len(found["started"]) == last // step - first // step + 1
    assert sum(found["started"]) == sum(t["start_time_ms"] is not None for t in tasks)
    ended = [t for t in tasks if t["state"] in ("FINISHED", "FAILED") and t["end_time_ms"] is not None]
    assert sum(found["finished"]) + sum(found["failed"]) == len(ended)
    to_now = server.get("/api/raysight/activity").json()  # (live: to now, days on, in hours)
    assert to_now["end_ms"] > last + 3_600_000 and to_now["step_ms"] in (3_600_000, 3 * 3_600_000)
    assert sum(to_now["started"]) == sum(found["started"])
    fine = server.get("/api/raysight/activity", params={"end": last, "step": "250ms"}).json()
    assert fine["step_ms"] == 250 and sum(fine["started"]) == sum(found["started"])
    # A zoomed chart asks for its span: bins by that span's width, only what happened in it
    starts = sorted(t["start_time_ms"] for t in tasks if t["start_time_ms"] is not None)
    middle = starts[len(starts) // 2]
    zoomed = server.get("/api/raysight/activity", params={"start": middle, "end": last}).json()
    assert zoomed["start_ms"] == middle // 1000 * 1000 and zoomed["end_ms"] == last
    assert 0 < sum(zoomed["started"]) == sum(middle // 1000 * 1000 <= s <= last for s in starts) < len(starts)
