"""The HTTP app in-process: ingest's answers to good and bad input, the own API, Ray's envelope, auth, /metrics."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import duckdb
import orjson
from starlette.testclient import TestClient

from raysight.server.app import create_app
from raysight.server.auth import Secrets
from raysight.settings import Settings
from raysight.signals.ray_events import apply as ray_apply
from raysight.store.journal import Journal
from raysight.store.store import Store
from tests.conftest import FIXTURES
from tests.ray_scenarios import JSON


def post(client: TestClient, body: bytes | list, query: str = "?cluster=t", settle: bool = True) -> object:
    """POST a body as Ray's aggregator does; then (``settle``) wait until the server has folded what it journalled."""
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    reply = client.post("/ingest/ray-events" + query, content=data, headers=JSON)
    deadline = time.monotonic() + 10
    while settle and client.app.state.raysight.writer.backlog()["batches"]:
        assert time.monotonic() < deadline, "the server did not fold what it acknowledged"
        time.sleep(0.01)
    return reply


def counters(client: TestClient) -> dict[str, int]:
    return client.get("/api/raysight/doctor").json()["counters"]


def test_bad_bodies_get_clear_answers_and_nothing_is_harmed(server: TestClient, ray_batches) -> None:
    assert post(server, b"{not json").status_code == 400
    assert post(server, b'{"an": "object"}').json()["error"].startswith("body is an object, not an array")
    assert post(server, b"x" * (1024 * 1024 + 1)).status_code == 413
    assert post(server, []).status_code == 200
    first = ray_batches[0]
    wrong = [
        {"eventId": 5, "sessionName": 7},
        {**first[0], "eventType": "BRAND_NEW_EVENT", "eventId": "QUJD"},
        {**first[1], "nodeLifecycleEvent": {"nodeId": "AAAA", "stateTransitions": [{"state": 1}]}},
    ]
    assert post(server, wrong).json() == {"ok": True, "received": 3, "resend": False}
    for i in range(7):
        assert post(server, ray_batches[2]).json()["resend"] == (i > 0)  # answered from the first copy's commit
    assert post(server, ray_batches[2], "?cluster=other").json()["resend"] is False  # another label: written
    c = counters(server)
    assert c["stored"] == 1 + len(ray_batches[2]) and c["quarantined"] == 2 and c["unsupported"] == 1
    assert c["deduplicated"] == 7 * len(ray_batches[2]) and c["resent_batches"] == 6
    doctor = server.get("/api/raysight/doctor").json()
    assert doctor["unsupported"] == [{"event_type": "BRAND_NEW_EVENT", "events": 1}]
    assert {q["events"] for q in doctor["quarantine"]} == {1}


def test_own_api_lists_filters_pages_and_gets(server: TestClient, ray_batches) -> None:
    for batch in ray_batches:
        post(server, batch)
    failed = server.get("/api/raysight/tasks", params={"filter": "state=failed"}).json()
    assert {r["name"] for r in failed["rows"]} == {"fails", "crash_once", "Fragile.die"}
    page = server.get("/api/raysight/tasks", params={"sort": "-name", "limit": 2, "offset": 1}).json()
    everything = server.get("/api/raysight/tasks", params={"sort": "-name", "limit": 100}).json()
    assert page["rows"] == everything["rows"][1:3] and page["total"] == everything["total"]
    crash = next(r for r in failed["rows"] if r["name"] == "crash_once")
    attempts = server.get(f"/api/raysight/tasks/{crash['task_id']}").json()["rows"]
    assert [a["attempt_number"] for a in attempts] == [0, 1]
    assert server.get("/api/raysight/tasks", params={"filter": "worker_pid>0"}).json()["total"] > 0
    missing = server.get("/api/raysight/actors/00ff")
    assert missing.status_code == 404 and missing.json()["ok"] is False
    bad = server.get("/api/raysight/tasks", params={"filter": "colour=red"})
    assert bad.status_code == 400 and "no field 'colour'" in bad.json()["error"]
    summary = server.get("/api/raysight/summary/tasks").json()
    crash_group = next(g for g in summary["summary"] if g["func_or_class_name"] == "crash_once")
    assert crash_group["state_counts"] == {"FAILED": 1, "FINISHED": 1}


def test_own_api_counts_by_state_beside_a_page_and_sorts_failed_first(server: TestClient, ray_batches) -> None:
    """``count_by=state``: the attempts of each state, counted over every filter but those on state (a table's chips),
    in the page's answer; ``sort=-failed``: the failed attempts first; a bad one is a 400 naming it."""
    for batch in ray_batches:
        post(server, batch)
    everything = server.get("/api/raysight/tasks", params={"limit": 1000}).json()["rows"]
    by_state: dict[str, int] = {}
    for row in everything:
        by_state[row["state"]] = by_state.get(row["state"], 0) + 1
    query = {"count_by": "state", "filter": "state=FAILED", "limit": 1}
    failed = server.get("/api/raysight/tasks", params=query).json()
    assert failed["counts"] == by_state and failed["total"] == by_state["FAILED"] and len(failed["rows"]) == 1
    named = server.get("/api/raysight/tasks", params={"count_by": "state", "filter": "name=fails", "limit": 0}).json()
    assert named["counts"] == {"FAILED": 1} and named["rows"] == []
    assert "counts" not in server.get("/api/raysight/tasks").json()
    query = {"sort": ["-failed", "-start_time_ms"], "detail": "true", "limit": 1000}
    ordered = server.get("/api/raysight/tasks", params=query).json()["rows"]
    states = [r["state"] == "FAILED" for r in ordered]
    assert states == sorted(states, reverse=True) and states[0]
    finished = [r["start_time_ms"] for r in ordered if r["state"] != "FAILED" and r["start_time_ms"] is not None]
    assert finished == sorted(finished, reverse=True)
    for params, named_in_error in (({"count_by": "task_id"}, "task_id"), ({"count_by": "colour"}, "colour")):
        bad = server.get("/api/raysight/tasks", params=params)
        assert bad.status_code == 400 and named_in_error in bad.json()["error"]
    bad = server.get("/api/raysight/tasks", params={"sort": "-colour"})
    assert bad.status_code == 400 and "'colour'" in bad.json()["error"] and "failed" in bad.json()["error"]


def test_ray_compatible_api_speaks_rays_envelope(server: TestClient, ray_batches) -> None:
    for batch in ray_batches:
        post(server, batch)
    params = [
        ("limit", "100"),
        ("detail", "False"),
        ("filter_keys", "state"),
        ("filter_predicates", "="),
        ("filter_values", "dead"),
        ("exclude_driver", "True"),
        ("server_timeout_multiplier", "0.8"),
    ]
    body = server.get("/api/v0/actors", params=params).json()
    assert body["result"] is True
    data = body["data"]["result"]
    assert data["total"] == data["num_after_truncation"] == 1
    assert set(data["result"][0]) >= {
        "actor_id",
        "class_name",
        "state",
        "job_id",
        "name",
        "node_id",
        "pid",
        "ray_namespace",
    }
    too_many = server.get("/api/v0/tasks", params={"limit": 20000})
    assert too_many.status_code == 400 and too_many.json()["result"] is False
    summary = server.get("/api/v0/tasks/summarize").json()["data"]["result"]["result"]["node_id_to_summary"]
    assert summary["cluster"]["summary_by"] == "func_name" and "fails" in summary["cluster"]["summary"]
    session = server.get("/api/raysight/sessions").json()["sessions"][0]["session"]
    scoped = server.get(f"/sessions/{session}/api/v0/nodes").json()["data"]["result"]
    assert scoped["total"] == 1
    assert server.get("/api/version").json()["session_name"] == session
    assert server.get("/api/jobs/01000000").json()["type"] == "DRIVER"


def test_beyond_loopback_reads_need_the_token_and_the_ingest_key_only_writes(tmp_path: Path, ray_batches) -> None:
    secrets = Secrets(token="read-secret", ingest_key="write-secret", admin_token="admin-secret")
    with TestClient(create_app(Settings(tmp_path).replace(secrets=secrets))) as client:
        assert post(client, ray_batches[0]).status_code == 401
        assert post(client, ray_batches[0], "?key=write-secret").status_code == 200
        metrics = {"json": {"text": ""}}
        assert client.post("/ingest/agent/ray-metrics", **metrics).status_code == 401
        assert client.post("/ingest/agent/ray-metrics?key=write-secret", **metrics).status_code == 200
        poll = {"json": {"session": "session_2026-11-21_19-46-15_579671_2021", "polled_ns": 1, "resources": {}}}
        assert client.post("/ingest/agent/ray-state", **poll).status_code == 401  # the poller's, the same
        assert client.post("/ingest/agent/ray-state?key=write-secret", **poll).status_code == 200
        assert client.get("/api/raysight/sessions?key=write-secret").status_code == 401
        assert client.get("/api/v0/actors").status_code == 401
        assert client.get("/metrics").status_code == 401
        ok = client.get("/api/raysight/sessions", headers={"Authorization": "Bearer read-secret"})
        assert ok.status_code == 200 and len(ok.json()["sessions"]) == 1


def test_metrics_count_what_was_ingested(server: TestClient, ray_batches) -> None:
    post(server, ray_batches[2])
    post(server, ray_batches[2])
    text = server.get("/metrics").text
    assert f"raysight_events_stored_total {float(len(ray_batches[2]))}" in text
    assert f"raysight_events_deduplicated_total {float(len(ray_batches[2]))}" in text
    assert "raysight_ingest_latency_seconds_count 1.0" in text and "raysight_ingest_resends_total 1.0" in text
    ping = server.get("/api/raysight/ping").json()  # what pollers waiting for a quiet server read
    assert ping["events_received"] == 2 * len(ray_batches[2]) and ping["ingest_backlog"]["batches"] == 0


def test_a_resend_while_the_first_copy_is_still_being_journalled_waits_for_it(
    tmp_path: Path, ray_batches, monkeypatch
) -> None:
    """Past the deadline the caller gets 503 but the write goes on; the resend rides on it instead of queueing again."""
    monkeypatch.setattr("raysight.server.ingest_routes.INGEST_DEADLINE_S", 0.3)
    with TestClient(create_app(Settings(tmp_path / "data"))) as client:
        journal = client.app.state.raysight.writer.journal
        release, append = threading.Event(), journal.append
        monkeypatch.setattr(journal, "append", lambda batches: release.wait(10) and append(batches))  # a slow disk
        first = post(client, ray_batches[2], settle=False)
        assert first.status_code == 503 and "Ray will resend" in first.json()["error"]
        resend = post(client, ray_batches[2], settle=False)
        assert resend.status_code == 503  # still waiting on the same append
        release.set()
        while client.app.state.raysight.writer.backlog()["batches"]:  # journalled, then folded
            time.sleep(0.01)
        assert post(client, ray_batches[2]).json()["resend"] is True  # answered from the journalled first copy
        assert post(client, ray_batches[3]).json()["resend"] is False  # the journal lives on
        c = counters(client)
        assert c["stored"] == len(ray_batches[2]) + len(ray_batches[3]) and c["resent_batches"] == 1


def test_journalled_batches_are_folded_when_the_server_starts(tmp_path: Path, ray_batches) -> None:
    """What a crash leaves in the journal (acknowledged, not folded; a torn last append) is folded, the tear cut."""
    journal = Journal(tmp_path / "data" / "journal", folded=0)
    journal.append([("t", None, orjson.dumps(batch), len(batch)) for batch in ray_batches])
    journal.close()
    (segment,) = (tmp_path / "data" / "journal").glob("*.log")
    with segment.open("ab") as torn:
        torn.write(b"\x99\x00\x00\x00\x00")
    with TestClient(create_app(Settings(tmp_path / "data"))) as client:
        post(client, [])  # settles once the replayed journal is folded
        assert counters(client)["stored"] == sum(map(len, ray_batches))
        assert client.get("/api/raysight/actors", params={"filter": "class_name=Counter"}).json()["total"] == 1
        assert client.get("/api/raysight/sessions").json()["sessions"][0]["label"] == "t"


def test_what_rays_aggregators_reported_reaches_the_doctor(server: TestClient, ray_batches) -> None:
    """Counters keep their greatest value per agent process and are summed over a session's agents."""
    text = (FIXTURES / "aggregator_metrics.txt").read_text()
    for batch in ray_batches:
        post(server, batch)

    def send(text: str) -> object:
        return server.post("/ingest/agent/ray-metrics", json={"text": text})

    assert send(text).json() == {"ok": True, "samples": 9}
    assert send(text.replace("} 8780.0", "} 10.0")).status_code == 200  # an older scrape never lowers a counter
    assert send(text.replace('pid="7798"', 'pid="8001"').replace('ip="192.0.2.2"', 'ip="192.0.2.3"')).status_code == 200
    [reported] = server.get("/api/raysight/doctor").json()["ray_reported"]
    assert reported["label"] == "t" and reported["agents"] == 2
    assert (reported["received"], reported["published"], reported["publish_failures"]) == (2 * 15522, 600, 0)
    assert reported["dropped"] == {
        "TASK_LIFECYCLE_EVENT": 17560,
        "TASK_DEFINITION_EVENT": 6402,
        "TASK_PROFILE_EVENT": 6402,
        "WORKER_LIFECYCLE_EVENT": 4,
    }
    assert reported["consecutive_publish_failures"] == 3
    for bad, status in (("{not prometheus", 400), ("#" * (1024 * 1024 + 1), 413)):
        answer = send(bad)
        assert answer.status_code == status and answer.json()["ok"] is False
    assert "bad Ray metrics: not Prometheus text" in send("x{a=b} 1").json()["error"]
    server.delete(f"/api/raysight/sessions/{reported['session']}")
    assert server.get("/api/raysight/doctor").json()["ray_reported"] == []


def test_a_batch_whose_content_the_store_refuses_is_quarantined_whole_and_the_rest_folded(
    tmp_path: Path, ray_batches, monkeypatch
) -> None:
    """Acknowledged means kept: a batch whose content the store refuses is set apart with its reason, never dropped
    or stuck."""
    apply = ray_apply.apply_posts

    def refuse_poison(self: Store, posts, journal_seq=None, parsed=None):
        if any(b'"sessionName":"poison"' in p.body for p in posts):
            raise duckdb.ConversionException("cannot convert this")
        return apply(self, posts, journal_seq, parsed)

    monkeypatch.setattr(ray_apply, "apply_posts", refuse_poison)
    with TestClient(create_app(Settings(tmp_path / "data"))) as client:
        writer = client.app.state.raysight.writer
        release = threading.Event()
        writer.call(lambda store: release.wait(10))  # hold folding so that the three batches fold as one group
        poison = [{**e, "sessionName": "poison"} for e in ray_batches[3]]
        for batch in (ray_batches[2], poison, ray_batches[4]):
            assert post(client, batch, settle=False).status_code == 200
        release.set()
        post(client, [])
        c = counters(client)
        assert c["stored"] == len(ray_batches[2]) + len(ray_batches[4]) and c["quarantined"] == 1
        doctor = client.get("/api/raysight/doctor").json()
        assert "fold this batch: ConversionException: cannot convert this" in doctor["quarantine"][0]["reason"]


def test_posts_arriving_while_a_group_folds_are_folded_as_the_next_group(tmp_path: Path, ray_batches) -> None:
    """Folding costs a fixed amount per group, so what queues while the fold thread is busy is folded at once, and
    only once; posting does not wait for folding (timings are benchmarks/ingest_http.py's)."""
    with TestClient(create_app(Settings(tmp_path / "data"))) as client:
        writer = client.app.state.raysight.writer
        release = threading.Event()
        writer.call(lambda store: release.wait(10))  # hold folding: the POSTs are acknowledged all the same
        for batch in ray_batches[:4]:
            assert post(client, batch, settle=False).status_code == 200
        release.set()
        post(client, [])  # settles: waits until the group is folded
        c = counters(client)
        assert c["batches"] == 1 and c["stored"] == sum(len(b) for b in ray_batches[:4])


def test_posts_arriving_within_the_linger_of_the_first_are_folded_as_one_group(tmp_path: Path, ray_batches) -> None:
    """A quiet server folds at once, but not before the POSTs sent at about the same moment (several nodes'
    aggregators) have joined the first one's group."""
    with TestClient(create_app(Settings(tmp_path / "data").replace(fold_linger_s=2.0))) as client:
        for batch in ray_batches[:3]:
            assert post(client, batch, settle=False).status_code == 200
        post(client, [])
        assert counters(client)["batches"] == 1


def test_posts_arriving_while_the_fold_thread_rests_are_folded_as_one_group(tmp_path: Path, ray_batches) -> None:
    """After a group the fold thread rests (a multiple of what the group took, within a bound), so that under load
    groups grow instead of their fixed cost being paid back to back."""
    with TestClient(create_app(Settings(tmp_path / "data").replace(fold_linger_s=0, fold_rest=1000))) as client:
        post(client, ray_batches[0])
        for batch in ray_batches[1:3]:
            assert post(client, batch, settle=False).status_code == 200
        post(client, [])  # settles: the rest is bounded (MAX_REST_S)
        assert counters(client)["batches"] == 2


def test_behind_a_full_group_the_backlog_folds_without_waiting(tmp_path: Path, ray_batches, monkeypatch) -> None:
    """A group may linger for more POSTs, and the fold thread rests after it; a backlog that fills groups is drained at
    once."""
    bodies = sorted((orjson.dumps(b) for b in ray_batches[:4]), key=len, reverse=True)[:2] + [b"[]"]
    monkeypatch.setattr("raysight.store.writer.MAX_GROUP_BYTES", len(bodies[0]) + len(bodies[1]))
    monkeypatch.setattr("raysight.store.writer.MAX_REST_S", 30.0)
    with TestClient(create_app(Settings(tmp_path / "data").replace(fold_linger_s=30.0, fold_rest=1000))) as client:
        writer = client.app.state.raysight.writer
        release = threading.Event()
        writer.call(lambda store: release.wait(10))  # hold folding while the three batches queue up
        for body in bodies:
            assert post(client, body, settle=False).status_code == 200
        release.set()
        started = time.monotonic()
        while writer.backlog()["batches"]:
            assert time.monotonic() - started < 10, "the rest of the backlog waited for the linger or rest"
            time.sleep(0.01)
        assert counters(client)["batches"] == 2  # a full group of two, then the third at once
