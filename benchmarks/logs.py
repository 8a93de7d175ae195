"""Logs: the node agent's throughput, and searching the stored lines, beside grep over the same files.

Synthesises a Ray session's logs (worker files as Ray writes them: in-band markers, then task output; a few tasks per
worker, and a rare error line), ships them with `raysight agent --once` to a `raysight server` (fresh data dir) and
reports lines/s until durable on the server and until queryable, with the agent's CPU. It posts the tasks' events
(with Ray's per-attempt byte ranges), then runs interleaved rounds of searches through `raysight logs`' API, each
beside what a user would run instead over the files: a rare and a common substring and a regex (`grep -F`/`grep -E`
over every file), the common substring within one worker and a time window (grep cannot narrow, so still every file),
and one task's lines (`grep -A` after its name marker, over every file). Every line found is fetched, as grep prints
every line it finds. Last, how soon `raysight logs --follow` prints a line written to a file a running agent follows.
Run: .venv/bin/python benchmarks/logs.py [--lines 10000000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import base64
import os
import queue
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.ingest_http import post_all, wait_folded
from raysight import wire
from raysight.client import Client
from raysight.errors import NotFound
from tests.ray_scenarios import ServerProcess, agent_command

SESSION = "session_2026-11-23_00-00-00_000000_1"
WORKERS = 50
LINES_PER_TASK = 200
RARE = "RuntimeError: CUDA error: out of memory"
RARE_EVERY = 1_000_003  # a worker's line numbers that hold the rare error


@dataclass(frozen=True)
class Task:
    name: str
    worker_id: str
    path: Path
    start: int  # Ray's byte range of its output
    end: int


def synthesise(logs: Path, lines: int) -> tuple[int, list[Task]]:
    """Worker files holding ``lines`` lines in all (markers included); the bytes written, and the tasks."""
    per_worker = lines // WORKERS
    written, tasks = 0, []
    for w in range(WORKERS):
        worker_id = f"{w:056x}"
        path = logs / f"worker-{worker_id}-01000000-{10000 + w}.out"
        out = [":job_id:01000000\n"]
        offset = len(out[0])
        for i in range(per_worker - 1):
            if i % LINES_PER_TASK == 0:
                name = f"task_{w}_{i // LINES_PER_TASK}"
                if tasks and tasks[-1].path == path:
                    tasks[-1] = Task(**{**tasks[-1].__dict__, "end": offset})
                tasks.append(Task(name, worker_id, path, offset, offset))
                line = f":task_name:{name}\n"
            elif (w * per_worker + i) % RARE_EVERY == 0:
                line = f"{RARE} (step {i}, shard part-{i % 97:05d})\n"
            else:
                line = f"worker {w} step {i}: loss={i * 0.001:.3f} shard=s3://bucket/part-{i % 97:05d}\n"
            out.append(line)
            offset += len(line)
        tasks[-1] = Task(**{**tasks[-1].__dict__, "end": offset})
        data = "".join(out)
        path.write_text(data)
        written += len(data)
    return written, tasks


def task_events(tasks: list[Task]) -> list[bytes]:
    """Ray's events for ``tasks`` (defined, ran on their worker, printed within their byte range), in batches."""
    events = []
    for n, task in enumerate(tasks):
        task_id = base64.b64encode(n.to_bytes(24, "big")).decode()
        common = {"sourceType": "CORE_WORKER", "timestamp": "2026-11-23T00:00:01Z", "severity": "INFO"}
        common["sessionName"] = SESSION
        events.append(
            {
                **common,
                "eventId": base64.b64encode(b"d" + n.to_bytes(19, "big")).decode(),
                "eventType": "TASK_DEFINITION_EVENT",
                "taskDefinitionEvent": {
                    "taskId": task_id,
                    "taskAttempt": 0,
                    "taskName": task.name,
                    "taskType": "NORMAL_TASK",
                    "jobId": "AQAAAA==",
                    "taskFunc": {"pythonFunctionDescriptor": {"moduleName": "m", "functionName": task.name}},
                },
            }
        )
        events.append(
            {
                **common,
                "eventId": base64.b64encode(b"l" + n.to_bytes(19, "big")).decode(),
                "eventType": "TASK_LIFECYCLE_EVENT",
                "taskLifecycleEvent": {
                    "taskId": task_id,
                    "taskAttempt": 0,
                    "jobId": "AQAAAA==",
                    "workerId": base64.b64encode(bytes.fromhex(task.worker_id)).decode(),
                    "stateTransitions": [{"state": "FINISHED", "timestamp": "2026-11-23T00:00:02Z"}],
                    "taskLogInfo": {"stdoutFile": str(task.path), "stdoutStart": task.start, "stdoutEnd": task.end},
                },
            }
        )
    return [orjson.dumps(events[i : i + 1000]) for i in range(0, len(events), 1000)]


def grep(args: list[str], files: list[Path]) -> tuple[float, int]:
    started = time.perf_counter()
    out = subprocess.run(["grep", "-h", *args, *map(str, files)], capture_output=True, check=False).stdout
    return time.perf_counter() - started, out.count(b"\n")


def _has_lines(client: Client, session: str) -> bool:
    try:
        return bool(client.logs(session=session, limit=1, count=False)["rows"])
    except NotFound:  # none stored yet
        return False


def follow_latency(server_url: str, tmp: Path, rounds: int) -> list[float]:
    """Seconds from a line written to a worker's file to `raysight logs --follow` printing it, through a running
    agent, for ``rounds`` lines one after another."""
    session = "session_2026-11-23_00-00-01_000000_2"
    logs = tmp / "ray_live" / session / "logs"
    logs.mkdir(parents=True)
    path = logs / f"worker-{'ef' * 28}-01000000-4242.out"
    path.write_text(":job_id:01000000\n:task_name:live\nstarted\n")
    agent = subprocess.Popen(
        agent_command(server_url, logs.parent.parent, tmp / "state_live"), stderr=subprocess.DEVNULL
    )
    follower = None
    try:
        with Client(server_url) as client:
            deadline = time.monotonic() + 60
            while not _has_lines(client, session):
                assert time.monotonic() < deadline, "the agent did not ship the first line"
                time.sleep(0.05)
        command = [sys.executable, "-m", "raysight", "logs", "--follow", "--server", server_url, "--session", session]
        follower = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        printed: queue.Queue[tuple[float, str]] = queue.Queue()
        assert follower.stdout is not None
        threading.Thread(
            target=lambda out: [printed.put((time.perf_counter(), line)) for line in out],
            args=(follower.stdout,),
            daemon=True,
        ).start()
        printed.get(timeout=60)  # the line before: following
        latencies = []
        for i in range(rounds):
            with path.open("a") as f:
                f.write(f"probe {i}\n")
                written = time.perf_counter()
            while not (got := printed.get(timeout=30))[1].rstrip().endswith(f"probe {i}"):
                pass
            latencies.append(got[0] - written)
        return latencies
    finally:
        for process in (follower, agent):
            if process is not None:
                process.terminate()
                process.wait(timeout=30)


def timed(fn: Callable[[], int]) -> tuple[float, int]:
    started = time.perf_counter()
    rows = fn()
    return time.perf_counter() - started, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=10_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp) / "ray" / SESSION / "logs"
        logs.mkdir(parents=True)
        size, tasks = synthesise(logs, args.lines)
        files = sorted(logs.iterdir())
        server = ServerProcess(Path(tmp) / "data").start()
        try:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            shipped = subprocess.run(
                agent_command(server.url, Path(tmp) / "ray", Path(tmp) / "state", "--once"),
                capture_output=True,
                text=True,
                check=True,
            )
            durable = time.perf_counter() - started
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            with server.client() as client:
                wait_folded(client)
                queryable = time.perf_counter() - started
                stored = client.logs(limit=1, markers=True)["total"]
                post_all(f"{server.url}{wire.RAY_EVENTS}?cluster=bench", task_events(tasks), 2)
                wait_folded(client)
                first = client.logs(limit=1)["rows"][0]["ts_ns"]
                last = client.logs(limit=1, newest=True)["rows"][0]["ts_ns"]
            cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
            print(f"{stored:,} lines ({size / 1e6:.0f} MB) in {len(files)} files; {shipped.stderr.strip()}")
            print(
                f"agent: durable on the server {stored / durable:,.0f} lines/s ({durable:.1f} s), agent CPU "
                f"{cpu:.1f} s = {stored / cpu:,.0f} lines per CPU-second; queryable {stored / queryable:,.0f} "
                f"lines/s ({queryable:.1f} s)"
            )
            one_worker, one_task = files[7].name.split("-")[1], len(tasks) // 3
            window = {"since": first + (last - first) * 2 // 5, "until": first + (last - first) * 3 // 5}
            common = {"grep": "part-00042"}
            searches: dict[str, tuple[list[str], dict[str, object]]] = {
                "rare substring": (["-F", RARE], {"grep": RARE}),
                "common substring": (["-F", "part-00042"], common),
                "regex": (["-E", "loss=0\\.1[0-9]5 "], {"regex": "loss=0\\.1[0-9]5 "}),
                "common + worker + time": (["-F", "part-00042"], {**common, "worker": one_worker, **window}),
                "one task": (
                    ["-F", "-A", str(LINES_PER_TASK - 1), f":task_name:{tasks[one_task].name}"],
                    {"task": one_task.to_bytes(24, "big").hex()},  # as task_events() names it
                ),
            }
            with Client(server.url, timeout=600) as client:
                times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in searches}
                for _ in range(args.rounds):
                    for name, (grep_args, params) in searches.items():
                        seconds, found = grep(grep_args, files)
                        times[name][1].append(seconds)
                        ours, rows = timed(lambda p=params: len(client.logs(**p, limit=1_000_000, count=False)["rows"]))
                        times[name][0].append(ours)
                        if name in ("rare substring", "common substring", "regex"):
                            assert rows == found, (name, rows, found)
                        elif name == "one task":
                            assert rows == LINES_PER_TASK - 1, (name, rows)
            for name, (ours_s, grep_s) in times.items():
                a, b = statistics.median(ours_s), statistics.median(grep_s)
                print(f"{name:>24}: raysight {a * 1000:8.1f} ms, grep {b * 1000:8.1f} ms  ({b / a:5.1f}x grep's speed)")
            latencies = follow_latency(server.url, Path(tmp), 3 * args.rounds)
            print(
                f"--follow: a line written is printed after {statistics.median(latencies) * 1000:.0f} ms (median of "
                f"{len(latencies)}; max {max(latencies) * 1000:.0f} ms)"
            )
            print(
                f"store: {sum(f.stat().st_size for f in (Path(tmp) / 'data').rglob('*') if f.is_file()) / 1e6:.0f} MB "
                f"on disk for {size / 1e6:.0f} MB of log files ({os.cpu_count()} cores, {args.rounds} rounds)"
            )
        finally:
            server.stop()


if __name__ == "__main__":
    main()
