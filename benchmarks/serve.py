"""Ray Serve under raysight: requests a second with raysight recording everything and without; and Serve's requests in
the store.

1. Throughput (``--rounds``, 0 skips it): each round runs one fresh local Ray (`ray.init(num_cpus=2)`) per
   configuration in its own subprocess, interleaved, each round begun by the other configuration: Serve with one
   trivial deployment, warmed up, then ``--concurrency`` clients sending requests for ``--seconds`` through Serve's
   HTTP proxy; requests/s, and the CPU each kind of process (the clients' driver, Serve's proxy, its replica, its
   controller, each of Ray's other processes, raysight's server and `raysight run`'s agent and poller) spent a request
   meanwhile, until 2 s after (what was shipped, stored). ``off``: plain Ray. ``raysight``: under `raysight run`
   (events, logs, metrics, the poller, traces: everything it records). ``untraced``: under `raysight run
   --no-tracing`, which tells what the traces cost. ``serve-traced``: plain Ray, Serve tracing every request itself
   (``RAY_SERVE_TRACING_SAMPLING_RATIO=1``) into no span processor: the price of Serve's spans to any tracer.
   Aim: ≥ 0.97× the plain rate (the median of each round's ratio). The two cores are saturated, so plain Ray's CPU
   a request over each configuration's tells the same, more steadily: it is printed too, and what it would be were
   raysight's server and `raysight run` free: the bound set by what Ray's own processes spend under raysight.
2. Queries: `raysight serve requests --min-latency 250ms` (and `--by route`) over N synthesised requests (a proxy's
   access line and a replica's each, 1 in 1,000 slow, 1 in 100 a 503, over 20 routes), in a store of their own (a
   temporary directory) beside a second session's as many, read as the server's API reads them (the read model on a
   reader connection): the median of --repeat, warm. Goal: under 300 ms for 1M requests.

Run: .venv/bin/python benchmarks/serve.py [--rounds 3] [--seconds 10] [--concurrency 8] [--requests N] [--repeat N]
(2-core VM, noisy: compare medians)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from raysight.cli.run import free_port  # noqa: E402 (after the sys.path line)
from raysight.signals.log_lines import requests_query  # noqa: E402
from raysight.store.store import Store  # noqa: E402
from tests.ray_scenarios import ServerProcess, without_ray_settings  # noqa: E402

SESSIONS = ("session_2026-12-01_00-00-00_000000_1", "session_2026-12-02_00-00-00_000000_2")


def synthesise(store: Store, requests: int) -> None:
    """``requests`` requests in each session, two access lines each (the proxy's, then its replica's), in the order
    a store holds them: by session, then time."""
    with store.transaction() as tx:
        for s, session in enumerate(SESSIONS):
            tx.run(
                f"""INSERT INTO serve_requests BY NAME
                    SELECT '{session}' AS session, {s * 2 * requests} + i AS seq,
                           1764547200000000000 + i * 1000000 AS ts_ns, 'node-' || (i // 2 % 4) AS host,
                           CASE WHEN i % 2 = 0 THEN 'proxy' ELSE 'replica' END AS component,
                           CASE WHEN i % 2 = 1 THEN 'r' || (i // 2 % 8) END AS replica,
                           CASE WHEN i % 2 = 1 THEN 'shop' END AS application,
                           CASE WHEN i % 2 = 1 THEN 'D' || (i // 2 % 4) END AS deployment,
                           'req-' || (i // 2) AS request_id, '/route' || (i // 2 % 20) AS route, 'GET' AS method,
                           CASE WHEN i // 2 % 100 = 7 THEN '503' ELSE '200' END AS status,
                           CASE WHEN i // 2 % 1000 = 3 THEN 400.0 ELSE (i % 97) * 1.5 END - (i % 2) AS latency_ms
                    FROM range({2 * requests}) t(i)"""
            )


def timed(run: Callable[[], Any], repeat: int) -> float:
    """The median wall time of ``run()`` in ms, after a warm-up."""
    run()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


WARMUP_S, SETTLE_S = 3.0, 2.0
CONFIGS = ("off", "raysight", "untraced", "serve-traced")
TRACED_BY_SERVE = {  # Serve's own tracing of every request, its spans sent nowhere: what any tracer of them costs
    "RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH": "benchmarks.serve.no_span_processors",
    "RAY_SERVE_TRACING_SAMPLING_RATIO": "1",
    "PYTHONPATH": str(ROOT),
}
SERVER_PID_ENV = "RAYSIGHT_BENCH_SERVER_PID"
OURS = ("raysight-server", "raysight-run")  # raysight's own processes (its threads in Serve's count as Serve's)
AIM = 0.97
RESULT = "result:"  # the child's line of results (Ray and Serve print on stdout too)


def child(seconds: float, concurrency: int, recorded: bool) -> None:
    """Serve one trivial deployment on a fresh local Ray, and send it requests from ``concurrency`` clients for
    ``seconds``; print on stdout, as JSON, requests/s and the CPU each kind of process spent a request meanwhile
    (``recorded``: this program's parent is `raysight run`, whose agent and poller are raysight's)."""
    import httpx
    import ray
    from ray import serve

    @serve.deployment(ray_actor_options={"num_cpus": 0})
    class Hello:
        def __call__(self, request: Any) -> str:
            return "hello"

    ray.init(num_cpus=2, include_dashboard=True)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(Hello.bind(), name="hello", route_prefix="/")
    url = f"http://127.0.0.1:{port}/"
    counts = [0] * concurrency
    stop_at = [0.0]

    def client(i: int) -> None:
        with httpx.Client(timeout=30) as http:
            while time.monotonic() < stop_at[0]:
                http.get(url).raise_for_status()
                counts[i] += 1

    def load(duration: float) -> tuple[int, float]:
        counts[:] = [0] * concurrency
        stop_at[0] = time.monotonic() + duration
        clients = [threading.Thread(target=client, args=(i,)) for i in range(concurrency)]
        started = time.perf_counter()
        for c in clients:
            c.start()
        for c in clients:
            c.join()
        return sum(counts), time.perf_counter() - started

    try:
        load(WARMUP_S)
        time.sleep(SETTLE_S)
        before = cpu_seconds(recorded)
        sent, took = load(seconds)
        if not sent:  # (every client's request failed, or hung past its timeout: their threads said how)
            raise SystemExit(f"no request was answered in {took:.0f} s: Serve hung or refused them all")
        time.sleep(SETTLE_S)  # what the requests wrote is shipped and stored
        after = cpu_seconds(recorded)
        cpu_us = {kind: round((after[kind] - before.get(kind, 0.0)) / sent * 1e6, 1) for kind in after}
        print(RESULT, json.dumps({"rate": sent / took, "cpu_us": cpu_us}), flush=True)
    finally:
        serve.shutdown()
        ray.shutdown()


def no_span_processors() -> list[Any]:
    """Serve's tracing exporter in the ``serve-traced`` runs: Serve makes its spans, and nothing sends them."""
    return []


def cpu_seconds(recorded: bool) -> dict[str, float]:
    """CPU seconds spent so far by this driver, Serve's proxy, replicas and controller, Ray's other processes, and
    raysight (the server; `raysight run`, this program's parent, when ``recorded``)."""
    import psutil

    me = psutil.Process()
    spent = dict.fromkeys(("driver", "proxy", "replica", "controller", *OURS), 0.0)
    raysight = {
        int(os.environ.get(SERVER_PID_ENV, "0")): "raysight-server",
        **({me.ppid(): "raysight-run"} if recorded else {}),
    }
    for proc in [me, *me.children(recursive=True), *(psutil.Process(pid) for pid in raysight if pid)]:
        try:
            times, name, command = proc.cpu_times(), proc.name(), " ".join(proc.cmdline())
        except psutil.Error:  # gone meanwhile
            continue
        if proc.pid == me.pid:
            kind = "driver"
        elif proc.pid in raysight:
            kind = raysight[proc.pid]
        else:
            kind = next((k for k, marks in KINDS.items() if any(m in name or m in command for m in marks)), "ray other")
        spent[kind] = spent.get(kind, 0.0) + times.user + times.system
    return spent


# Serve's processes, then Ray's (by its name, else its command line: Ray's Python daemons are named `python`)
KINDS = {
    "proxy": ("ProxyActor",),
    "replica": ("ServeReplica",),
    "controller": ("ServeController",),
    "ray raylet": ("raylet",),
    "ray gcs": ("gcs_server",),
    "ray dashboard agent": ("ray::DashboardAgent",),  # (its metrics agent answers scrapes; its aggregator, events)
    "ray dashboard": ("dashboard/dashboard.py", "ray-dashboard-"),  # (with its modules' processes)
    "ray log monitor": ("log_monitor.py",),
    "ray autoscaler monitor": ("autoscaler/_private/monitor.py",),
    "ray runtime env agent": ("ray::RuntimeEnvAgent",),
    "ray idle worker": ("ray::IDLE",),
}


def measure(config: str, seconds: float, concurrency: int, server: ServerProcess, state: Path) -> dict[str, Any]:
    """One run of :func:`child` in a clean shell's environment: plain (``off``), or under `raysight run` into
    ``server`` (``raysight``; ``untraced``: with --no-tracing)."""
    pid = str(server.proc.pid if server.proc else 0)
    env = without_ray_settings() | {SERVER_PID_ENV: pid, "XDG_STATE_HOME": str(state)}
    if config == "serve-traced":
        env |= TRACED_BY_SERVE
    program = [sys.executable, __file__, "--child", str(seconds), "--concurrency", str(concurrency)]
    if config in ("raysight", "untraced"):
        untraced = ["--no-tracing"] if config == "untraced" else []
        program = [
            sys.executable,
            "-m",
            "raysight",
            "run",
            "--server",
            server.url,
            *untraced,
            "--",
            *program,
            "--recorded",
        ]
    proc = subprocess.run(program, env=env, capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{config} run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith(RESULT)]
    return json.loads(line.removeprefix(RESULT))  # type: ignore[no-any-return]


def throughput(rounds: int, seconds: float, concurrency: int) -> None:
    """Interleaved rounds of each configuration; prints the rates, the CPU a request of each kind of process, and
    raysight's ratio to plain Ray."""
    rates: dict[str, list[float]] = {c: [] for c in CONFIGS}
    cpu: dict[str, list[dict[str, float]]] = {c: [] for c in CONFIGS}
    with tempfile.TemporaryDirectory(prefix="raysight-bench-") as data_dir:
        server = ServerProcess(Path(data_dir) / "data").start()
        try:
            for r in range(1, rounds + 1):
                turn = r % len(CONFIGS)
                for config in CONFIGS[turn:] + CONFIGS[:turn]:  # each first in turn: a round's first run is slower
                    run = measure(config, seconds, concurrency, server, Path(data_dir) / "state")
                    rates[config].append(run["rate"])
                    cpu[config].append(run["cpu_us"])
                print(f"round {r}: " + "  ".join(f"{c} {rates[c][-1]:,.0f}" for c in CONFIGS) + " requests/s")
        finally:
            server.stop()
    medians: dict[str, dict[str, float]] = {}  # configuration → process kind → µs of CPU a request
    for c in CONFIGS:
        print(f"{c:>9}: median {statistics.median(rates[c]):,.0f} requests/s ({concurrency} clients, {rounds} rounds)")
        kinds = dict.fromkeys(kind for run in cpu[c] for kind in run)  # (a process may be missing from a run)
        medians[c] = {kind: statistics.median(run.get(kind, 0.0) for run in cpu[c]) for kind in kinds}
        spent = "  ".join(f"{k} {v:,.0f}" for k, v in medians[c].items())
        print(f"{c:>9}: CPU a request (µs, median of rounds): {spent}  (all {sum(medians[c].values()):,.0f})")
    spent_in_all = {c: sum(by_kind.values()) for c, by_kind in medians.items()}
    # the 2 cores are saturated: the rate a configuration allows is about inversely its CPU a request, a figure far
    # steadier than the rates on a noisy machine
    print(
        "by CPU a request, plain Ray's over each: "
        + "  ".join(f"{c} {spent_in_all['off'] / spent_in_all[c]:.3f}x" for c in CONFIGS[1:])
    )
    # what Ray's own processes spend under `raysight run` (events exported, Serve's spans made and sent, the polls
    # and scrapes answered) bounds the ratio however little raysight's own processes cost
    others = spent_in_all["raysight"] - sum(medians["raysight"].get(kind, 0.0) for kind in OURS)
    print(
        f"by CPU a request, were raysight's server and `raysight run` free (Ray's processes as recorded): "
        f"{spent_in_all['off'] / others:.3f}x"
    )
    ratio = {c: statistics.median(x / o for x, o in zip(rates[c], rates["off"])) for c in CONFIGS[1:]}
    mine = ratio["raysight"]
    met = "met" if mine >= AIM else "not met"
    print(f"raysight recording everything: {mine:.3f}x plain Ray's rate (median of rounds; aim ≥ {AIM}: {met})")
    print(f"raysight recording all but traces (`raysight run --no-tracing`): {ratio['untraced']:.3f}x")
    print(f"Serve tracing every request itself, its spans sent nowhere (no raysight): {ratio['serve-traced']:.3f}x")


def queries(requests: int, repeat: int) -> None:
    with tempfile.TemporaryDirectory() as data:
        store = Store(Path(data))
        try:
            started = time.perf_counter()
            synthesise(store, requests)
            print(f"synthesised {requests:,} requests a session, 2 sessions: {time.perf_counter() - started:.1f}s")
            con = store.reader()
            query = requests_query.RequestQuery(session=SESSIONS[1], min_latency_ms=250, limit=50)
            found = requests_query.serve_requests(con, query)
            assert found["total"] == requests // 1000 and len(found["requests"]) == 50, found["total"]
            every = replace(query, min_latency_ms=None)
            failed = replace(every, status="5xx")
            for name, run in [
                ("serve requests --min-latency 250ms", lambda: requests_query.serve_requests(con, query)),
                ("serve requests --status 5xx", lambda: requests_query.serve_requests(con, failed)),
                ("serve requests (all, newest 50)", lambda: requests_query.serve_requests(con, every)),
                ("serve requests --by route", lambda: requests_query.latencies(con, every, "route")),
            ]:
                print(f"{name}: {timed(run, repeat):.1f} ms (median of {repeat}, warm)")
        finally:
            store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="throughput rounds (default 3; 0 skips)")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds of requests a run (default 10)")
    parser.add_argument("--concurrency", type=int, default=8, help="clients sending at once (default 8)")
    parser.add_argument("--requests", type=int, default=1_000_000, help="requests a session (default 1M; 0 skips)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--child", type=float, metavar="SECONDS", help=argparse.SUPPRESS)
    parser.add_argument("--recorded", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.concurrency, args.recorded)
        return
    if args.rounds:
        throughput(args.rounds, args.seconds, args.concurrency)
    if args.requests:
        queries(args.requests, args.repeat)


if __name__ == "__main__":
    main()
