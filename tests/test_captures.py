"""On-demand profiles without a cluster: the requests and answers checked, the tools' outputs read (a real memray
capture of this process), the queue agents long-poll, and the routes: refused unless profiling is allowed and the
admin token given, each request recorded and followed to its end, bad bodies a 400 naming what is wrong."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import memray
import orjson
import pytest
from starlette.testclient import TestClient

from raysight import wire
from raysight.agent.captures import PTRACE_HELP, _refusal, dump_stacks, raw_stacks, raylet_of
from raysight.errors import BadIngest, Unavailable
from raysight.flame import top
from raysight.server import capture_queue
from raysight.server.app import create_app
from raysight.server.capture_queue import CaptureQueue
from raysight.server.guard import REACH_TOKEN_NEEDED
from raysight.server.routing import Reach
from raysight.settings import Reaches, Settings
from raysight.signals.profile_captures.memray_read import bounded, memray_stacks
from raysight.signals.profile_captures.parse import MAX_RESULT, MAX_STACK, MAX_STACKS, parse_asked, parse_result
from tests.test_server import post

NODE = "a" * 56
ADMIN = {"Authorization": "Bearer admin-secret", "Content-Type": "application/json"}


def asked(**fields: Any) -> bytes:
    return orjson.dumps({"kind": "cpu", "pid": 42, "node_id": NODE, **fields})


def test_a_request_names_one_live_process_and_says_what_is_wrong_otherwise() -> None:
    cpu = parse_asked(asked(duration_s=2.5, native=True))
    assert (cpu.kind, cpu.pid, cpu.node_id, cpu.duration_s, cpu.native, cpu.leaks) == (
        "cpu",
        42,
        NODE,
        2.5,
        True,
        False,
    )
    assert parse_asked(asked(kind="memory")).duration_s == 10.0  # the default
    assert parse_asked(asked(kind="stack")).duration_s == 0.0  # a moment's
    actor = parse_asked(orjson.dumps({"kind": "memory", "actor_id": "b" * 32, "leaks": True}))
    assert (actor.actor_id, actor.pid, actor.leaks) == ("b" * 32, None, True)
    wrong = {
        b"[]": "JSON object",
        asked(kind="heap"): "kind must be one of stack, cpu, memory",
        asked(task_id="c" * 48): "name one process",
        orjson.dumps({"kind": "cpu"}): "name one process",
        orjson.dumps({"kind": "cpu", "pid": 42}): "give node_id with it",
        asked(pid=0): "pid must be a process ID",
        asked(pid="42"): "pid must be a process ID",
        asked(node_id="xyz"): "node_id must be a Ray ID",
        asked(kind="stack", duration_s=1): "a stack is a moment's",
        asked(duration_s=0.01): "duration_s must be a number of seconds from 0.1 to 600",
        asked(duration_s=True): "duration_s must be a number",
        asked(leaks=True): "leaks is memory's",
        asked(native="yes"): "native must be true or false",
        asked(session=""): "session must be a session's name or label",
    }
    for body, why in wrong.items():
        with pytest.raises(BadIngest, match=why):
            parse_asked(body)


def test_an_agent_s_answer_is_stacks_with_weights_or_why_not() -> None:
    done = parse_result(orjson.dumps({"unit": "bytes", "stacks": [["a (x.py:1);b (x.py:2)", 4096]], "text": None}))
    assert (done.error, done.unit, orjson.loads(done.stacks or "")) == (
        None,
        "bytes",
        [["a (x.py:1);b (x.py:2)", 4096]],
    )
    assert parse_result(orjson.dumps({"error": "refused"})).error == "refused"
    wrong = {
        orjson.dumps({"unit": "furlongs", "stacks": []}): "unit must be one of samples, bytes",
        orjson.dumps({"unit": "samples", "stacks": [["a", 0]]}): "weight must be a positive integer",
        orjson.dumps({"unit": "samples", "stacks": [["", 1]]}): "a stack must be a string",
        orjson.dumps({"unit": "samples", "stacks": [["a"]]}): r"each of stacks must be \[collapsed stack, weight\]",
        orjson.dumps({"unit": "samples", "text": 7}): "text must be a string",
        orjson.dumps({"error": ""}): "error must be a string of 1 to",
        b" " * (MAX_RESULT + 1): "at most",
    }
    for body, why in wrong.items():
        with pytest.raises(BadIngest, match=why):
            parse_result(body)


def test_py_spy_s_dump_and_raw_output_are_read_as_stacks_root_first() -> None:
    threads = [
        {
            "thread_id": 1,
            "os_thread_id": 101,
            "thread_name": "MainThread",
            "active": True,
            "owns_gil": True,
            "frames": [
                {"name": "Spinner.spin", "filename": "/app/a.py", "short_filename": "a.py", "line": 9},
                {"name": "<module>", "filename": "/app/main.py", "short_filename": "main.py", "line": 3},
            ],
        },
        {"thread_id": 2, "os_thread_id": 102, "thread_name": None, "active": False, "frames": []},
    ]
    text, stacks = dump_stacks(threads)
    assert text.splitlines()[:3] == [
        'Thread 101 (active+gil): "MainThread"',
        "    Spinner.spin (a.py:9)",
        "    <module> (main.py:3)",
    ]
    assert "Thread 102 (idle):" in text
    assert stacks == [("<module> (main.py:3);Spinner.spin (a.py:9)", 1)]  # a thread without frames has no stack
    raw = "<module> (main.py:3);spin (a.py:9) 180\n<module> (main.py:3);spin (a.py:10) 20\nnot a line\n"
    assert raw_stacks(raw) == [("<module> (main.py:3);spin (a.py:9)", 180), ("<module> (main.py:3);spin (a.py:10)", 20)]


def test_the_agent_sends_what_the_server_keeps_and_profiles_only_what_ray_started() -> None:
    many = [(f"f{i} (a.py:{i})", i + 1) for i in range(MAX_STACKS + 5)]
    kept = bounded(many)
    assert len(kept) == MAX_STACKS and kept[0] == many[-1] and ("f0 (a.py:0)", 1) not in kept  # the heaviest
    (deep,) = bounded([(";".join(["g (b.py:1)"] * 10_000), 3)])
    assert len(deep[0]) <= MAX_STACK and deep[0].startswith("…;") and deep[0].endswith("g (b.py:1)")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert raylet_of(child.pid, {os.getpid(), 1_000_001}) == os.getpid()  # started by "the raylet" (this process)
        assert raylet_of(child.pid, {child.pid + 1_000_000}) is None and raylet_of(os.getpid(), {child.pid}) is None
    finally:
        child.kill()
        child.wait()


def allocate(kept: list[bytearray]) -> None:
    for _ in range(64):
        kept.append(bytearray(64 * 1024))  # the allocating line


def test_a_memray_capture_is_read_as_stacks_weighed_in_bytes(tmp_path: Path) -> None:
    """A real capture of this process, aggregated as the agent asks memray for one."""
    path, kept = tmp_path / "capture.bin", []
    with memray.Tracker(path, file_format=memray.FileFormat.AGGREGATED_ALLOCATIONS):
        allocate(kept)
    records = memray.FileReader(path).get_high_watermark_allocation_records(merge_threads=True)
    stacks = memray_stacks(records)
    line = next(
        n for n, text in enumerate(Path(__file__).read_text().splitlines(), 1) if "# the allocating line" in text
    )
    heaviest = top(stacks, lines=True)[0]
    assert heaviest["function"] == f"allocate ({__file__}:{line})" and heaviest["own"] >= 64 * 64 * 1024, heaviest


def test_a_tool_refused_ptrace_says_how_to_allow_it_and_a_process_gone_says_so() -> None:
    said = _refusal(1, "py-spy", "Permission Denied: Try running again with elevated permissions")
    assert said.startswith(PTRACE_HELP.split("{why}")[0].format(pid=1, tool="py-spy")) and "CAP_SYS_PTRACE" in said
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    assert _refusal(ended.pid, "py-spy", "Error: Failed to open process") == (
        f"no process {ended.pid} on this node any more: it ended before py-spy reached it"
    )
    assert _refusal(1, "memray", "An unexpected error occurred") == "memray failed: An unexpected error occurred"


def order(capture_id: str, duration_s: float = 1.0) -> wire.CaptureOrder:
    return {
        "capture_id": capture_id,
        "kind": "cpu",
        "pid": 42,
        "duration_s": duration_s,
        "native": False,
        "leaks": False,
    }


def test_the_queue_gives_each_node_s_agent_its_requests_and_fails_those_left_past_their_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def scenario() -> None:
        queue = CaptureQueue()
        waiting = asyncio.ensure_future(queue.take([NODE], wait_s=5))  # a long poll, answered as soon as asked
        await asyncio.sleep(0.05)
        await queue.put("b" * 56, order("other"))  # another node's
        await queue.put(NODE, order("mine"))
        assert [o["capture_id"] for o in await asyncio.wait_for(waiting, 1)] == ["mine"]
        assert await queue.take([NODE], wait_s=0) == [] and list(queue.queued) == ["other"]
        queue.give_back([order("mine")])  # its agent gone before it was told
        assert [o["capture_id"] for o in await queue.take([NODE], wait_s=0)] == ["mine"]
        assert queue.finish("mine") and not queue.finish("mine")
        monkeypatch.setattr(capture_queue, "TAKE_WITHIN_S", -1.0)
        monkeypatch.setattr(capture_queue, "RUN_GRACE_S", -1.0)
        await queue.put(NODE, order("slow", duration_s=0))
        await queue.take([NODE], wait_s=0)
        await queue.put("c" * 56, order("untaken"))
        expired = dict(queue.expired())
        assert expired["untaken"].startswith(f"no raysight agent of node {'c' * 56} asked for it")
        assert expired["slow"] == f"the agent of node {NODE} took it but sent nothing back"
        assert list(queue.queued) == ["other"] and not queue.running  # (within its deadline, set before)
        while len(queue.queued) < capture_queue.MAX_WAITING:
            await queue.put(NODE, order(str(len(queue.queued))))
        with pytest.raises(Unavailable, match="on-demand profiles are under way"):
            queue.check_room()

    asyncio.run(scenario())


@pytest.fixture
def profiling(tmp_path: Path) -> Iterator[TestClient]:
    """The app on loopback, profiling allowed with the admin token ``admin-secret``."""
    settings = Settings(tmp_path / "data").replace(
        reaches=Reaches(profiling=True, reach_token="admin-secret"), fold_linger_s=0, fold_rest=0
    )
    with TestClient(create_app(settings)) as client:
        yield client


def test_unless_the_server_allows_profiling_neither_a_user_nor_an_agent_gets_through(server: TestClient) -> None:
    refused = [
        server.post(wire.CAPTURES, content=asked(), headers={"Content-Type": "application/json"}),
        server.get(wire.AGENT_CAPTURES, params={"node": NODE}),
        server.post(wire.path(wire.AGENT_CAPTURE, capture_id="x"), json={"error": "x"}),
    ]
    assert [(r.status_code, r.json()["error"]) for r in refused] == [(403, Reach.PROFILE.off)] * 3


def test_a_request_is_recorded_taken_by_its_node_s_agent_and_followed_to_its_end(
    profiling: TestClient, ray_batches: list[list[dict[str, Any]]]
) -> None:
    for batch in ray_batches:
        post(profiling, batch)
    denied = profiling.post(wire.CAPTURES, content=asked(), headers={"Content-Type": "application/json"})
    assert (denied.status_code, denied.json()["error"]) == (403, REACH_TOKEN_NEEDED)  # on loopback too
    bad = profiling.post(wire.CAPTURES, content=asked(kind="heap"), headers=ADMIN)
    assert (
        bad.status_code == 400 and bad.json()["error"] == "bad profile request: kind must be one of stack, cpu, memory"
    )
    finished = profiling.get(wire.RESOURCE.format(resource="tasks"), params={"filter": "state=FINISHED"}).json()["rows"]
    task = finished[0]["task_id"]
    gone = profiling.post(wire.CAPTURES, content=orjson.dumps({"kind": "stack", "task_id": task}), headers=ADMIN)
    assert gone.status_code == 409 and f"`raysight profile --task {task}`" in gone.json()["error"]
    headers = {**ADMIN, wire.CLIENT_HEADER: "ada@laptop"}
    queued = profiling.post(wire.CAPTURES, content=asked(duration_s=2), headers=headers)
    assert queued.status_code == 202, queued.text
    capture_id = queued.json()["capture_id"]
    listed = profiling.get(wire.CAPTURES).json()["rows"]
    assert [(r["capture_id"], r["status"], r["client"], r["pid"]) for r in listed] == [
        (capture_id, "queued", "ada@laptop", 42)
    ]
    assert profiling.get(wire.AGENT_CAPTURES, params={"node": "b" * 56}).json() == {"captures": []}  # another node's
    taken = profiling.get(wire.AGENT_CAPTURES, params={"node": NODE, "wait": 1}).json()["captures"]
    assert taken == [order(capture_id, duration_s=2.0)]
    assert profiling.get(wire.path(wire.CAPTURE, capture_id=capture_id)).json()["status"] == "running"
    result = {"unit": "samples", "stacks": [["main (a.py:1);spin (a.py:9)", 200]]}
    answer = wire.path(wire.AGENT_CAPTURE, capture_id=capture_id)
    assert profiling.post(answer, json={"unit": "samples", "stacks": [["x", -1]]}).status_code == 400
    assert profiling.post(answer, json=result).json() == {"ok": True}
    assert profiling.post(answer, json=result).status_code == 404  # once
    whole = profiling.get(wire.path(wire.CAPTURE, capture_id=capture_id)).json()
    assert (whole["status"], whole["unit"], whole["stacks"], whole["error"]) == (
        "done",
        "samples",
        result["stacks"],
        None,
    )
    assert whole["requested_ns"] <= whole["taken_ns"] <= whole["finished_ns"]
    drawn = profiling.get(wire.path(wire.CAPTURE, capture_id=capture_id), params={"format": "svg"})
    assert drawn.headers["content-type"] == "image/svg+xml" and "CPU of pid 42 (session " in drawn.text
    assert "spin (a.py:9)" in drawn.text
    running = profiling.post(wire.CAPTURES, content=asked(kind="stack"), headers=ADMIN).json()["capture_id"]
    undrawn = profiling.get(wire.path(wire.CAPTURE, capture_id=running), params={"format": "svg"})
    assert undrawn.status_code == 409 and undrawn.json()["error"].endswith("is queued: it has no stacks to draw")
    assert profiling.get(wire.path(wire.CAPTURE, capture_id="nope")).status_code == 404
