"""Latency of a filtered task list (`state=FAILED`, the query `ray list tasks` sends): raysight vs Ray's dashboard.

1. Live: a `raysight server` subprocess and a local Ray cluster (started here, exporting its events to it) run
   N tasks, 9 in 10 `ok` and 1 in 10 `flaky` (raises). Once both raysight and Ray's state API hold them, the same
   request goes to Ray's dashboard and to raysight, interleaved (warm, median of --requests), then the CLIs'
   wall times (`ray list tasks` against either, `raysight list tasks`).
2. Synthesised: N tasks from per-task event templates of the recorded Ray session (tests/fixtures) with rewritten
   task and event IDs, POSTed to a `raysight server` subprocess (1,000 events a POST, as Ray's aggregators send,
   on one connection that waits while more than two fold groups are acknowledged but not folded: the writer holds
   those bodies in memory, up to 512 MB when folding falls behind) until all is folded, into benchmarks/.cache/
   (kept: reruns skip the build). Then the footprint: the store's bytes per task on disk after a CHECKPOINT (raw
   events included) and the server's peak resident memory (VmHWM) while building and, restarted on the same data,
   while serving the timed requests on /api/v0/tasks, /api/raysight/tasks and the CLIs.
Run: .venv/bin/python benchmarks/list_latency.py [--tasks-live N] [--tasks-synth N] [--requests N]
     [--skip-live] [--skip-synth]        (2-core VM, noisy: compare medians)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import httpx
import orjson
import ray

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.recorded import body, synth_batches  # noqa: E402 (after the sys.path line)
from raysight import wire  # noqa: E402
from raysight.cli.run import free_port, ray_env, wait_until_quiet  # noqa: E402
from raysight.client import Client  # noqa: E402
from raysight.store import schema  # noqa: E402
from raysight.store.store import DB_FILE, Store  # noqa: E402
from raysight.store.writer import MAX_GROUP_BYTES  # noqa: E402
from tests.ray_scenarios import JSON, ServerProcess, peak_rss_mb  # noqa: E402

CACHE = ROOT / "benchmarks" / ".cache"
PY = sys.executable
# Exactly what `ray list tasks --filter state=FAILED --limit 100` sends (shared/ray/state-http-contract.md §2.1).
RAY_QUERY = [
    ("limit", "100"),
    ("timeout", "24"),
    ("detail", "False"),
    ("filter_keys", "state"),
    ("filter_predicates", "="),
    ("filter_values", "FAILED"),
    ("exclude_driver", "True"),
    ("server_timeout_multiplier", "0.8"),
]
OWN_QUERY = [("filter", "state=FAILED"), ("limit", "100")]
BATCH_EVENTS = 1000  # events a POST, as Ray's aggregators send them
PACE_BYTES = 2 * MAX_GROUP_BYTES  # the builder waits while more than this is acknowledged but not folded
CLI_RUNS = 5


def ms(seconds: list[float]) -> str:
    low, mid, high = (f(seconds) * 1e3 for f in (min, statistics.median, max))
    return f"median {mid:8.1f} ms (min {low:.1f}, max {high:.1f})"


def counts(body: dict[str, Any]) -> tuple[int, int]:
    """(rows returned, total matches) from a Ray envelope or raysight's own list answer."""
    data = body["data"]["result"] if "data" in body else body
    rows = data["result"] if "result" in data else data["rows"]
    return len(rows), data.get("num_filtered", data["total"])


def time_requests(targets: dict[str, str], n: int) -> dict[str, list[float]]:
    """GET each target URL n times, interleaved, after two warm-up rounds; prints rows and totals per target."""
    times: dict[str, list[float]] = {name: [] for name in targets}
    with httpx.Client(timeout=60) as http:
        for name, url in targets.items():
            for _ in range(2):
                body = http.get(url).raise_for_status().json()
            rows, total = counts(body)
            extra = f", total {body['data']['result']['total']}" if "data" in body else ""
            print(f"  {name:<34} {rows} rows of {total} matching{extra}")
        for _ in range(n):
            for name, url in targets.items():
                t0 = time.perf_counter()
                http.get(url).raise_for_status()
                times[name].append(time.perf_counter() - t0)
    for name, seconds in times.items():
        print(f"  {name:<34} {ms(seconds)}  [{n} requests]")
    return times


def time_cli(label: str, argv: list[str]) -> list[float]:
    """Wall time of CLI_RUNS runs; without RAY_ADDRESS, which would override `ray list --address`."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "RAYSIGHT_SERVER")}
    times = []
    for _ in range(CLI_RUNS):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    print(f"  {label:<34} {ms(times)}  [{CLI_RUNS} runs]")
    return times


def ratio(label: str, slow: list[float], fast: list[float]) -> None:
    print(f"  {label:<34} {statistics.median(slow) / statistics.median(fast):6.1f}x")


RAY_TASKS = wire.path(wire.RAY_STATE, resource="tasks")  # Ray's state API, as raysight answers it too
OWN_TASKS = wire.path(wire.RESOURCE, resource="tasks")


def url_with(base: str, path: str, query: list[tuple[str, str]]) -> str:
    return str(httpx.URL(base + path, params=query))


def ray_list(address: str) -> list[str]:
    return [
        PY,
        "-m",
        "ray.scripts.scripts",
        "list",
        "tasks",
        "--filter",
        "state=FAILED",
        "--limit",
        "100",
        "--address",
        address,
    ]


def raysight_list(server: str) -> list[str]:
    return [PY, "-m", "raysight", "list", "tasks", "--filter", "state=FAILED", "--limit", "100", "--server", server]


def wait_for(what: str, done: Callable[[], bool], timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached in {timeout_s:.0f} s")
        time.sleep(1)


@ray.remote
def ok(i: int) -> int:
    return i


@ray.remote(max_retries=0)
def flaky(i: int) -> int:
    raise ValueError(f"flaky {i}")


def run_tasks(n_tasks: int) -> None:
    """Task i is `flaky` when i % 10 == 9, else `ok`; returns when all are done."""
    t0 = time.perf_counter()
    refs = [flaky.remote(i) if i % 10 == 9 else ok.remote(i) for i in range(n_tasks)]
    ray.wait(refs, num_returns=len(refs), timeout=None)
    for ref in refs[9::10]:
        with contextlib.suppress(ray.exceptions.RayTaskError):
            ray.get(ref)
    print(f"  ran {n_tasks:,} tasks in {time.perf_counter() - t0:.1f} s")


def live(n_tasks: int, n_requests: int) -> None:
    print(f"== live: {n_tasks:,} tasks on a local Ray cluster, Ray's dashboard vs raysight ==")
    with tempfile.TemporaryDirectory(prefix="raysight-bench-") as tmp:
        server = ServerProcess(Path(tmp))
        try:
            server.start()
            # No token auth (Ray 2.60 turns it on when ~/.ray/auth_token exists): raysight on loopback has none.
            os.environ.update({**ray_env(server.url, cluster="bench10k"), "RAY_AUTH_MODE": "disabled"})
            context = ray.init(num_cpus=2, include_dashboard=True, dashboard_port=free_port(), log_to_driver=False)
            try:
                dashboard = f"http://{context.dashboard_url}"
                run_tasks(n_tasks)
                failed = n_tasks // 10
                ray_total = url_with(dashboard, RAY_TASKS, [("limit", "1"), ("exclude_driver", "True")])
                own_failed = url_with(server.url, OWN_TASKS, [*OWN_QUERY[:1], ("limit", "0")])
                with Client(server.url) as client, httpx.Client(timeout=60) as http:
                    wait_for("raysight: every failed task", lambda: http.get(own_failed).json()["total"] >= failed)
                    wait_until_quiet(client)
                    wait_for(
                        "Ray's state API: every task",
                        lambda: http.get(ray_total).json()["data"]["result"]["total"] >= n_tasks,
                    )
                targets = {
                    "Ray dashboard /api/v0/tasks": url_with(dashboard, RAY_TASKS, RAY_QUERY),
                    "raysight /api/v0/tasks": url_with(server.url, RAY_TASKS, RAY_QUERY),
                    "raysight /api/raysight/tasks": url_with(server.url, OWN_TASKS, OWN_QUERY),
                }
                http_times = time_requests(targets, n_requests)
                ray_cli = time_cli("ray list --address <Ray dashboard>", ray_list(dashboard))
                ray_cli_raysight = time_cli("ray list --address <raysight>", ray_list(server.url))
                raysight_cli = time_cli("raysight list", raysight_list(server.url))
                print("  ratios (Ray dashboard / raysight, medians):")
                ratio(
                    "HTTP /api/v0/tasks",
                    http_times["Ray dashboard /api/v0/tasks"],
                    http_times["raysight /api/v0/tasks"],
                )
                ratio("ray list --address", ray_cli, ray_cli_raysight)
                ratio("ray list vs raysight list", ray_cli, raysight_cli)
                time.sleep(2)
            finally:
                ray.shutdown()
        finally:
            server.stop()


# --- synthesised session ---------------------------------------------------------------------------------------


def post_paced(client: Client, http: httpx.Client, url: str, data: bytes) -> None:
    """POST one body once the server's unfolded backlog is under PACE_BYTES, retrying 503s as Ray would."""
    while client.ingest_backlog()["bytes"] > PACE_BYTES:
        time.sleep(0.05)
    while (status := http.post(url, content=data, headers=JSON).status_code) == 503:
        time.sleep(0.1)
    if status != 200:
        raise SystemExit(f"ingest answered {status}")


def build(data_dir: Path, n_tasks: int) -> dict[str, float]:
    """POST the synthesised session to a `raysight server` on ``data_dir`` until it is all folded; returns what it
    took: seconds, the server's peak RSS, and the store's bytes after a CHECKPOINT."""
    shutil.rmtree(data_dir, ignore_errors=True)
    server = ServerProcess(data_dir).start()
    url = url_with(server.url, wire.RAY_EVENTS, [("cluster", "bench1m")])
    events, t0 = 0, time.perf_counter()
    try:
        with server.client() as client, httpx.Client(timeout=60) as http:
            for done, texts in synth_batches(n_tasks, BATCH_EVENTS):
                post_paced(client, http, url, body(texts))
                events += len(texts)
                elapsed = time.perf_counter() - t0
                print(
                    f"\r  posted {done:>9,}/{n_tasks:,} tasks, {events:>10,} events, {elapsed:6.0f} s, "
                    f"{events / elapsed:7,.0f} events/s",
                    end="",
                    flush=True,
                )
            wait_for("the server: every batch folded", lambda: client.ingest_backlog()["batches"] == 0, 3600)
        seconds = time.perf_counter() - t0
        rss = peak_rss_mb(server.proc.pid)
    finally:
        server.stop()
    print()
    with duckdb.connect(str(data_dir / DB_FILE)) as con:
        con.execute("CHECKPOINT")  # the server checkpointed as it closed: nothing should be left in a WAL
        used, block = con.execute("SELECT used_blocks, block_size FROM pragma_database_size()").fetchone()
    stats = {
        "tasks": n_tasks,
        "events": events,
        "seconds": seconds,
        "build_rss_mb": rss,
        "store_bytes": sum(p.stat().st_size for p in data_dir.glob(f"{DB_FILE}*")),
        "used_bytes": used * block,  # the rest of the file: blocks freed by checkpoints, reused by later writes
    }
    (data_dir / "built.json").write_bytes(orjson.dumps(stats))
    return stats


def session_copy(n_tasks: int, prefix: str) -> Path:
    """A data dir of its own holding the synthesised session of ``n_tasks`` (built into the cache the first time; an
    older schema's will do), upgraded to the current schema: a benchmark may rewrite it."""
    built = sorted(CACHE.glob(f"tasks-{n_tasks}-schema*/built.json"), key=lambda p: p.stat().st_mtime)
    source = built[-1].parent if built else CACHE / f"tasks-{n_tasks}-schema{schema.SCHEMA_VERSION}"
    if not built:
        print(f"building the synthesised session of {n_tasks:,} tasks into {source.relative_to(ROOT)} …")
        build(source, n_tasks)
    target = Path(tempfile.mkdtemp(prefix=prefix))
    shutil.copy2(source / DB_FILE, target / DB_FILE)
    Store(target).close()  # the current schema
    return target


def synth(n_tasks: int, n_requests: int) -> None:
    print(f"== synthesised: {n_tasks:,} tasks, raysight alone ==")
    data_dir = CACHE / f"tasks-{n_tasks}-schema{schema.SCHEMA_VERSION}"  # built anew for each schema version
    marker = data_dir / "built.json"
    if marker.exists():
        stats = orjson.loads(marker.read_bytes())
        print(f"  cached in {data_dir.relative_to(ROOT)}", end="")
    else:
        stats = build(data_dir, n_tasks)
        print(f"  built in {data_dir.relative_to(ROOT)}", end="")
    print(
        f": {stats['events']:,} events in {stats['seconds']:.0f} s ({stats['events'] / stats['seconds']:,.0f} "
        f"events/s over HTTP until folded, {BATCH_EVENTS:,} a POST)"
    )
    server = ServerProcess(data_dir, start_timeout_s=120)  # a large store may replay its WAL first
    try:
        server.start()
        time_requests(
            {
                "raysight /api/v0/tasks": url_with(server.url, RAY_TASKS, RAY_QUERY),
                "raysight /api/raysight/tasks": url_with(server.url, OWN_TASKS, OWN_QUERY),
            },
            n_requests,
        )
        time_cli("ray list --address <raysight>", ray_list(server.url))
        time_cli("raysight list", raysight_list(server.url))
        serving_rss = peak_rss_mb(server.proc.pid)
    finally:
        server.stop()
    print("  footprint:")
    print(
        f"  {'store on disk, raw events included':<34} {stats['store_bytes'] / stats['tasks']:,.0f} bytes/task "
        f"({stats['store_bytes'] / 1e9:.2f} GB; blocks in use {stats['used_bytes'] / stats['tasks']:,.0f} "
        "bytes/task, the rest free for later writes)"
    )
    print(f"  {'server peak RSS, building':<34} {stats['build_rss_mb']:,.0f} MB")
    print(f"  {'server peak RSS, serving':<34} {serving_rss:,.0f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks-live", type=int, default=10_000)
    parser.add_argument("--tasks-synth", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--skip-live", action="store_true")
    parser.add_argument("--skip-synth", action="store_true")
    args = parser.parse_args()
    if not args.skip_live:
        live(args.tasks_live, args.requests)
    if not args.skip_synth:
        synth(args.tasks_synth, args.requests)


if __name__ == "__main__":
    main()
