"""raysight's own answers at their documented maxima, within a memory budget and with the server answering meanwhile
(issue 27, finding 6): `/api/raysight/logs?limit=1000000` (once a 500, DuckDB out of memory), `/api/raysight/tasks?
limit=1000000&detail=true` (1.85 GB, the event loop held 3.9 s while its JSON was rendered), Ray's `/api/v0/tasks` at
its 10,000, and lines with 100 lines of context each (1,000 of them took 56 s and 1.3 GB at 200k lines); and an answer
read in many chunks (the timeline's too) is the answer read in one.

Scaled down: a store of 200,000 log lines (the maximum is 1,000,000) and 30,000 tasks (the recorded session's, copied
in SQL), built in-process without Ray. A streamed answer holds a chunk at a time, whatever its size, so its bound does
not scale with it: the server may grow by :data:`BUDGET_MB` while any one answer is made (its peak resident memory,
reset before each), where before it grew by 7-9 times the answer's JSON (here 20-110 MB: the logs' 110 MB grew it by
835 MB, the tasks' 56 MB by 470 MB; at 1M lines DuckDB's 1 GB limit failed the logs).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from starlette.testclient import TestClient

from raysight.signals.log_lines import logs_query
from raysight.signals.log_lines.apply import apply_logs
from raysight.signals.ray_events import state_query, timeline_query
from raysight.signals.ray_events.apply import Post, apply_posts
from raysight.store.store import Store
from tests.ray_scenarios import ServerProcess, wait_folded
from tests.test_inference import record

SESSION = "session_2026-11-21_19-46-15_579671_2021"  # the recorded session's
LINES = 200_000
TASKS = 30_000
BUDGET_MB = 200
PING_TIMEOUT_S = 1.0


def log_batch(first: int, count: int) -> bytes:
    """An agent's batch of ``count`` lines of one worker's file, from line ``first`` on (``line N: …``)."""
    texts = [
        f"line {i}: the worker did step {i % 97} of its work, {i * 7919 % 100_003} units"
        for i in range(first, first + count)
    ]
    offsets = [first * 100 + 100 * i for i in range(count)]  # lines padded to 100 bytes in the file
    file = {
        "session": SESSION,
        "key": "2049-7-0",
        "name": "worker-" + "ab" * 28 + "-01000000-777.out",
        "path": "worker-" + "ab" * 28 + "-01000000-777.out",
        "stream": "stdout",
        "worker_id": "ab" * 28,
        "job_id": "01000000",
        "pid": 777,
        "end": offsets[-1] + 100,
        "read_ns": 1_795_288_476_000_000_000,
        "offsets": offsets,
        "texts": texts,
        "raw": [None] * count,
        "continued": [False] * count,
        "markers": [False] * count,
        "jobs": ["01000000"] * count,
        "tasks": [None] * count,
        "actors": [None] * count,
    }
    return orjson.dumps({"host": "node-1", "utc_offset_s": 0, "files": [file], "gaps": []})


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory, ray_batches: list[list[dict[str, Any]]]) -> Iterator[ServerProcess]:
    """A server over the recorded session with its tasks copied to :data:`TASKS` and :data:`LINES` log lines."""
    data = tmp_path_factory.mktemp("answers") / "data"
    store = Store(data)
    try:
        for batch in ray_batches:
            apply_posts(store, [Post(orjson.dumps(batch), "rec")])
        (recorded,) = store.con.execute("SELECT count(*) FROM tasks").fetchone() or (0,)
        for table in ("tasks", "task_transitions", "task_profile"):  # each copy a task ID of its own
            store.con.execute(
                f"""INSERT INTO {table} SELECT x.* REPLACE (printf('%s%08x', x.task_id[:40], c.n) AS task_id)
                    FROM {table} x, range(1, {TASKS // recorded}) c(n)"""
            )
        step = 50_000
        apply_logs(store, [log_batch(first, step) for first in range(0, LINES, step)])
    finally:
        store.close()
    with ServerProcess(data) as server:
        yield server


def _memory_kb(pid: int, field: str) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith(field + ":")))


def _answer_while_pinging(server: ServerProcess, path: str) -> tuple[Any, float, list[str]]:
    """The answer to ``path`` (read whole), how far it grew the server (MB), and the pings that took over a second
    meanwhile (polled until the answer is read)."""
    assert server.proc is not None
    pid = server.proc.pid
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # the peak resident memory (VmHWM) starts again from now
    before = _memory_kb(pid, "VmRSS")
    done, slow = threading.Event(), []

    def ping() -> None:
        with httpx.Client(base_url=server.url, timeout=PING_TIMEOUT_S) as http:
            while not done.is_set():
                try:
                    http.get("/api/raysight/ping").raise_for_status()
                except httpx.HTTPError as exc:
                    slow.append(repr(exc))
                time.sleep(0.02)

    pinger = threading.Thread(target=ping)
    pinger.start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            answer = http.get(path)
    finally:
        done.set()
        pinger.join()
    assert answer.status_code == 200, answer.text[:500]
    return orjson.loads(answer.content), (_memory_kb(pid, "VmHWM") - before) / 1024, slow


@pytest.mark.parametrize(
    "path, rows",
    [
        ("/api/raysight/logs?limit=1000000", lambda a: len(a["rows"]) == a["total"] == LINES),
        ("/api/raysight/tasks?limit=1000000&detail=true", lambda a: len(a["rows"]) == a["total"] > TASKS * 0.9),
        ("/api/v0/tasks?limit=10000&detail=true", lambda a: len(a["data"]["result"]["result"]) == 10_000),
        # every 100th line found (the first 1,000: 100 to 100,000) with the 100 lines before and after each
        (
            "/api/raysight/logs?regex=^line%20%5Cd*00:&context=100&limit=1000",
            lambda a: [r["seq"] for r in a["rows"]] == list(range(1, 100_102)),
        ),
    ],
)
def test_the_largest_answers_stream_within_a_memory_budget_while_ping_answers(
    big: ServerProcess, path: str, rows: Any
) -> None:
    answer, grew_mb, slow = _answer_while_pinging(big, path)
    assert rows(answer)
    assert grew_mb < BUDGET_MB, f"{path} grew the server by {grew_mb:.0f} MB"
    assert not slow, f"ping took over {PING_TIMEOUT_S} s while {path} was answered: {slow[:3]}"


def test_an_answer_read_in_many_chunks_is_the_answer_read_in_one(
    server: TestClient, ray_batches: list[list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    record(server, ray_batches, "?cluster=rec")
    for first in (0, 300):
        answer = server.post(
            "/ingest/agent/logs", content=log_batch(first, 300), headers={"Content-Type": "application/json"}
        )
        assert answer.status_code == 200, answer.text
    wait_folded(server)
    paths = [
        "/api/raysight/tasks?detail=true",
        "/api/raysight/tasks?limit=7&offset=3&sort=-task_id",
        "/api/raysight/actors?detail=true",
        "/api/raysight/nodes?detail=true",
        "/api/raysight/workers?detail=true",
        "/api/raysight/jobs?detail=true",
        "/api/v0/tasks?detail=true",
        "/api/jobs/",
        "/api/raysight/timeline",
        "/api/raysight/logs",
        "/api/raysight/logs?limit=250&newest=true",
        "/api/raysight/logs?after=280&limit=40",
        "/api/raysight/logs?grep=line%203&context=4",
    ]
    whole = {path: server.get(path).json() for path in paths}
    monkeypatch.setattr(state_query, "CHUNK_ROWS", 2)
    monkeypatch.setattr(logs_query, "CHUNK_ROWS", 7)
    monkeypatch.setattr(logs_query, "CHUNK_BYTES", 1000)
    monkeypatch.setattr(timeline_query, "CHUNK_EVENTS", 3)
    for path in paths:
        assert server.get(path).json() == whole[path], path
