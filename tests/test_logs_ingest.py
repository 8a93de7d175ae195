"""The logs write path: an agent's batches through /ingest/agent/logs, each line stored once however often sent, bad
batches refused with a reason and nothing else lost; and a real agent through Ray-style rotation, copy-truncate, its
own SIGKILL and a server outage, counted line by line."""

from __future__ import annotations

import base64
import gzip
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from raysight import wire
from raysight.agent import node_agent
from raysight.agent.node_agent import NodeAgent, batch_body
from raysight.agent.tailer import Tailer
from raysight.cli import main
from raysight.client import Client
from raysight.config import USER_AGENT
from raysight.errors import NotFound
from tests.ray_scenarios import ServerProcess, agent_command
from tests.test_server import post

WORKER = "worker-" + "cd" * 28 + "-01000000-777.out"
ROTATE_EVERY_S = 0.6  # a file lives at least this long before Ray's rotation deletes it (the agent scans each 0.2 s)
GZIP = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
JSON = {"Content-Type": "application/json"}


def _session(tmp_path: Path) -> Path:
    logs = tmp_path / "ray" / "session_2026-11-23_01-02-03_000000_9" / "logs"
    logs.mkdir(parents=True)
    return logs


def _batch(tmp_path: Path, logs: Path) -> bytes:
    tailer = Tailer(logs.parent.parent, tmp_path / "checkpoint.json")
    tailer.scan()
    return batch_body("node-1", tailer.read(1 << 20), [])


def _lines(client: TestClient, **params: object) -> list[dict[str, object]]:
    """The lines stored, once every batch acknowledged is folded."""
    deadline = time.monotonic() + 10
    while client.get(wire.PING).json()["ingest_backlog"]["batches"]:
        assert time.monotonic() < deadline, "the batches were not folded"
        time.sleep(0.02)
    return client.get("/api/raysight/logs", params={"limit": 100_000, **params}).json()["rows"]  # type: ignore[no-any-return]


def test_a_batch_is_stored_once_however_often_sent_and_gzip_or_not(server: TestClient, tmp_path: Path) -> None:
    logs = _session(tmp_path)
    (logs / WORKER).write_bytes(b":job_id:01000000\n:task_name:f\nhello\nbad \xff byte\n")
    body = _batch(tmp_path, logs)
    for _ in range(2):
        answer = server.post(wire.AGENT_LOGS, content=body, headers={"Content-Type": "application/json"})
        assert answer.status_code == 200 and answer.json() == {"ok": True, "lines": 4}
    assert server.post(wire.AGENT_LOGS, content=gzip.compress(body), headers=GZIP).status_code == 200
    rows = _lines(server)
    assert [(r["text"], r["task_name"], r["job_id"], r["pid"]) for r in rows] == [
        ("hello", "f", "01000000", 777),
        ("bad \ufffd byte", "f", "01000000", 777),
    ]
    assert len(_lines(server, markers=True)) == 4
    counters = server.get("/api/raysight/doctor").json()["counters"]
    assert (counters["log_lines"], counters["log_lines_deduplicated"], counters["log_batches"]) == (4, 8, 3)


def test_a_session_known_by_its_logs_alone_is_listed_and_deleting_it_deletes_its_lines_and_files(
    server: TestClient, tmp_path: Path
) -> None:
    logs = _session(tmp_path)
    (logs / WORKER).write_bytes(b"hello\n")
    body = _batch(tmp_path, logs)
    assert server.post(wire.AGENT_LOGS, content=body, headers={"Content-Type": "application/json"}).is_success
    assert [r["text"] for r in _lines(server)] == ["hello"]
    listed = server.get("/api/raysight/sessions").json()["sessions"]
    assert [(s["session"], s["events"]) for s in listed] == [(logs.parent.name, 0)]  # known by its logs alone
    assert server.delete(f"/api/raysight/sessions/{logs.parent.name}").is_success
    assert server.get("/api/raysight/sessions").json()["sessions"] == [] and _lines(server) == []
    assert server.post(wire.AGENT_LOGS, content=body, headers={"Content-Type": "application/json"}).is_success
    assert [r["text"] for r in _lines(server)] == ["hello"]  # stored anew: nothing said it was there


def test_a_line_s_time_is_its_own_stamp_else_when_its_file_was_last_written(
    server: TestClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TZ", "XST-5:30")  # the agent's local time, in which Ray stamps its lines: UTC+5:30
    time.tzset()
    try:
        logs = _session(tmp_path)
        stamped = datetime.now() - timedelta(hours=2)  # local time, as Ray writes it
        stamp = stamped.strftime("%Y-%m-%d %H:%M:%S,") + f"{stamped.microsecond // 1000:03d}"
        (logs / "raylet.out").write_text(
            f"[{stamp} W 6603 6603] (raylet) main.cc:283: low memory\n"
            f"{stamp}\tERROR worker.py:12 -- it broke\n"
            f'{{"asctime": "{stamp}", "levelname": "INFO", "message": "json"}}\n'
            "2001-01-01 00:00:00,000 a date printed, not this line's time\n"
            "a print, with no stamp\n"
        )
        written = time.time_ns() - 3600 * 10**9  # last written an hour ago, and read only now
        os.utime(logs / "raylet.out", ns=(written, written))
        body = _batch(tmp_path, logs)
        own = int(stamped.replace(microsecond=stamped.microsecond // 1000 * 1000).timestamp() * 10**6) * 1000
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert server.post(wire.AGENT_LOGS, content=body, headers={"Content-Type": "application/json"}).is_success
    times = [row["ts_ns"] for row in _lines(server)]
    assert times == [own, own, own, written, written]


def test_a_dead_worker_s_print_as_its_task_began_is_that_attempt_s_though_its_mtime_reads_a_tick_before(
    server: TestClient, tmp_path: Path, ray_batches: list[list[dict[str, Any]]]
) -> None:
    """The recorded run's `crash_once` exits in its first attempt, so Ray gives no byte range of what it printed: its
    lines are its worker's while it ran. The kernel stamps a file's mtime with its coarse clock, a tick behind Ray's:
    a print as the task begins may read a few milliseconds before Ray's first event of the attempt (the CI flake of
    test_ray_integration's crash_once). A line written well before is still not the attempt's."""
    for batch in ray_batches:
        post(server, batch)
    (crash,) = [e["taskLifecycleEvent"] for b in ray_batches for e in b if "WORKER_DIED" in orjson.dumps(e).decode()]
    seconds, fraction = crash["stateTransitions"][0]["timestamp"].rstrip("Z").split(".")  # submitted: its first event
    first_ns = int(datetime.fromisoformat(seconds + "+00:00").timestamp()) * 10**9 + int(fraction.ljust(9, "0"))
    logs = tmp_path / "ray" / ray_batches[0][0]["sessionName"] / "logs"
    logs.mkdir(parents=True)
    worker = f"worker-{base64.b64decode(crash['workerId']).hex()}-01000000-4242"
    for stream, text, before_ns in (("out", "first attempt, exiting", 3_000_000), ("err", "long before", 500_000_000)):
        (logs / f"{worker}.{stream}").write_text(f":task_name:crash_once\ncrash_once: {text}\n")
        os.utime(logs / f"{worker}.{stream}", ns=(first_ns - before_ns,) * 2)
    assert server.post(wire.AGENT_LOGS, content=_batch(tmp_path, logs), headers=JSON).is_success
    lines = _lines(server, task=base64.b64decode(crash["taskId"]).hex(), attempt=0)
    assert [(row["text"], row["attribution"]) for row in lines] == [("crash_once: first attempt, exiting", "inferred")]


def test_a_line_s_level_and_json_fields_are_read_from_it(server: TestClient, tmp_path: Path) -> None:
    logs = _session(tmp_path)
    (logs / "raylet.out").write_text(
        "[2026-11-21 19:14:33,944 W 6603 6603] (raylet) main.cc:283: low memory\n"
        "2026-11-21 19:14:34,001\tERROR worker.py:12 -- it broke\n"
        "INFO 2026-11-21 19:21:09,176 proxy 192.0.2.2 abc123 -- GET /hello 200 1.2ms\n"
        '{"levelname": "WARNING", "message": "slow", "request_id": "r-9", "trace_id": "t-1", "span_id": "s-2"}\n'
        "a plain line\n"
    )
    body = _batch(tmp_path, logs)
    assert server.post(wire.AGENT_LOGS, content=body, headers={"Content-Type": "application/json"}).status_code == 200
    rows = _lines(server)
    assert [r["level"] for r in rows] == ["WARNING", "ERROR", "INFO", "WARNING", None]
    assert (rows[3]["request_id"], rows[3]["trace_id"], rows[3]["span_id"]) == ("r-9", "t-1", "s-2")
    assert [r["text"][:6] for r in _lines(server, level="warning")] == ["[2026-", '{"leve']
    assert [r["stream"] for r in rows] == ["system"] * 5 and rows[0]["name"] == "raylet.out"


def test_a_dashboard_s_lines_of_raysight_s_own_requests_are_left_out_unless_asked(
    server: TestClient, tmp_path: Path
) -> None:
    logs = _session(tmp_path)
    access = (  # Ray 2.60's dashboard.log line of a request it served, as aiohttp's access log writes it
        "2026-11-26 12:01:21,555\tINFO web_log.py:229 -- 127.0.0.1 [26/Nov/2026:12:01:21 +0000] 'GET {} HTTP/1.1' "
        "200 205 bytes 542 us '-' '{}'\n"
    )
    (logs / "dashboard.log").write_text(
        access.format("/api/v0/objects?limit=10000&detail=True", USER_AGENT)
        + access.format("/api/v0/tasks?limit=100", "python-requests/2.32.3")  # `ray list tasks`: the user's
        + access.format("/api/jobs/", "raysight/0.0.9")  # an older raysight's poller
        + "2026-11-26 12:01:22,000\tINFO head.py:12 -- a line that quotes 'raysight/0.1.0' is no request of its own\n"
        + access.format("/api/version", "raysight/")  # (no version: not raysight's)
    )
    assert server.post(wire.AGENT_LOGS, content=_batch(tmp_path, logs), headers=JSON).is_success
    shown = [row["text"] for row in _lines(server)]
    assert len(shown) == 3 and not any(text.endswith(("'raysight/0.1.0'", "'raysight/0.0.9'")) for text in shown)
    assert len(_lines(server, include_own="true")) == 5
    around = _lines(server, grep="/api/", context=1, limit=100)  # the lines around one found leave them out too
    assert [str(r["text"]).rsplit(" ", 1)[1] for r in around] == ["'python-requests/2.32.3'", "own", "'raysight/'"]
    assert len(_lines(server, grep="/api/", include_own="true")) == 4


def test_what_an_agent_could_not_read_is_shown_by_the_doctor(server: TestClient, tmp_path: Path) -> None:
    gap = {"session": "session_x", "key": "1-2-ab", "name": WORKER, "start": 100, "end": 400, "why": "deleted"}
    body = orjson.dumps({"host": "node-1", "files": [], "gaps": [gap, gap]})
    for _ in range(2):  # a resend counts once
        assert (
            server.post(wire.AGENT_LOGS, content=body, headers={"Content-Type": "application/json"}).status_code == 200
        )
    _lines(server)
    report = server.get("/api/raysight/doctor").json()
    assert [(g["name"], g["start_offset"], g["end_offset"], g["why"]) for g in report["log_gaps"]] == [
        (WORKER, 100, 400, "deleted")
    ]
    assert report["counters"]["log_gaps"] == 1


def test_bad_batches_are_refused_with_a_reason_and_lose_nothing_else(server: TestClient, tmp_path: Path) -> None:
    logs = _session(tmp_path)
    (logs / WORKER).write_text("kept\n")
    good = orjson.loads(_batch(tmp_path, logs))
    file = good["files"][0]
    bad = {
        b"not json": "body is not JSON",
        orjson.dumps([]): "body must be a JSON object",
        orjson.dumps({**good, "host": 7}): "host must be a string",
        orjson.dumps({**good, "files": [{**file, "offsets": [5, 5]}]}): "texts must be a list as long as offsets",
        orjson.dumps({**good, "files": [{**file, "offsets": [9], "end": 5}]}): "offsets must increase",
        orjson.dumps({**good, "files": [{**file, "stream": "video"}]}): "stream must be one of",
        orjson.dumps({**good, "files": [{**file, "append": "yes"}]}): "append must be true or false",
        orjson.dumps({**good, "files": [{**file, "texts": [7]}]}): "texts holds int",
        orjson.dumps({**good, "gaps": [{"key": "k"}]}): "session must be the name of a Ray session",
        orjson.dumps({**good, "files": [{**file, "session": "x' OR 1=1 --"}]}): "session must be the name of a Ray",
        orjson.dumps({**good, "files": [{**file, "raw": ["not base64!"]}]}): "raw holds 'not base64!', not base64",
        orjson.dumps({**good, "files": [{**file, "key": "k" * 256}]}): "key must be a string of 1 to 255",
    }
    for body, why in bad.items():
        answer = server.post(wire.AGENT_LOGS, content=body, headers={"Content-Type": "application/json"})
        assert answer.status_code == 400 and why in answer.json()["error"], (why, answer.json())
    assert server.post(wire.AGENT_LOGS, content=b"not gzip", headers=GZIP).status_code == 400
    bomb = gzip.compress(b"[" + b" " * (2 * 1024 * 1024) + b"]")  # 2 MiB inflated, over the fixture's 1 MiB
    answer = server.post(wire.AGENT_LOGS, content=bomb, headers=GZIP)
    assert answer.status_code == 413 and "decompressed" in answer.json()["error"]
    assert (
        server.post(
            wire.AGENT_LOGS, content=orjson.dumps(good), headers=GZIP | {"Content-Encoding": "identity"}
        ).status_code
        == 200
    )
    assert [r["text"] for r in _lines(server)] == ["kept"]
    answer = server.post(wire.AGENT_LOGS, content=orjson.dumps(good), headers=GZIP | {"Content-Encoding": "br"})
    assert answer.status_code == 415 and "'br'" in answer.json()["error"]  # named, not misread as a bad batch


def test_bad_log_queries_get_400_with_what_to_do(server: TestClient, tmp_path: Path) -> None:
    logs = _session(tmp_path)
    (logs / WORKER).write_text("hello\n")
    json = {"Content-Type": "application/json"}
    assert server.post(wire.AGENT_LOGS, content=_batch(tmp_path, logs), headers=json).status_code == 200
    for params, why in [
        ({"context": "101"}, "context must be 0 to 100 lines"),
        ({"context": "-1"}, "context must be an integer from 0"),
        ({"context": "two"}, "context must be an integer from 0"),
        ({"context": "1", "limit": "10001"}, "with context, limit must be at most 10000"),
        ({"regex": "(unclosed"}, "bad regex"),
        ({"limit": "-1"}, "limit must be an integer from 0"),
    ]:
        answer = server.get("/api/raysight/logs", params=params)
        assert answer.status_code == 400 and why in answer.json()["error"], (params, answer.text)


def _agent(server: ServerProcess, tmp_path: Path) -> subprocess.Popen[bytes]:
    command = agent_command(server.url, tmp_path / "ray", tmp_path / "state")
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class Following:
    """A real server, a writer of numbered lines to a worker's file, and a real agent following it."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.writer = Writer(_session(tmp_path))
        self.server = ServerProcess(tmp_path / "data").start()
        self.agent = _agent(self.server, tmp_path)

    def restart_agent(self) -> None:
        self.agent = _agent(self.server, self.tmp_path)

    def stop(self) -> None:
        if self.agent.poll() is None:
            self.agent.send_signal(signal.SIGTERM)
            self.agent.wait(timeout=30)
        self.server.stop()


@pytest.fixture
def following(tmp_path: Path) -> Iterator[Following]:
    running = Following(tmp_path)
    try:
        yield running
    finally:
        running.stop()


class Writer:
    """Writes numbered lines to a worker's file as Ray does, rotating it by rename (RAY_ROTATION_* style: NAME.1 …,
    the oldest deleted), or as an outside logrotate's copy-truncate."""

    def __init__(self, logs: Path) -> None:
        self.path, self.next = logs / WORKER, 0

    def write(self, count: int) -> None:
        with self.path.open("a") as f:
            for _ in range(count):
                f.write(f"line {self.next}\n")
                self.next += 1

    def rotate(self, backups: int = 2) -> None:
        for i in range(backups, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{i}")
            if older.exists():
                if i == backups:
                    older.unlink()
                else:
                    older.rename(self.path.with_name(f"{self.path.name}.{i + 1}"))
        self.path.rename(self.path.with_name(f"{self.path.name}.1"))

    def copy_truncate(self) -> None:
        shutil.copyfile(self.path, self.path.with_name(f"{self.path.name}-20261123"))
        os.truncate(self.path, 0)


def _stored(server: ServerProcess) -> list[int]:
    with server.client() as client:
        try:
            rows = client.logs(session="session_2026-11-23_01-02-03_000000_9", limit=1_000_000, count=False)["rows"]
        except NotFound:  # nothing of the session stored yet
            return []
    return [int(r["text"].split()[1]) for r in rows if r["text"].startswith("line ")]


def _until_stored(server: ServerProcess, count: int, deadline_s: float = 30) -> list[int]:
    deadline = time.monotonic() + deadline_s
    while len(numbers := _stored(server)) < count and time.monotonic() < deadline:
        time.sleep(0.1)
    return numbers


def test_no_line_lost_or_twice_through_rotation_copy_truncate_agent_sigkill_and_server_outage(
    following: Following,
) -> None:
    server, writer = following.server, following.writer
    writer.write(10)
    _until_stored(server, 10)  # the agent is up
    for _ in range(3):  # Ray's own rotation, while the agent follows (each file lives a few of its scans)
        writer.write(300)
        writer.rotate()
        time.sleep(ROTATE_EVERY_S)
    writer.write(100)
    assert len(_until_stored(server, writer.next)) >= writer.next
    following.agent.kill()  # SIGKILL mid-stream: its checkpoint may lag what the server has
    following.agent.wait()
    writer.write(200)
    writer.copy_truncate()
    writer.write(50)
    following.restart_agent()
    writer.write(100)
    writer.rotate()
    assert len(_until_stored(server, writer.next)) >= writer.next
    server.stop()  # the server away: the files are the buffer, the checkpoint does not move
    for _ in range(3):  # and Ray rotates files away meanwhile (the agent holds them open)
        writer.write(150)
        writer.rotate()
        time.sleep(ROTATE_EVERY_S)
    writer.write(50)
    server.start()
    writer.write(25)
    assert sorted(_until_stored(server, writer.next)) == list(range(writer.next))  # every line, once


def test_a_steady_trickle_of_lines_goes_in_a_batch_a_look_not_a_batch_a_line(following: Following) -> None:
    """A busy Ray writes a few lines at a time, all the time (a Serve replica's access lines): each batch costs the
    server a POST and a fold, so the agent sends what the files hold once a look (POLL_S), not as soon as it can."""
    server, writer = following.server, following.writer
    writer.write(1)
    _until_stored(server, 1)
    with server.client() as client:
        before = client.doctor()["counters"]["log_batches"]
    started = time.monotonic()
    while time.monotonic() - started < 2.0:
        writer.write(1)
        time.sleep(0.005)
    assert sorted(_until_stored(server, writer.next)) == list(range(writer.next))
    with server.client() as client:
        batches = client.doctor()["counters"]["log_batches"] - before
    assert batches <= 2.0 / node_agent.POLL_S + 4, (batches, writer.next)  # (before: one a line or two)


def test_a_deleted_file_s_unread_end_is_read_and_the_agent_drains_on_sigterm(following: Following) -> None:
    server, writer = following.server, following.writer
    writer.write(10)
    _until_stored(server, 10)
    with writer.path.open("a") as f:
        f.write("line 10\nline 11")  # the last without its newline: shipped when the agent drains
    following.agent.send_signal(signal.SIGTERM)
    assert following.agent.wait(timeout=30) == 0
    assert _until_stored(server, 12) == list(range(12))


@pytest.mark.parametrize("lines", [1, 1000])
def test_the_agent_s_once_mode_ships_and_exits(tmp_path: Path, lines: int) -> None:
    logs = _session(tmp_path)
    server = ServerProcess(tmp_path / "data").start()
    try:
        Writer(logs).write(lines)
        done = subprocess.run(
            agent_command(server.url, tmp_path / "ray", tmp_path / "state", "--once"),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0 and f"{lines} lines shipped" in done.stderr
        with Client(server.url) as client:
            deadline = time.monotonic() + 10
            while client.ingest_backlog()["batches"] and time.monotonic() < deadline:  # acknowledged: folding
                time.sleep(0.05)
            assert client.logs(limit=10, count=True)["total"] == lines
    finally:
        server.stop()


def test_a_50_mb_line_binary_bytes_and_invalid_utf8_reach_the_store_whole_beside_the_other_lines(
    tmp_path: Path,
) -> None:
    logs = _session(tmp_path)
    huge = b"x" * (50 * 1024 * 1024 - 3) + "é".encode() + b"y"  # 800 pieces of 64 KiB, the last not ASCII
    (logs / WORKER).write_bytes(b"before\n" + huge + b"\nafter \xff\xfe\n")
    binary = bytes(range(256)) * 64  # NULs and every byte, newlines here and there
    (logs / "runtime_env_setup-01000000.log").write_bytes(binary)
    server = ServerProcess(tmp_path / "data").start()
    try:
        done = subprocess.run(
            agent_command(server.url, tmp_path / "ray", tmp_path / "state", "--once"),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        with Client(server.url, timeout=120) as client:
            deadline = time.monotonic() + 60
            while client.ingest_backlog()["batches"]:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            rows = client.logs(file=WORKER, limit=10_000, count=False)["rows"]
            setup = client.logs(file="runtime_env_setup", limit=10_000, count=False)["rows"]
        assert rows[0]["text"] == "before" and rows[-1]["text"] == "after \ufffd\ufffd"
        pieces = rows[1:-1]
        assert len(pieces) == 800 and [p["continued"] for p in pieces] == [False] + [True] * 799
        assert "".join(p["text"] for p in pieces).encode() == huge  # nothing lost, nothing mangled
        assert [p["byte_offset"] for p in pieces] == [7 + i * 64 * 1024 for i in range(800)]
        assert "\n".join(r["text"] for r in setup).encode() == binary.rstrip(b"\n").decode(errors="replace").encode()
    finally:
        server.stop()


def test_a_drain_goes_on_while_the_server_takes_batches_and_gives_up_once_it_takes_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(node_agent, "BATCH_BYTES", 256)  # some forty batches
    logs = _session(tmp_path)
    Writer(logs).write(1000)
    server = ServerProcess(tmp_path / "data").start()
    try:
        agent = NodeAgent(server.url, tmp_path / "ray", tmp_path / "state")
        try:
            assert agent.drain(patience_s=0.05) and agent.sent_lines == 1000  # far longer than 0.05 s in all
        finally:
            agent.close()
        assert _until_stored(server, 1000) == list(range(1000))
    finally:
        server.stop()
    Writer(logs).write(1)
    agent = NodeAgent(server.url, tmp_path / "ray", tmp_path / "state")  # the server is gone
    try:
        started = time.monotonic()
        assert not agent.drain(patience_s=0.5) and agent.sent_lines == 0
        assert time.monotonic() - started < 5
    finally:
        agent.close()


def test_a_trickle_of_lines_goes_in_a_batch_a_second_and_a_line_after_a_quiet_second_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Serve writes a few lines a request, all the time: the agent sends what came in the second after a batch in
    the next (each POST costs it and the server about a millisecond), and a line that comes after a quiet second at
    its next look; every line once, in order."""
    logs = _session(tmp_path)
    writer = Writer(logs)
    writer.write(1)
    with ServerProcess(tmp_path / "data") as server:
        agent = NodeAgent(server.url, tmp_path / "ray", tmp_path / "state")
        sent: list[float] = []
        send = agent._send

        def counted(route: str, *args: Any, **kwargs: Any) -> Any:
            if route == wire.AGENT_LOGS:
                sent.append(time.monotonic())
            return send(route, *args, **kwargs)

        monkeypatch.setattr(agent, "_send", counted)
        stop = threading.Event()
        shipping = threading.Thread(target=agent._ship, args=(stop,))
        shipping.start()
        try:
            assert _until_stored(server, 1) == [0]
            started = time.monotonic()
            while time.monotonic() < started + 3:  # a line every 20 ms
                writer.write(1)
                time.sleep(0.02)
            trickle = [t for t in sent if started <= t < started + 3]
            assert 2 <= len(trickle) <= 4, trickle  # (a look every 0.2 s sent 15)
            time.sleep(1.5)
            written = time.monotonic()
            writer.write(1)
            deadline = written + 5
            while not (after := [t - written for t in sent if t > written]) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert after and after[0] < 0.5, after
        finally:
            stop.set()
            shipping.join()
            agent.close()
        assert _until_stored(server, writer.next) == list(range(writer.next))


def test_context_prints_the_lines_of_the_file_around_each_found_as_grep_c(tmp_path: Path) -> None:
    logs = _session(tmp_path)
    lines = [f"line {i}" + (" needle" if i in (5, 6, 20) else "") for i in range(30)]
    (logs / WORKER).write_text(":job_id:01000000\n:task_name:f\n" + "".join(line + "\n" for line in lines))
    (logs / "raylet.out").write_text("".join(f"r{i}{' needle' if i == 1 else ''}\n" for i in range(5)))
    server = ServerProcess(tmp_path / "data").start()
    try:
        body, json = _batch(tmp_path, logs), {"Content-Type": "application/json"}
        assert httpx.post(server.url + wire.AGENT_LOGS, content=body, headers=json).status_code == 200
        _until_stored(server, 30)
        result = CliRunner().invoke(main, ["logs", "--server", server.url, "--grep", "needle", "-C", "2"])
        assert result.exit_code == 0, result.output
        groups = set(result.stdout.split("--\n"))
        worker = "(f pid=777) line {}"
        assert groups == {
            "".join(worker.format(i) + (" needle" if i in (5, 6) else "") + "\n" for i in range(3, 9)),
            "".join(worker.format(i) + (" needle" if i == 20 else "") + "\n" for i in range(18, 23)),
            "[raylet.out] r0\n[raylet.out] r1 needle\n[raylet.out] r2\n[raylet.out] r3\n",
        }
        bad = CliRunner().invoke(main, ["logs", "--server", server.url, "--grep", "needle", "-C", "101"])
        assert bad.exit_code == 2 and "101 is not in the range 0<=x<=100" in bad.stderr
    finally:
        server.stop()


def test_follow_prints_a_new_line_as_it_is_written(following: Following) -> None:
    server, writer = following.server, following.writer
    writer.write(3)
    _until_stored(server, 3)
    follow = subprocess.Popen(
        [sys.executable, "-m", "raysight", "logs", "--follow", "--tail", "2", "--server", server.url],
        stdout=subprocess.PIPE,
        text=True,
    )
    printed: queue.Queue[str] = queue.Queue()
    threading.Thread(
        target=lambda: [printed.put(line.rstrip("\n")) for line in follow.stdout or []], daemon=True
    ).start()
    try:
        assert [printed.get(timeout=30) for _ in range(2)] == ["(worker pid=777) line 1", "(worker pid=777) line 2"]
        started = time.monotonic()
        writer.write(1)
        assert printed.get(timeout=10) == "(worker pid=777) line 3"  # as it is written: within the 10 s deadline
        print(f"written to printed by --follow: {time.monotonic() - started:.2f} s")
    finally:
        follow.kill()
        follow.wait()
