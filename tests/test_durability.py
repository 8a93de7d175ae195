"""Acknowledged means kept: a server killed mid-ingest, a journal append that fails (disk full, I/O error), a torn or
corrupt journal record, and a disk that fills while folding lose nothing the server acknowledged."""

from __future__ import annotations

import contextlib
import errno
import resource
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import httpx
import orjson
import pytest
from starlette.testclient import TestClient

from raysight import wire
from raysight.agent.node_agent import batch_body
from raysight.agent.tailer import Tailer
from raysight.cli.query import folding_lines
from raysight.client import Client
from raysight.server.app import create_app
from raysight.settings import DB_FILE, Settings
from raysight.signals.log_lines import apply as log_lines_apply
from raysight.signals.ray_events import apply as ray_apply
from raysight.signals.run_exits import apply as run_exits_apply
from raysight.signals.run_exits.parse import RunExit
from raysight.store.store import Store
from raysight.store.tx import Tx
from tests.faults import FailingDisk, crash_image, fill, small_tmpfs
from tests.ray_scenarios import JSON, ServerProcess


def test_sigkill_mid_ingest_keeps_every_acknowledged_event(tmp_path: Path, ray_batches) -> None:
    server = ServerProcess(tmp_path).start()
    events = [e for b in ray_batches for e in b]
    acked: list[str] = []
    stop = threading.Event()

    def send() -> None:
        with httpx.Client(timeout=5) as http:
            for i in range(10_000):
                if stop.is_set():
                    return
                session = f"session_kill_{i:05d}"
                body = orjson.dumps([{**e, "sessionName": session} for e in events])
                try:
                    reply = http.post(f"{server.url}/ingest/ray-events", content=body, headers=JSON)
                except httpx.TransportError:
                    return
                if reply.status_code == 200:
                    acked.append(session)

    sender = threading.Thread(target=send)
    sender.start()
    deadline = time.monotonic() + 60
    while len(acked) < 15:
        assert sender.is_alive() and time.monotonic() < deadline, f"only {len(acked)} batches were acknowledged"
        threading.Event().wait(0.05)
    server.stop(signal.SIGKILL)
    stop.set()
    sender.join(30)
    server.start()
    try:
        with server.client() as client:
            deadline = time.monotonic() + 60
            while client.doctor()["ingest_backlog"]["batches"]:  # the journal's unfolded batches are replayed
                assert time.monotonic() < deadline, "the journal was not replayed"
                time.sleep(0.1)
            kept = {s["session"]: s["events"] for s in client.sessions()}
        assert set(acked) <= set(kept)
        assert all(kept[s] == len(events) for s in acked)
    finally:
        server.stop()


def test_a_resend_after_its_first_copy_was_folded_counts_once_across_a_restart(tmp_path: Path, ray_batches) -> None:
    """Ray resends a batch whose answer it missed, byte for byte, and a resent batch may share events with newer
    ones; the first copy folded and the server restarted in between (its memory of recent bodies is gone), each
    event still counts once: in the counters, the session's events, and each task's state transitions, which read
    as those of a store that got every event once."""
    session = ray_batches[0][0]["sessionName"]
    first, mixed = [e for b in ray_batches[:8] for e in b], [e for b in ray_batches[5:] for e in b]  # 5-7 in both
    posts = [orjson.dumps(first), orjson.dumps(first), orjson.dumps(mixed)]  # the 2nd and 3rd after the restart
    distinct = len({e["eventId"] for e in first + mixed})  # the whole recording: each event once
    server = ServerProcess(tmp_path / "data").start()
    try:
        _post_and_fold(server, posts[:1])
        server.stop()
        server.start()
        _post_and_fold(server, posts[1:])
        with server.client() as client:
            counters = client.doctor()["counters"]
            events = {s["session"]: s["events"] for s in client.sessions()}
            tasks = _tasks_with_transitions(client, session)
    finally:
        server.stop()
    assert (counters["stored"], counters["deduplicated"]) == (distinct, len(first) * 2 + len(mixed) - distinct)
    assert events == {session: distinct}
    assert all(len(t["events"]) == len({(e["state"], e["created_ms"]) for e in t["events"]}) for t in tasks)
    once = ServerProcess(tmp_path / "once").start()  # every event once, in one batch
    try:
        _post_and_fold(once, [orjson.dumps([e for b in ray_batches for e in b])])
        with once.client() as client:
            assert tasks == _tasks_with_transitions(client, session)
    finally:
        once.stop()


def _post_and_fold(server: ServerProcess, bodies: list[bytes]) -> None:
    with httpx.Client(base_url=server.url, timeout=10) as http, server.client() as client:
        for body in bodies:
            assert http.post("/ingest/ray-events", content=body, headers=JSON).status_code == 200
        _until(lambda: not client.ingest_backlog()["batches"], what="the fold")


def _tasks_with_transitions(client: Client, session: str) -> list[dict]:
    """Every task attempt of ``session`` with its state transitions, as `raysight get tasks ID` shows them."""
    ids = sorted({row["task_id"] for row in client.list("tasks", session=session)["rows"]})
    return [row for task_id in ids for row in client.get("tasks", task_id, session=session)["rows"]]


# --- faults at the file-system boundary, server in-process ---------------------------------------------------------


def _post(client: TestClient, events: list[dict], session: str) -> int:
    body = orjson.dumps([{**e, "sessionName": session} for e in events])
    reply = client.post("/ingest/ray-events?cluster=t", content=body, headers=JSON)
    return reply.status_code


def _until(check, timeout: float = 30, what: str = "the condition") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _restarted(image: Path) -> TestClient:
    """A server on ``image`` that has folded what its journal held."""
    client = TestClient(create_app(Settings(image).replace(fold_linger_s=0))).__enter__()
    _until(lambda: not client.get("/api/raysight/doctor").json()["ingest_backlog"]["batches"], what="the replay")
    return client


@contextlib.contextmanager
def _folding_held(client: TestClient) -> Iterator[threading.Event]:
    """Hold the server's folding (what it acknowledges stays in the journal only) until the block ends, or the event
    it gives is set."""
    release = threading.Event()
    client.app.state.raysight.writer.call(lambda store: release.wait(60))
    try:
        yield release
    finally:
        release.set()


def test_with_several_cores_a_drained_backlog_is_parsed_ahead_while_the_group_before_is_written(
    tmp_path: Path, ray_batches, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the fold thread writes one group, the gather thread parses the next (parse_posts, on its own
    connection); every batch is folded once, in order, as without."""
    events = ray_batches[2]
    monkeypatch.setattr("raysight.store.writer.MAX_GROUP_EVENTS", len(events))  # each POST a full group
    parsed_on, written = [], []
    parse, apply = ray_apply.parse_posts, ray_apply.apply_posts

    def parse_spy(self: Store, posts):
        parsed_on.append(threading.current_thread().name)
        return parse(self, posts)

    def slow_apply(self: Store, posts, journal_seq=None, parsed=None):
        time.sleep(0.2)  # the group before is still being written when the next is gathered
        written.append((parsed is not None, [orjson.loads(p.body)[0]["sessionName"] for p in posts]))
        return apply(self, posts, journal_seq, parsed)

    monkeypatch.setattr(ray_apply, "parse_posts", parse_spy)
    monkeypatch.setattr(ray_apply, "apply_posts", slow_apply)
    sessions = [f"ahead_{i}" for i in range(5)]
    with TestClient(create_app(Settings(tmp_path / "data").replace(fold_linger_s=0))) as client:
        client.app.state.raysight.writer.store.threads = 2  # however many cores this machine has
        with _folding_held(client):
            assert all(_post(client, events, s) == 200 for s in sessions)
        _until(lambda: not client.get("/api/raysight/doctor").json()["ingest_backlog"]["batches"], what="folding")
        kept = {s["session"]: s["events"] for s in client.get("/api/raysight/sessions").json()["sessions"]}
    assert kept == {s: len(events) for s in sessions}
    assert [names for _, names in written] == [[s] for s in sessions]
    assert [ahead for ahead, _ in written] == [False, True, True, True, True]
    assert parsed_on == ["raysight-gather"] * 4


@pytest.mark.parametrize(("error", "on"), [(errno.ENOSPC, "write"), (errno.EIO, "write"), (errno.EIO, "fsync")])
def test_a_failed_journal_append_is_rolled_back_and_what_is_acknowledged_after_it_survives_a_crash(
    tmp_path: Path, ray_batches, monkeypatch: pytest.MonkeyPatch, error: int, on: str
) -> None:
    events = [e for b in ray_batches for e in b]
    disk = FailingDisk(monkeypatch, tmp_path / "data" / "journal", error, on)
    with TestClient(create_app(Settings(tmp_path / "data").replace(fold_linger_s=0))) as client, _folding_held(client):
        assert _post(client, events, "before") == 200
        disk.armed = True
        assert _post(client, events, "refused") == 503  # not acknowledged: Ray resends it
        disk.armed = False
        acked = [f"after_{i}" for i in range(5)]
        assert all(_post(client, events, s) == 200 for s in acked)
        image = crash_image(tmp_path / "data", tmp_path / "image")
    client = _restarted(image)
    try:
        kept = {s["session"]: s["events"] for s in client.get("/api/raysight/sessions").json()["sessions"]}
        assert {s: kept.get(s) for s in ["before", *acked]} == {s: len(events) for s in ["before", *acked]}
        assert client.get("/api/raysight/doctor").json()["folding"]["journal_damage"]["corrupt"] == 0
    finally:
        client.__exit__(None, None, None)


@pytest.mark.parametrize("first", [True, False], ids=["first-in-its-segment", "after-others"])
def test_an_append_that_cannot_even_be_cut_off_is_written_over_never_reported_corrupt(
    tmp_path: Path, ray_batches, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, first: bool
) -> None:
    """A failed append whose rollback fails too (the write and the ftruncate both refused) was never acknowledged:
    after a crash and restart no corruption is reported for it, and every batch acknowledged after it is folded."""
    events = [e for b in ray_batches for e in b]
    disk = FailingDisk(monkeypatch, tmp_path / "data" / "journal", errno.EIO, on=("write", "ftruncate"))
    acked = [] if first else ["before"]
    with TestClient(create_app(Settings(tmp_path / "data").replace(fold_linger_s=0))) as client, _folding_held(client):
        assert all(_post(client, events, s) == 200 for s in acked)
        disk.armed = True
        assert _post(client, events, "refused") == 503
        disk.armed = False
        acked += [f"after_{i}" for i in range(3)]
        assert all(_post(client, events, s) == 200 for s in acked[-3:])
        image = crash_image(tmp_path / "data", tmp_path / "image")
    client = _restarted(image)
    try:
        kept = {s["session"]: s["events"] for s in client.get("/api/raysight/sessions").json()["sessions"]}
        assert kept == {s: len(events) for s in acked}
        assert client.get("/api/raysight/doctor").json()["folding"]["journal_damage"]["corrupt"] == 0
        assert not [r for r in caplog.records if "corrupt" in r.getMessage()]
    finally:
        client.__exit__(None, None, None)


@pytest.mark.parametrize("where", ["payload", "header"])
def test_a_flipped_byte_mid_journal_skips_only_its_record_which_is_counted_and_kept_aside(
    tmp_path: Path, ray_batches, where: str, caplog: pytest.LogCaptureFixture
) -> None:
    events = ray_batches[2]
    sessions = [f"flip_{i:02d}" for i in range(43)]
    with TestClient(create_app(Settings(tmp_path / "data").replace(fold_linger_s=0))) as client, _folding_held(client):
        assert all(_post(client, events, s) == 200 for s in sessions)
        image = crash_image(tmp_path / "data", tmp_path / "image")
    (segment,) = (image / "journal").glob("*.log")
    data = bytearray(segment.read_bytes())
    record_11 = data.index(b'"flip_10"')
    at = record_11 if where == "payload" else data.rindex(b'["t"', 0, record_11) - 20  # the header's length field
    data[at] ^= 0x20
    segment.write_bytes(data)
    client = _restarted(image)
    try:
        kept = {s["session"] for s in client.get("/api/raysight/sessions").json()["sessions"]}
        assert kept == set(sessions) - {"flip_10"}
        damage = client.get("/api/raysight/doctor").json()["folding"]["journal_damage"]
        assert damage["corrupt"] == 1 and damage["torn"] == 0
        (aside,) = Path(damage["kept_in"]).glob("*.corrupt")
        assert b'"flip_10"' in aside.read_bytes() and b'"flip_11"' not in aside.read_bytes()
        assert "raysight_journal_corrupt 1.0" in client.get("/metrics").text
        assert [r.levelname for r in caplog.records if "corrupt, skipped" in r.getMessage()] == ["ERROR"]
    finally:
        client.__exit__(None, None, None)


def test_a_torn_append_at_the_journals_end_is_cut_kept_aside_and_not_counted_as_corruption(
    tmp_path: Path, ray_batches
) -> None:
    """A crash mid-append leaves part of a record that was never acknowledged: cut, and appending goes on."""
    with TestClient(create_app(Settings(tmp_path / "data").replace(fold_linger_s=0))) as client, _folding_held(client):
        assert all(_post(client, ray_batches[2], f"torn_{i}") == 200 for i in range(3))
        image = crash_image(tmp_path / "data", tmp_path / "image")
    (segment,) = (image / "journal").glob("*.log")
    whole = segment.stat().st_size
    with segment.open("ab") as f:
        f.write(segment.read_bytes()[:40])  # the start of a record, as a crash mid-append leaves it
    client = _restarted(image)
    try:
        assert _post(client, ray_batches[2], "torn_after") == 200
        kept = {s["session"] for s in client.get("/api/raysight/sessions").json()["sessions"]}
        assert {"torn_0", "torn_1", "torn_2"} <= kept
        assert segment.stat().st_size == whole
        damage = client.get("/api/raysight/doctor").json()["folding"]["journal_damage"]
        assert damage["torn"] == 1 and damage["corrupt"] == 0
    finally:
        client.__exit__(None, None, None)


@contextlib.contextmanager
def _files_limited_to(size: int) -> Iterator[None]:
    """This process may not write past ``size`` bytes into any file (EFBIG, as a full disk refuses: the kernel's
    RLIMIT_FSIZE); DuckDB's writes included, which no Python wrapper reaches."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def test_a_disk_that_refuses_writes_while_folding_is_waited_out_never_quarantined(
    tmp_path: Path, ray_batches, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An environmental failure is no reason to quarantine: the group stays journalled, folding retries with
    back-off, the doctor says why, and it resumes by itself once the disk takes writes again."""
    monkeypatch.setattr("raysight.store.writer.RETRY_S", 0.05)
    monkeypatch.setattr("raysight.store.writer.MAX_RETRY_S", 0.2, raising=False)
    events = [e for b in ray_batches for e in b]
    sessions = [f"full_{i}" for i in range(3)]
    with TestClient(create_app(Settings(tmp_path / "data").replace(fold_linger_s=0))) as client:
        doctor = lambda: client.get("/api/raysight/doctor").json()  # noqa: E731
        with _folding_held(client) as release:
            assert all(_post(client, events, s) == 200 for s in sessions)
            wal = tmp_path / "data" / f"{DB_FILE}.wal"
            with _files_limited_to(max(wal.stat().st_size if wal.exists() else 0, 1)):
                release.set()
                _until(lambda: doctor()["folding"]["state"] == "retrying", what="folding to fail and retry")
                report = doctor()
                assert "File too large" in report["folding"]["error"] and report["folding"]["tries"] >= 1
                assert report["ingest_backlog"]["batches"] == len(sessions)
                assert report["counters"].get("quarantined", 0) == 0
                monkeypatch.setattr("raysight.store.writer.MAX_BACKLOG_BYTES", report["ingest_backlog"]["bytes"])
                busy = client.post("/ingest/ray-events", content=b"[]", headers=JSON)
                assert busy.status_code == 503 and "folding waits" in busy.json()["error"]
                assert "File too large" in busy.json()["error"]
        _until(lambda: not doctor()["ingest_backlog"]["batches"], what="folding to resume")
        report = doctor()
        assert report["folding"]["state"] == "ok" and report["counters"].get("quarantined", 0) == 0
        kept = {s["session"]: s["events"] for s in client.get("/api/raysight/sessions").json()["sessions"]}
        assert {s: kept.get(s) for s in sessions} == {s: len(events) for s in sessions}
        assert "raysight_fold_retries" in client.get("/metrics").text


@pytest.mark.parametrize("environmental", [False, True])
def test_a_batch_the_store_keeps_failing_on_holds_up_nothing_behind_it(
    tmp_path: Path, ray_batches, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, environmental: bool
) -> None:
    """An error that is neither content nor environment (a DuckDB InternalException on odd input) is tried a few
    times, then the batch is quarantined with its reason; an environmental one (IOException) is waited out however
    long it lasts. Either way the batches around it fold."""
    monkeypatch.setattr("raysight.store.writer.RETRY_S", 0.01)
    monkeypatch.setattr("raysight.store.writer.MAX_RETRY_S", 0.05)
    error = duckdb.IOException("disk hiccup") if environmental else duckdb.InternalException("odd input met a bug")
    apply, tries = ray_apply.apply_posts, []

    def fail_on_odd(self: Store, posts, journal_seq=None, parsed=None):
        if any(b'"sessionName":"odd"' in p.body for p in posts) and (not environmental or len(tries) < 8):
            tries.append(len(posts))
            raise error
        return apply(self, posts, journal_seq, parsed)

    monkeypatch.setattr(ray_apply, "apply_posts", fail_on_odd)
    events = ray_batches[2]
    with TestClient(create_app(Settings(tmp_path / "data").replace(fold_linger_s=0))) as client:
        with _folding_held(client):  # the three fold as one group
            assert [_post(client, events, s) for s in ("before", "odd", "after")] == [200] * 3
        doctor = lambda: client.get("/api/raysight/doctor").json()  # noqa: E731
        _until(lambda: not doctor()["ingest_backlog"]["batches"], what="folding to get past the odd batch")
        assert _post(client, events, "later") == 200
        _until(lambda: not doctor()["ingest_backlog"]["batches"], what="folding to go on")
        kept = {s["session"]: s["events"] for s in client.get("/api/raysight/sessions").json()["sessions"]}
        report = doctor()
    folded = ["before", "odd", "after", "later"] if environmental else ["before", "after", "later"]
    assert kept == {s: len(events) for s in folded}
    if environmental:
        assert tries == [3] + [1] * 7 and report["counters"].get("quarantined", 0) == 0
        return
    assert tries == [3] + [1] * 5 and report["counters"]["quarantined"] == 1
    (quarantined,) = report["quarantine"]
    assert quarantined["reason"] == (
        "the store could not fold this batch: InternalException: odd input met a bug (an error not foreseen, 5 tries)"
    )
    (logged,) = [r for r in caplog.records if "quarantined" in r.getMessage()]
    assert logged.levelname == "ERROR" and logged.exc_info is not None


def test_on_a_real_full_tmpfs_nothing_acknowledged_is_lost_and_folding_resumes(tmp_path: Path, ray_batches) -> None:
    """On a real 20 MB file system: post until 503 (folding waits meanwhile), free space, post 22 more, crash,
    restart: every acknowledged batch is folded and nothing is quarantined."""
    events = [e for b in ray_batches for e in b]
    with small_tmpfs(tmp_path / "small") as small, httpx.Client(timeout=10) as http:
        server = ServerProcess(small / "data").start()
        acked: list[str] = []
        try:

            def post(session: str) -> int:
                body = orjson.dumps([{**e, "sessionName": session} for e in events])
                status = http.post(f"{server.url}/ingest/ray-events", content=body, headers=JSON).status_code
                if status == 200:
                    acked.append(session)
                return status

            filler = fill(small)
            with filler.open("r+b") as f:
                f.truncate(filler.stat().st_size - 2 * 1024 * 1024)  # ~2 MB left: a few dozen batches
            statuses = [post(f"full_{i:03d}") for i in range(200)]
            assert 503 in statuses, "the disk never filled"
            with server.client() as client:
                _until(lambda: client.doctor()["folding"]["state"] == "retrying", what="folding to meet the full disk")
                assert "No space left on device" in client.doctor()["folding"]["error"]
                filler.unlink()
                assert [post(f"freed_{i:02d}") for i in range(22)] == [200] * 22
            server.stop(signal.SIGKILL)  # before the last of them are folded: they are in the journal only
            server.start()
            with server.client() as client:
                _until(lambda: not client.doctor()["ingest_backlog"]["batches"], 60, "the replay")
                kept = {s["session"]: s["events"] for s in client.sessions()}
                assert client.doctor()["counters"].get("quarantined", 0) == 0
            assert {s: kept.get(s) for s in acked} == {s: len(events) for s in acked}
        finally:
            server.stop()


def test_the_doctor_says_in_words_why_folding_waits_and_what_the_journal_skipped() -> None:
    intact = {"corrupt": 0, "corrupt_bytes": 0, "torn": 1, "kept_in": "/d/journal/quarantine"}
    assert folding_lines({"state": "ok", "retries": 0, "journal_damage": intact}) == [
        "Folding keeps up; the journal is intact"
    ]
    waiting = {
        "state": "retrying",
        "error": "IOException: No space left on device",
        "since_ms": 1,
        "tries": 12,
        "retries": 12,
        "journal_damage": {**intact, "corrupt": 1, "corrupt_bytes": 1834},
    }
    assert folding_lines(waiting) == [
        "Folding waits on IOException: No space left on device (12 tries so far); the batches stay in the journal and "
        "fold by themselves once it passes (free disk space, or memory)",
        "The journal held 1 corrupt stretch(es), 1,834 bytes: skipped (the records after them were folded) and kept "
        "in /d/journal/quarantine",
    ]


class _Unreachable(httpx.BaseTransport):
    """The server's network path, down for the first ``outages`` requests."""

    def __init__(self, inner: httpx.BaseTransport, outages: int) -> None:
        self.inner, self.outages = inner, outages

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self.outages:
            self.outages -= 1
            raise httpx.ConnectError("connection refused", request=request)
        return self.inner.handle_request(request)


def test_a_run_exit_the_store_cannot_take_now_gets_503_and_raysight_runs_report_retries_until_it_is_kept(
    tmp_path: Path, ray_batches, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While folding is stalled, or when the store fails, `/ingest/agent/run-exit`, `ray-metrics` and `metrics`
    answer 503 within the ingest deadline (never hang, never 500), and the client's report rides out a short stall
    or outage; recording the same exit twice changes nothing."""
    monkeypatch.setattr("raysight.server.ingest_routes.INGEST_DEADLINE_S", 0.3)
    with TestClient(create_app(Settings(tmp_path / "data").replace(fold_linger_s=0))) as client:
        for batch in ray_batches:
            assert client.post("/ingest/ray-events?cluster=rec&run=run-1", json=batch).status_code == 200
        _until(lambda: not client.get("/api/raysight/ping").json()["ingest_backlog"]["batches"], what="folding")
        jobs = lambda: client.get("/api/raysight/jobs", params={"detail": "true"}).json()["rows"]  # noqa: E731
        (job,) = jobs()
        ended_ns = (job["start_time"] + 1000) * 1_000_000
        report = {"run_id": "run-1", "driver_pid": int(job["driver_info"]["pid"]), "exit_code": 3, "ended_ns": ended_ns}
        stalled_now, release = threading.Event(), threading.Event()
        client.app.state.raysight.writer.call(lambda store: (stalled_now.set(), release.wait(5)))  # folding stalls
        assert stalled_now.wait(5)
        target = {"instance": "10.0.0.1:8080", "job": "ray"}
        scrape = {"session": job["session"], "scraped_ms": 1, "target": target, "text": "x 1\n"}
        for path, body in (("run-exit", report), ("ray-metrics", {"text": ""}), ("metrics", scrape)):
            stalled = client.post(f"/ingest/agent/{path}", json=body)
            assert stalled.status_code == 503 and stalled.headers["Retry-After"] == "1"
            assert "(folding is behind); retry" in stalled.json()["error"]
        release.set()
        assert client.post("/ingest/agent/metrics", json=scrape).json() == {"ok": True, "samples": 1}  # retried

        record, failures = run_exits_apply.record, [duckdb.IOException("disk hiccup")] * 3

        def flaky(tx: Tx, exit_: RunExit) -> None:
            if failures:
                raise failures.pop()
            record(tx, exit_)

        monkeypatch.setattr(run_exits_apply, "record", flaky)
        failed = client.post("/ingest/agent/run-exit", json=report)
        assert (
            failed.status_code == 503 and failed.json()["error"] == "could not record the run exit (IOException); retry"
        )
        with Client("http://testserver", transport=_Unreachable(client._transport, outages=1)) as sdk:
            sdk.run_exit(**report, key=None)  # unreachable once, then 503 twice, then kept
        assert not failures
        (job,) = jobs()
        assert (job["driver_exit_code"], job["status"]) == (3, "FAILED")
        sessions = client.get("/api/raysight/sessions").json()["sessions"]
        assert client.post("/ingest/agent/run-exit", json=report).json() == {"ok": True}  # a retry that went through
        assert (jobs(), client.get("/api/raysight/sessions").json()["sessions"]) == ([job], sessions)


def test_signals_interleaving_while_folding_rests_fold_as_a_group_each_and_out_of_order_loses_nothing(
    tmp_path: Path, ray_batches, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rest after a round of groups holds for every signal: Ray's batches and an agent's log batches that
    interleave meanwhile fold as one group of each, the events' first. Folded before the logs that came between them,
    the events record as folded only what precedes the first log batch: a server stopped while the logs cannot be
    folded (a disk failing) folds them at its next start, the events again as resends."""
    session = "session_2026-11-23_01-02-03_000000_9"
    logs = tmp_path / "ray" / session / "logs"
    logs.mkdir(parents=True)
    tailer = Tailer(logs.parent.parent, tmp_path / "checkpoint.json")
    log_bodies = []
    for line in ("first line\n", "second line\n"):
        with (logs / "worker-a.out").open("a") as out:
            out.write(line)
        tailer.scan()
        log_bodies.append(batch_body("node-1", tailer.read(1 << 20), []))
    groups: list[str] = []
    log_apply, events_apply = log_lines_apply.apply_logs, ray_apply.apply_posts
    failing = [True]

    def logs_folded(store: Store, bodies, journal_seq=None):  # type: ignore[no-untyped-def]
        groups.append(f"logs {len(bodies)}")
        if failing[0]:
            raise OSError(errno.EIO, "disk failing")
        return log_apply(store, bodies, journal_seq)

    def events_folded(store: Store, posts, journal_seq=None, parsed=None):  # type: ignore[no-untyped-def]
        groups.append(f"events {len(posts)}")
        return events_apply(store, posts, journal_seq, parsed)

    monkeypatch.setattr(log_lines_apply, "apply_logs", logs_folded)
    monkeypatch.setattr(ray_apply, "apply_posts", events_folded)
    monkeypatch.setattr("raysight.store.writer.MAX_REST_S", 1.5)
    settings = Settings(tmp_path / "data").replace(fold_linger_s=0, fold_rest=1000)
    with TestClient(create_app(settings)) as client:
        assert client.post("/ingest/ray-events?cluster=c", json=ray_batches[0]).status_code == 200
        _until(lambda: groups == ["events 1"], what="the first group")  # then the fold thread rests
        for events, body in zip(ray_batches[1:3], log_bodies, strict=True):
            assert client.post("/ingest/ray-events?cluster=c", json=events).status_code == 200
            assert client.post(wire.AGENT_LOGS, content=body, headers=JSON).status_code == 200
        _until(lambda: groups[1:3] == ["events 2", "logs 2"], what="a group of each")
        writer = client.app.state.raysight.writer
        assert writer.backlog()["batches"] == 2 and writer.store.journal_folded() == 2  # the first log batch's is 3
    failing[0] = False
    with TestClient(create_app(settings)) as client:
        _until(lambda: not client.get(wire.PING).json()["ingest_backlog"]["batches"], what="the replay")
        lines = client.get("/api/raysight/logs", params={"session": session}).json()["rows"]
        assert [line["text"] for line in lines] == ["first line", "second line"]
        stored = sum(len(batch) for batch in ray_batches[:3])
        assert (counters := client.get("/api/raysight/doctor").json()["counters"])["stored"] == stored
        assert counters["deduplicated"] == len(ray_batches[2])  # the events after the first log batch, again
