"""Logs: the node agent's throughput, and searching the stored lines, beside grep over the same files.

Synthesises a Ray session's logs (worker files as Ray writes them: in-band markers, then task output; a few tasks per
worker), ships them with `raysight agent --once` to a `raysight server` (fresh data dir) and reports lines/s until
durable on the server and until queryable, with the agent's CPU. Then, interleaved rounds of: a substring search, a
regex search and one worker's lines through `raysight logs`' API, each beside `grep -F` / `grep -E` over the files.
Run: .venv/bin/python benchmarks/logs.py [--lines 1000000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.ingest_http import wait_folded
from raysight.client import Client
from tests.ray_scenarios import ServerProcess, agent_command

SESSION = "session_2026-11-23_00-00-00_000000_1"
WORKERS = 50
LINES_PER_TASK = 200


def synthesise(logs: Path, lines: int) -> int:
    """Worker files holding ``lines`` lines in all (markers included); returns the bytes written."""
    per_worker = lines // WORKERS
    written = 0
    for w in range(WORKERS):
        worker_id = f"{w:056x}"
        path = logs / f"worker-{worker_id}-01000000-{10000 + w}.out"
        out = [":job_id:01000000\n"]
        for i in range(per_worker - 1):
            if i % LINES_PER_TASK == 0:
                out.append(f":task_name:task_{w}_{i // LINES_PER_TASK}\n")
            else:
                out.append(f"worker {w} step {i}: loss={i * 0.001:.3f} shard=s3://bucket/part-{i % 97:05d}\n")
        data = "".join(out)
        path.write_text(data)
        written += len(data)
    return written


def grep(args: list[str], files: list[Path]) -> tuple[float, int]:
    started = time.perf_counter()
    out = subprocess.run(["grep", "-h", *args, *map(str, files)], capture_output=True, check=False).stdout
    return time.perf_counter() - started, out.count(b"\n")


def timed(fn: object) -> tuple[float, int]:
    started = time.perf_counter()
    rows = fn()  # type: ignore[operator]
    return time.perf_counter() - started, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp) / "ray" / SESSION / "logs"
        logs.mkdir(parents=True)
        size = synthesise(logs, args.lines)
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
            cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
            print(f"{stored:,} lines ({size / 1e6:.0f} MB) in {len(files)} files; {shipped.stderr.strip()}")
            print(
                f"agent: durable on the server {stored / durable:,.0f} lines/s ({durable:.1f} s), agent CPU "
                f"{cpu:.1f} s = {stored / cpu:,.0f} lines per CPU-second; queryable {stored / queryable:,.0f} "
                f"lines/s ({queryable:.1f} s)"
            )
            searches = {
                "substring": (["-F", "part-00042"], {"grep": "part-00042"}),
                "regex": (["-E", "loss=0\\.1[0-9]5 "], {"regex": "loss=0\\.1[0-9]5 "}),
            }
            times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in [*searches, "worker"]}
            one_worker = files[7].name.split("-")[1]
            with Client(server.url, timeout=600) as client:
                for _ in range(args.rounds):
                    for name, (grep_args, params) in searches.items():
                        seconds, found = grep(grep_args, files)
                        times[name][1].append(seconds)
                        ours, rows = timed(lambda p=params: len(client.logs(**p, limit=1_000_000, count=False)["rows"]))
                        times[name][0].append(ours)
                        assert rows == found, (name, rows, found)
                    # one worker's lines (grep reads its file, which it must be told)
                    seconds, found = grep(["-c", ""], [files[7]])
                    times["worker"][1].append(seconds)
                    ours, rows = timed(lambda: len(client.logs(worker=one_worker, limit=1_000_000)["rows"]))
                    times["worker"][0].append(ours)
            for name, (ours_s, grep_s) in times.items():
                a, b = statistics.median(ours_s), statistics.median(grep_s)
                print(
                    f"{name:>10}: raysight {a * 1000:8.1f} ms, grep {b * 1000:8.1f} ms  ({b / a:.2f}x of grep's speed)"
                )
            print(
                f"store: {sum(f.stat().st_size for f in (Path(tmp) / 'data').rglob('*') if f.is_file()) / 1e6:.0f} MB "
                f"on disk for {size / 1e6:.0f} MB of log files ({os.cpu_count()} cores, {args.rounds} rounds)"
            )
        finally:
            server.stop()


if __name__ == "__main__":
    main()
