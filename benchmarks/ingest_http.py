"""Ingest throughput over HTTP into the store, with the raysight server pinned to one core.

The server (`raysight server`, fresh data dir) runs on core 0; this process, the load generator, on core 1. Each
round POSTs a new synthesised session (benchmarks/recorded.py: the recorded Ray session's per-task events with
fresh IDs) in 1000-event batches as Ray's aggregators do, over --connections concurrent connections (one POST in
flight each, like that many nodes; a 503 is retried as Ray would). Two figures: events acknowledged per second
(each 200 means the batch is durable, in the ingest journal), from the first POST to the last answer; and events
folded into the store (queryable) per second, from the first POST until the server's backlog is empty. Beside
them, interleaved, the bound: parsing the same bodies as the store does (DuckDB, one thread) storing nothing.
Run: .venv/bin/python benchmarks/ingest_http.py [--rounds 5] [--tasks 20000] [--connections 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.cpu import cpu_seconds
from benchmarks.recorded import body, parse_only, synth_batches
from raysight.client import Client
from tests.ray_scenarios import JSON, ServerProcess

SERVER_CORE, GENERATOR_CORE = 0, 1
BATCH_EVENTS = 1000


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=20_000, help="synthesised tasks per round")
    parser.add_argument("--connections", type=int, default=4)
    args = parser.parse_args()
    os.sched_setaffinity(0, {GENERATOR_CORE})
    parse_rates, acked_rates, folded_rates = [], [], []
    with tempfile.TemporaryDirectory() as data_dir:
        server = ServerProcess(Path(data_dir), prefix=["taskset", "-c", str(SERVER_CORE)]).start()
        url = f"{server.url}/ingest/ray-events?cluster=bench"
        try:
            with server.client() as client:
                for r in range(args.rounds):
                    bodies = [body(texts) for _, texts in synth_batches(args.tasks, BATCH_EVENTS, r * args.tasks)]
                    events = sum(len(orjson.loads(b)) for b in bodies)
                    parse_rates.append(events / parse_only(bodies))
                    before, cpu = stored_events(client), cpu_seconds(server.proc.pid)
                    started = time.perf_counter()
                    acked, retries = post_all(url, bodies, args.connections)
                    wait_folded(client)
                    folded = time.perf_counter() - started
                    busy = (cpu_seconds(server.proc.pid) - cpu) / folded
                    stored = stored_events(client) - before
                    acked_rates.append(events / acked)
                    folded_rates.append(events / folded)
                    print(
                        f"round {r + 1}: {events:,} events in {len(bodies)} POSTs; parse-only "
                        f"{parse_rates[-1]:,.0f}/s; acknowledged {acked_rates[-1]:,.0f}/s; folded "
                        f"{folded_rates[-1]:,.0f}/s ({stored:,} new events stored, {retries} 503s retried, "
                        f"server core {busy:.0%} busy)",
                        flush=True,
                    )
        finally:
            server.stop()
    print(f"\n{'parse only (bound)':>28}: {spread(parse_rates)}")
    print(f"{'acknowledged (durable)':>28}: {spread(acked_rates)}")
    print(f"{'folded (queryable)':>28}: {spread(folded_rates)}")
    print(
        f"{'ratio':>28}: folded at {statistics.median(folded_rates) / statistics.median(parse_rates):.2f}x of the "
        f"parse-only bound; aim ≥ 50,000 events/s ({args.rounds} interleaved rounds, {args.connections} connections)"
    )


if __name__ == "__main__":
    main()
