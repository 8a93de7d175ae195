"""Continuous task profiles' cost: CPU-bound tasks with raysight sampling every attempt (20 Hz, the default) beside the
same tasks with sampling off, both traced by raysight (its runtime-env hook, spans to a real server); and the bytes
the store keeps a task-second of samples.

Each round runs one fresh local Ray (`ray.init(num_cpus=2)`) per configuration in its own subprocess, interleaved,
each round begun by the other configuration: a warm-up, then N tasks that each burn --task-s of CPU in Python (a
call tree a few frames deep, as code is), two at a time; the batch's wall time, and the CPU each kind of process
(the driver, Ray's workers, Ray's other processes, the raysight server) spent a task meanwhile, until 2 s after (the
samples sent and stored). ``off``: RAYSIGHT_PROFILE_HZ=0. ``sampled``: the default rate. Aim: sampling costs at most
2 % of a task's CPU (the extra CPU of all processes a task, over the task's own), the median of paired rounds. Then
the bytes a task-second of samples takes in the store: --attempts attempts shaped as the most sampled one the runs
recorded, each a task of its own, stored as workers send them, over the task-seconds they stand for.

Run: .venv/bin/python benchmarks/profile.py [--rounds 5] [--tasks 40] [--task-s 0.25] [--attempts 20000]
(2-core VM, noisy: compare medians)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.cpu import child_output
from benchmarks.tracing import SERVER_PID_ENV, cpu_seconds
from raysight.cli.run import ray_env, tracing_env, wait_until_quiet
from raysight.instrument.task_profile import DEFAULT_HZ
from raysight.settings import DB_FILE, ENV_PROFILE_HZ
from raysight.signals.task_profiles.apply import apply_profiles
from raysight.store.store import Store
from tests.ray_scenarios import ServerProcess

CONFIGS = ("off", "sampled")
WARMUP_TASKS, SETTLE_S = 4, 2.5  # (past the senders' linger and the server's fold)
AIM = 0.02


def child(tasks: int, task_s: float) -> None:
    """Run ``tasks`` CPU-bound tasks of ``task_s`` each on a fresh local Ray; print, as JSON, the batch's wall time
    and the CPU each kind of process spent a task meanwhile."""
    import ray

    def leaf(until: float) -> int:
        n = 0
        while time.thread_time() < until:
            n += sum(i * i for i in range(200))
        return n

    def middle(seconds: float) -> int:
        return leaf(time.thread_time() + seconds)

    @ray.remote
    def work(seconds: float) -> int:
        return middle(seconds)

    ray.init(num_cpus=2, include_dashboard=False)
    try:
        ray.get([work.remote(0.05) for _ in range(WARMUP_TASKS)])
        time.sleep(SETTLE_S)
        before = cpu_seconds()
        started = time.perf_counter()
        ray.get([work.remote(task_s) for _ in range(tasks)])
        wall = time.perf_counter() - started
        time.sleep(SETTLE_S)
        after = cpu_seconds()
        cpu_us = {kind: round((after[kind] - before.get(kind, 0.0)) / tasks * 1e6, 1) for kind in after}
        print(json.dumps({"wall_s": wall, "cpu_us": cpu_us}))
    finally:
        ray.shutdown()


def measure(config: str, tasks: int, task_s: float, server: ServerProcess) -> dict:
    drop = {"RAY_ADDRESS", ENV_PROFILE_HZ, *ray_env("http://unused"), *tracing_env("http://unused")}
    env = {k: v for k, v in os.environ.items() if k not in drop} | tracing_env(server.url)
    env[SERVER_PID_ENV] = str(server.proc.pid if server.proc else 0)
    if config == "off":
        env[ENV_PROFILE_HZ] = "0"
    return json.loads(child_output(__file__, ["--child", str(tasks), "--task-s", str(task_s)], env))


def recorded_attempt(data_dir: Path) -> list[tuple[str, int, int]]:
    """The stacks of the most sampled attempt the runs recorded: ``[(stack, samples, on_cpu)]``."""
    import duckdb

    con = duckdb.connect(str(data_dir / DB_FILE), read_only=True)
    try:
        return con.execute(
            """SELECT p.stack, t.samples, t.on_cpu FROM task_samples t JOIN profile_stacks p USING (stack_id)
               WHERE (t.task_id, t.attempt) = (SELECT (task_id, attempt) FROM task_samples GROUP BY ALL
                                               ORDER BY sum(samples) DESC LIMIT 1)"""
        ).fetchall()
    finally:
        con.close()


def stored_bytes(template: list[tuple[str, int, int]], attempts: int) -> tuple[int, float]:
    """What a store's file grows by (checkpointed) when ``attempts`` attempts shaped as ``template`` are sampled, in
    batches as workers send them (50 attempts a batch), and the task-seconds they stand for."""
    with tempfile.TemporaryDirectory(prefix="raysight-bench-") as data_dir:
        store = Store(Path(data_dir))
        try:
            store.con.execute("CHECKPOINT")
            before = (Path(data_dir) / DB_FILE).stat().st_size
            bodies = [
                orjson.dumps(
                    {
                        "batch_id": f"bench-{b}",
                        "session": "session_2026-12-01_00-00-00_000000_1",
                        "node_id": None,
                        "worker_id": None,
                        "pid": 1,
                        "hz": DEFAULT_HZ,
                        "dropped": 0,
                        "attempts": [
                            {"task_id": os.urandom(24).hex(), "attempt": 0, "stacks": template}
                            for _ in range(min(50, attempts - b * 50))
                        ],
                    }
                )
                for b in range((attempts + 49) // 50)
            ]
            for i in range(0, len(bodies), 20):
                apply_profiles(store, bodies[i : i + 20])
            store.con.execute("CHECKPOINT")
            grown = (Path(data_dir) / DB_FILE).stat().st_size - before
            (seconds,) = store.con.execute("SELECT sum(wall_s) FROM task_samples").fetchone()
        finally:
            store.close()
    return grown, seconds


def main(rounds: int, tasks: int, task_s: float, attempts: int) -> None:
    runs: dict[str, list[dict]] = {c: [] for c in CONFIGS}
    with tempfile.TemporaryDirectory(prefix="raysight-bench-") as data_dir:
        server = ServerProcess(Path(data_dir)).start()
        try:
            for r in range(1, rounds + 1):
                turn = r % len(CONFIGS)
                for config in CONFIGS[turn:] + CONFIGS[:turn]:
                    runs[config].append(measure(config, tasks, task_s, server))
                print(f"round {r}: " + "  ".join(f"{c} {runs[c][-1]['wall_s']:.2f}s" for c in CONFIGS), flush=True)
            with server.client() as client:
                wait_until_quiet(client, quiet_s=0.5, timeout_s=120)
        finally:
            server.stop()
        template = recorded_attempt(Path(data_dir))
    for c in CONFIGS:
        medians = {k: statistics.median(run["cpu_us"][k] for run in runs[c]) for k in runs[c][0]["cpu_us"]}
        spent = "  ".join(f"{k} {v:,.0f}" for k, v in medians.items())
        wall = statistics.median(run["wall_s"] for run in runs[c])
        print(f"{c:>8}: {tasks} tasks of {task_s}s in {wall:.2f}s; CPU a task (µs, median of rounds): {spent}")
    task_us = task_s * 1e6
    costs = [
        (sum(s["cpu_us"].values()) - sum(o["cpu_us"].values())) / task_us for s, o in zip(runs["sampled"], runs["off"])
    ]
    walls = [s["wall_s"] / o["wall_s"] - 1 for s, o in zip(runs["sampled"], runs["off"])]
    cost = statistics.median(costs)
    print(
        f"sampling at the default rate costs {cost:+.2%} of a task's CPU (all processes; median of paired rounds; "
        f"aim ≤ {AIM:.0%}: {'met' if cost <= AIM else 'not met'}), and {statistics.median(walls):+.2%} of the batch's "
        "wall time"
    )
    stored, seconds = stored_bytes(template, attempts)
    print(
        f"stored: {stored / seconds:,.0f} bytes a task-second of samples ({attempts:,} attempts shaped as the most "
        f"sampled one recorded, {len(template)} stacks; {seconds:,.0f} task-seconds; the store's file, checkpointed)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--task-s", type=float, default=0.25)
    parser.add_argument("--attempts", type=int, default=20_000, help="attempts synthesised for the bytes stored")
    parser.add_argument("--child", type=int, metavar="TASKS", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.task_s)
    else:
        main(args.rounds, args.tasks, args.task_s, args.attempts)
