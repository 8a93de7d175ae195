"""Ray's task throughput with the event stream off, on to a sink that discards, and on to a raysight server.

Each round runs one fresh local Ray (`ray.init(num_cpus=2)`) per configuration in its own subprocess, since Ray
reads the export variables when it starts: warm up, then time N trivial tasks (submit all, then `ray.get`).
(b) sends the stream to an HTTP sink in this process that reads each body and answers 200 at once; (c) to a real
`raysight server` on a temp data dir, waited on until quiet after each round. Configurations are interleaved;
prints each round, medians with min–max, and the ratios. Aim: raysight ≥ 0.9x of the discard sink.
Run: .venv/bin/python benchmarks/ray_task_throughput.py [--rounds 5] [--tasks 3000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.cpu import child_output, cpu_seconds
from raysight.cli.run import free_port, ray_env, wait_until_quiet
from tests.ray_scenarios import ServerProcess

WARMUP = 200
AIM = 0.9
CONFIGS = ("off", "discard", "raysight")


def child(tasks: int) -> None:
    """Time ``tasks`` no-op tasks on a fresh local Ray; print tasks/s on stdout."""
    import ray

    @ray.remote
    def noop() -> None:
        return None

    ray.init(address="local", num_cpus=2)  # "local": a new cluster even if another one runs here
    try:
        ray.get([noop.remote() for _ in range(WARMUP)])
        t0 = time.perf_counter()
        ray.get([noop.remote() for _ in range(tasks)])
        print(tasks / (time.perf_counter() - t0))
        time.sleep(2)
    finally:
        ray.shutdown()


class Sink(BaseHTTPRequestHandler):
    """Reads each POST's body, counts it, answers 200 with keep-alive, as Ray's aggregator expects."""

    protocol_version = "HTTP/1.1"
    bodies = 0
    events = 0
    lock = threading.Lock()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with Sink.lock:
            Sink.bodies += 1
            Sink.events += body.count(b'"eventId"')
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def measure(tasks: int, env: dict[str, str]) -> float:
    """Run one child with ``env`` added to a Ray-free environment; its tasks/s."""
    drop = {"RAY_ADDRESS", *ray_env("http://unused")}
    base = {k: v for k, v in os.environ.items() if k not in drop}
    return float(child_output(__file__, ["--child", str(tasks)], {**base, **env}).split()[-1])


def main(rounds: int, tasks: int) -> None:
    rates: dict[str, list[float]] = {c: [] for c in CONFIGS}
    sink = ThreadingHTTPServer(("127.0.0.1", free_port()), Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    sink_url = f"http://127.0.0.1:{sink.server_address[1]}"
    with tempfile.TemporaryDirectory(prefix="raysight-bench-") as data_dir:
        server = ServerProcess(Path(data_dir)).start()
        try:
            with server.client() as client:
                for r in range(1, rounds + 1):
                    rates["off"].append(measure(tasks, {}))
                    before = Sink.bodies, Sink.events
                    rates["discard"].append(measure(tasks, ray_env(sink_url, cluster=f"discard-{r}")))
                    got = f"sink got {Sink.events - before[1]:,} events in {Sink.bodies - before[0]} POSTs"
                    label, cpu = f"bench-{r}", cpu_seconds(server.proc.pid)
                    rates["raysight"].append(measure(tasks, ray_env(server.url, cluster=label)))
                    cpu = cpu_seconds(server.proc.pid) - cpu  # while Ray ran (folding may go on after)
                    wait_until_quiet(client)
                    noop = [
                        g
                        for g in client.summary("tasks", session=label)["summary"]
                        if g["func_or_class_name"].endswith("noop")
                    ]
                    stored = sum(g["attempts"] for g in noop)
                    done = sum(g["state_counts"].get("FINISHED", 0) for g in noop)
                    print(
                        f"round {r}: " + "  ".join(f"{c} {rates[c][-1]:,.0f}" for c in CONFIGS) + " tasks/s"
                        f"  ({got}; raysight stored {stored:,} noop attempts, {done:,} FINISHED, "
                        f"of {WARMUP + tasks:,}; server CPU while Ray ran {cpu:.2f} s)",
                        flush=True,
                    )
        finally:
            server.stop()
            sink.shutdown()
            sink.server_close()
    for c in CONFIGS:
        print(
            f"{c:>9}: median {statistics.median(rates[c]):7,.0f} tasks/s  "
            f"(min {min(rates[c]):,.0f}, max {max(rates[c]):,.0f}, {rounds} rounds)"
        )
    off, discard, raysight = (statistics.median(rates[c]) for c in CONFIGS)
    paired = [r / d for r, d in zip(rates["raysight"], rates["discard"])]  # each round's own ratio: drift cancels
    print(
        f"discard/off: {discard / off:.2f}x   raysight/discard: {raysight / discard:.2f}x of the medians; "
        f"per round {statistics.median(paired):.2f}x (min {min(paired):.2f}, max {max(paired):.2f})  "
        f"(aim ≥ {AIM}x: {'met' if min(raysight / discard, statistics.median(paired)) >= AIM else 'not met'})"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=3000)
    parser.add_argument("--child", type=int, metavar="TASKS", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
    else:
        main(args.rounds, args.tasks)
