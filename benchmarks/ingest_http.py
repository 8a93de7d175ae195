"""Ingest throughput over HTTP into the store: acknowledged, and queryable (every posted event folded).

Two `raysight server`s (fresh data dirs) take turns, round by round: one pinned to core 0 (this process, the load
generator, on core 1), one free to use the machine (beside the generator). Each round POSTs a new synthesised session
(benchmarks/recorded.py: the recorded Ray session's per-task events with fresh IDs) in 1000-event batches as Ray's
aggregators do, over --connections concurrent connections (one POST in flight each, like that many nodes; a 503 is
retried as Ray would). Two figures per server: events acknowledged per second (each 200 means the batch is durable,
in the ingest journal), from the first POST to the last answer; and events queryable per second, from the first POST
until the server's backlog is empty (every event folded into the store). Each round starts once both servers are idle
(the other's checkpoint after its round would otherwise share the pinned server's core). Beside them, interleaved,
the bound: parsing the same bodies as the store does (DuckDB, one thread) storing nothing. Each round's server CPU is
split by thread name between acknowledging and folding: what one core can fold with acknowledging beside it.
Run: .venv/bin/python benchmarks/ingest_http.py [--rounds 5] [--tasks 40000] [--connections 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.cpu import cpu_by_thread_name, cpu_seconds, wait_idle
from benchmarks.recorded import body, parse_only, synth_batches
from raysight import wire
from raysight.client import Client
from tests.ray_scenarios import JSON, ServerProcess

SERVER_CORE, GENERATOR_CORE = 0, 1
BATCH_EVENTS = 1000
# the server's threads that fold (src/raysight/os_thread.py names them; jemalloc's is DuckDB's allocator); the rest
# (the event loop, uvloop's pool, the journal) acknowledge
FOLDING_THREADS = ("raysight-fold", "raysight-gather", "raysight-duckdb", "jemalloc_bg_thd")


def post_all(url: str, bodies: list[bytes], connections: int) -> tuple[float, int]:
    """POST every body, ``connections`` at a time; (seconds until the last answer, 503s retried)."""

    def send(share: list[bytes]) -> int:
        retries = 0
        with httpx.Client(timeout=30) as http:
            for data in share:
                while (status := http.post(url, content=data, headers=JSON).status_code) == 503:
                    retries += 1
                if status != 200:
                    raise SystemExit(f"ingest answered {status}")
        return retries

    shares = [bodies[i::connections] for i in range(connections)]
    started = time.perf_counter()
    with ThreadPoolExecutor(connections) as pool:
        retries = sum(pool.map(send, shares))
    return time.perf_counter() - started, retries


def stored_events(client: Client) -> int:
    return int(client.doctor()["counters"].get("stored", 0))


def wait_folded(client: Client) -> None:
    while client.ingest_backlog()["batches"]:
        time.sleep(0.05)


def spread(rates: list[float]) -> str:
    return f"median {statistics.median(rates):9,.0f} events/s  (min {min(rates):,.0f}, max {max(rates):,.0f})"


@dataclass
class Round:
    acked: float  # events/s
    queryable: float  # events/s
    ack_us: float  # server CPU an event outside the folding threads: HTTP, the body check, the journal
    fold_us: float  # CPU an event of the folding threads
    line: str


def measure(server: ServerProcess, bodies: list[bytes], events: int, connections: int) -> Round:
    """One round's figures for one server, its CPU split between acknowledging and folding by thread name."""
    url = f"{server.url}{wire.RAY_EVENTS}?cluster=bench"
    assert server.proc is not None
    pid = server.proc.pid
    with server.client() as client:
        before, cpu, threads = stored_events(client), cpu_seconds(pid), cpu_by_thread_name(pid)
        started = time.perf_counter()
        acked, retries = post_all(url, bodies, connections)
        wait_folded(client)
        folded = time.perf_counter() - started
        cpu, threads = cpu_seconds(pid) - cpu, {n: c - threads.get(n, 0.0) for n, c in cpu_by_thread_name(pid).items()}
        stored = stored_events(client) - before
    fold_us = sum(threads.get(name, 0.0) for name in FOLDING_THREADS) / events * 1e6
    ack_us = cpu / events * 1e6 - fold_us
    line = (
        f"acknowledged {events / acked:,.0f}/s; queryable {events / folded:,.0f}/s ({stored:,} new events stored, "
        f"{retries} 503s retried, server busy {cpu / folded:.0%} of a core: {ack_us:.1f} µs an event acknowledging, "
        f"{fold_us:.1f} µs folding)"
    )
    return Round(events / acked, events / folded, ack_us, fold_us, line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=40_000, help="synthesised tasks per round and server")
    parser.add_argument("--connections", type=int, default=4)
    args = parser.parse_args()
    modes = {"pinned to one core": ["taskset", "-c", str(SERVER_CORE)], "free (both cores)": []}
    parse_rates: list[float] = []
    rounds: dict[str, list[Round]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory() as data_dir:
        servers = {
            mode: ServerProcess(Path(data_dir) / str(i), prefix=prefix)
            for i, (mode, prefix) in enumerate(modes.items())
        }
        try:
            for server in servers.values():
                server.start()
            first = 0
            for r in range(args.rounds):
                for mode, server in servers.items():
                    bodies = [body(texts) for _, texts in synth_batches(args.tasks, BATCH_EVENTS, first)]
                    first += args.tasks
                    events = sum(len(orjson.loads(b)) for b in bodies)
                    os.sched_setaffinity(0, {GENERATOR_CORE} if server.prefix else {SERVER_CORE, GENERATOR_CORE})
                    if not server.prefix:
                        parse_rates.append(events / parse_only(bodies))
                    wait_idle([s.proc.pid for s in servers.values() if s.proc])  # the last round's checkpoint
                    measured = measure(server, bodies, events, args.connections)
                    rounds[mode].append(measured)
                    print(f"round {r + 1}, {mode}: {events:,} events, {len(bodies)} POSTs; {measured.line}", flush=True)
        finally:
            for server in servers.values():
                server.stop()
    print(f"\n{'parse only (bound, 1 thread)':>40}: {spread(parse_rates)}")
    for mode, measured in rounds.items():
        print(f"{'acknowledged, ' + mode:>40}: {spread([m.acked for m in measured])}")
        print(f"{'queryable, ' + mode:>40}: {spread([m.queryable for m in measured])}")
    pinned = rounds["pinned to one core"]
    ack_us, fold_us = statistics.median(m.ack_us for m in pinned), statistics.median(m.fold_us for m in pinned)
    print(
        f"{'CPU an event, pinned':>40}: {ack_us:.1f} µs acknowledging + {fold_us:.1f} µs folding: one core holds at "
        f"most {1e6 / (ack_us + fold_us):,.0f} events/s folded with acknowledging beside it, {1e6 / fold_us:,.0f}/s "
        "folding alone (medians)"
    )
    queryable = statistics.median(m.queryable for m in pinned)
    print(
        f"{'ratio':>40}: queryable pinned at {queryable / statistics.median(parse_rates):.2f}x of the parse-only "
        f"bound; aim ≥ 50,000 events/s ({args.rounds} interleaved rounds, {args.connections} connections)"
    )


if __name__ == "__main__":
    main()
