"""The debugger's cost to a job that never pauses: Ray's task throughput and CPU a task with raysight's breakpoint
hook installed in every worker (``raysight.instrument.debugger.install``, what a traced job's setup hook does), beside
none.

Each round runs one fresh local Ray (`ray.init(num_cpus=2)`) per configuration in its own subprocess, interleaved,
each round begun by the other configuration: warm up, then time N trivial tasks (submit all, then `ray.get`), and the
CPU each kind of process (driver, Ray's workers, Ray's other processes) spent a task meanwhile. ``off``: no setup
hook. ``hooked``: the breakpoint hook as the job's ``worker_process_setup_hook``. Aim: no difference beyond noise;
the noise is shown as the spread of each configuration's own rounds (max over min of its CPU a task).

Run: .venv/bin/python benchmarks/debugger.py [--rounds 5] [--tasks 3000]
(2-core VM, noisy: compare medians)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.cpu import child_output
from benchmarks.tracing import SETTLE_S, WARMUP, cpu_seconds

CONFIGS = ("off", "hooked")
HOOK = "raysight.instrument.debugger.install"


def child(tasks: int, hooked: bool) -> None:
    """Time ``tasks`` no-op tasks on a fresh local Ray; print tasks/s and the CPU a task of each kind of process."""
    import ray

    @ray.remote
    def noop() -> None:
        return None

    runtime_env = {"worker_process_setup_hook": HOOK} if hooked else None
    ray.init(address="local", num_cpus=2, include_dashboard=False, runtime_env=runtime_env)
    try:
        ray.get([noop.remote() for _ in range(WARMUP)])
        time.sleep(SETTLE_S)
        before = cpu_seconds()
        t0 = time.perf_counter()
        ray.get([noop.remote() for _ in range(tasks)])
        rate = tasks / (time.perf_counter() - t0)
        after = cpu_seconds()
        cpu_us = {kind: (after[kind] - before.get(kind, 0.0)) / tasks * 1e6 for kind in after if kind != "server"}
        print(json.dumps({"rate": rate, "cpu_us": cpu_us}))
    finally:
        ray.shutdown()


def measure(tasks: int, config: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "RAYSIGHT_"))}
    hooked = ["--hooked"] if config == "hooked" else []
    return json.loads(child_output(__file__, ["--child", str(tasks), *hooked], env))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=3000)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--hooked", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.hooked)
        return
    rates: dict[str, list[float]] = {c: [] for c in CONFIGS}
    cpu: dict[str, list[float]] = {c: [] for c in CONFIGS}
    for r in range(1, args.rounds + 1):
        turn = r % len(CONFIGS)
        for config in CONFIGS[turn:] + CONFIGS[:turn]:  # each first in turn: a round's first run is slower
            run = measure(args.tasks, config)
            rates[config].append(run["rate"])
            cpu[config].append(sum(run["cpu_us"].values()))
        print(f"round {r}: " + "  ".join(f"{c} {rates[c][-1]:,.0f} tasks/s {cpu[c][-1]:,.0f} µs" for c in CONFIGS))
    for c in CONFIGS:
        rate, spent = statistics.median(rates[c]), statistics.median(cpu[c])
        spread = max(cpu[c]) / min(cpu[c])
        print(f"{c:>6}: median {rate:,.0f} tasks/s, CPU a task {spent:,.0f} µs (its rounds' spread: {spread:.2f}x)")
    paired = [h / o for h, o in zip(cpu["hooked"], cpu["off"])]
    ratio = statistics.median(h / o for h, o in zip(rates["hooked"], rates["off"]))
    print(
        f"hooked over off (median of paired rounds): CPU a task {statistics.median(paired):.3f}x "
        f"(rounds {min(paired):.3f}-{max(paired):.3f}x), rate {ratio:.3f}x; aim: within the noise"
    )


if __name__ == "__main__":
    main()
