"""Freshness: how soon raysight shows what it was sent, on an idle server and beside a live Ray.

1. Idle: a `raysight server` subprocess, nothing else posting to it: --batches small batches (one synthesised task
   each, benchmarks/recorded.py) posted one at a time with pauses; for each, from the 200 answer until the API shows
   the task in its end state.
2. Live: a local Ray (`ray.init(num_cpus=2)`, exporting as `raysight run` has it) runs a trickle of tasks, one every
   --every s for --seconds s. Its aggregator posts through a pass-through proxy in this process, which notes when
   each POST arrived and the FINISHED transitions it carried. For each task: Ray's part, from its FINISHED transition
   (the timestamp Ray reports) to the POST carrying it arriving; raysight's part, from that arrival until the API
   (`raysight get tasks ID`) shows it FINISHED; and, beside them, when the driver's `ray.get` returned.
Clocks: every time is this machine's wall clock; the API is polled every POLL_S (what is shown is at most that late).
Run: .venv/bin/python benchmarks/freshness.py [--batches 40] [--seconds 30] [--every 0.5] [--skip-idle] [--skip-live]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import orjson
import ray

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.recorded import body, synth_batches  # noqa: E402 (after the sys.path line)
from raysight import wire  # noqa: E402
from raysight.cli.run import free_port, ray_env  # noqa: E402
from raysight.client import Client  # noqa: E402
from raysight.errors import NotFound  # noqa: E402
from raysight.signals.ray_events.conversions import b64_to_hex  # noqa: E402
from tests.ray_scenarios import JSON, ServerProcess  # noqa: E402

POLL_S = 0.02
DEADLINE_S = 60.0  # for any one task to become queryable
END_STATES = ("FINISHED", "FAILED")


def quantiles(label: str, seconds: list[float]) -> None:
    """Median and p95 (nearest rank) of ``seconds``, in ms."""
    ordered = sorted(seconds)
    p95 = ordered[math.ceil(0.95 * len(ordered)) - 1]
    print(
        f"  {label:<44} median {statistics.median(ordered) * 1e3:7.0f} ms   p95 {p95 * 1e3:7.0f} ms   "
        f"(min {ordered[0] * 1e3:.0f}, max {ordered[-1] * 1e3:.0f}, n={len(ordered)})"
    )


def shown(client: Client, task_id: str, states: tuple[str, ...]) -> bool:
    """Whether the API shows task ``task_id`` (of the newest session) in one of ``states``."""
    try:
        rows = client.get("tasks", task_id)["rows"]
    except NotFound:
        return False
    return any(row["state"] in states for row in rows)


def wait_shown(client: Client, task_id: str, states: tuple[str, ...]) -> float:
    """Poll until the API shows ``task_id`` in one of ``states``; the wall-clock time it first did."""
    deadline = time.monotonic() + DEADLINE_S
    while not shown(client, task_id, states):
        if time.monotonic() > deadline:
            raise TimeoutError(f"task {task_id} not shown {'/'.join(states)} within {DEADLINE_S:.0f} s")
        time.sleep(POLL_S)
    return time.time()


# --- 1. idle server ------------------------------------------------------------------------------------------------


def idle(n_batches: int) -> None:
    print(f"== idle server: {n_batches} batches of one task each, one at a time, ack -> queryable ==")
    lags: list[float] = []
    with tempfile.TemporaryDirectory(prefix="raysight-bench-") as tmp:
        server = ServerProcess(Path(tmp)).start()
        try:
            with httpx.Client(base_url=server.url, timeout=30) as http, server.client() as client:
                for i, (_, texts) in enumerate(synth_batches(n_batches, 1)):
                    task_id = next(
                        str(b64_to_hex(e["taskLifecycleEvent"]["taskId"]))
                        for e in map(orjson.loads, texts)
                        if "taskLifecycleEvent" in e
                    )
                    posted = http.post(wire.RAY_EVENTS, params={"cluster": "idle"}, content=body(texts), headers=JSON)
                    posted.raise_for_status()
                    acknowledged = time.time()
                    lags.append(wait_shown(client, task_id, END_STATES) - acknowledged)
                    time.sleep(1 + 0.1 * (i % 10))  # the server idles between batches: 1-1.9 s
        finally:
            server.stop()
    quantiles("ack -> queryable", lags)


# --- 2. live Ray ---------------------------------------------------------------------------------------------------


class Proxy(BaseHTTPRequestHandler):
    """Passes Ray's POSTs on to raysight and answers with its answer; notes, for each task's FINISHED transition in a
    POST raysight acknowledged, the transition's time (as Ray reports it) and when the POST arrived here."""

    protocol_version = "HTTP/1.1"
    upstream: httpx.Client
    finished: dict[str, tuple[float, float]] = {}  # task ID (hex) -> (Ray's FINISHED time, arrival), first seen
    posts = 0
    lock = threading.Lock()

    def do_POST(self) -> None:
        data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        arrived = time.time()
        with Proxy.lock:
            Proxy.posts += 1
        answer = Proxy.upstream.post(self.path, content=data, headers=JSON)
        if answer.status_code == 200:
            self.note(data, arrived)
        self.send_response(answer.status_code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer.content)))
        self.end_headers()
        self.wfile.write(answer.content)

    @staticmethod
    def note(data: bytes, arrived: float) -> None:
        for event in orjson.loads(data):
            lifecycle = event.get("taskLifecycleEvent") or {}
            for transition in lifecycle.get("stateTransitions", []):
                if transition.get("state") == "FINISHED":
                    at = datetime.fromisoformat(transition["timestamp"]).timestamp()
                    with Proxy.lock:
                        Proxy.finished.setdefault(str(b64_to_hex(lifecycle["taskId"])), (at, arrived))

    def log_message(self, format: str, *args: object) -> None:
        pass


class ProxyServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """Ray's aggregator drops its connection when Ray shuts down: not worth a traceback, unlike anything else."""
        if not isinstance(sys.exc_info()[1], ConnectionResetError):
            super().handle_error(request, client_address)


@ray.remote
def tick(i: int) -> int:
    return i


def trickle(seconds: float, every: float, on_done: Callable[[str, float], None]) -> None:
    """One `tick` task every ``every`` s for ``seconds`` s, each awaited; ``on_done(task ID, ray.get returned)``."""
    started = time.monotonic()
    for i in range(int(seconds / every)):
        time.sleep(max(0.0, started + i * every - time.monotonic()))
        ref = tick.remote(i)
        ray.get(ref)
        on_done(ref.task_id().hex(), time.time())


def folds(http: httpx.Client) -> tuple[int, float]:
    """(groups folded, seconds they took) since the server started, from its /metrics."""
    prefix = "raysight_store_commit_seconds_"
    samples = dict(line.rsplit(" ", 1) for line in http.get(wire.METRICS).text.splitlines() if line.startswith(prefix))
    return int(float(samples[prefix + "count"])), float(samples[prefix + "sum"])


def live(seconds: float, every: float) -> None:
    print(f"== live: a local Ray (2 CPUs) runs one task every {every} s for {seconds:.0f} s ==")
    returned: dict[str, float] = {}
    queryable: dict[str, float] = {}
    pending: list[str] = []
    cond = threading.Condition()
    with tempfile.TemporaryDirectory(prefix="raysight-bench-") as tmp:
        server = ServerProcess(Path(tmp)).start()
        proxy = ProxyServer(("127.0.0.1", free_port()), Proxy)
        Proxy.upstream = httpx.Client(base_url=server.url, timeout=30)
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        proxy_url = f"http://127.0.0.1:{proxy.server_address[1]}"

        def done(task_id: str, at: float) -> None:
            with cond:
                returned[task_id] = at
                pending.append(task_id)
                cond.notify()

        def watch(client: Client, expected: int) -> None:
            """Oldest pending task first: it is in the same or an earlier POST than those after it."""
            while len(queryable) < expected:
                with cond:
                    cond.wait_for(lambda: bool(pending))
                    task_id = pending[0]
                queryable[task_id] = wait_shown(client, task_id, ("FINISHED",))
                with cond:
                    pending.pop(0)

        try:
            # No token auth (Ray 2.60 turns it on when ~/.ray/auth_token exists): raysight on loopback has none.
            os.environ.update({**ray_env(proxy_url, cluster="fresh"), "RAY_AUTH_MODE": "disabled"})
            ray.init(num_cpus=2, log_to_driver=False)
            try:
                with server.client() as client, httpx.Client(base_url=server.url, timeout=30) as http:
                    warm = tick.remote(-1)  # the first task starts a worker; not counted
                    ray.get(warm)
                    wait_shown(client, warm.task_id().hex(), ("FINISHED",))
                    watcher = threading.Thread(target=watch, args=(client, int(seconds / every)), daemon=True)
                    before, posts = folds(http), Proxy.posts
                    watcher.start()
                    trickle(seconds, every, done)
                    watcher.join(DEADLINE_S)
                    if watcher.is_alive():
                        raise TimeoutError("the API did not show every task FINISHED")
                    after, posts = folds(http), Proxy.posts - posts
                    groups, took = after[0] - before[0], after[1] - before[1]
            finally:
                ray.shutdown()
        finally:
            proxy.shutdown()
            proxy.server_close()
            Proxy.upstream.close()
            server.stop()
    tasks = [t for t in queryable if t in Proxy.finished]
    print(
        f"  {len(tasks)} of {len(queryable)} tasks' FINISHED transitions seen in a POST; Ray sent {posts} POSTs, "
        f"raysight folded {groups} groups taking {took / max(groups, 1) * 1e3:.0f} ms each on average"
    )
    quantiles("Ray: FINISHED -> POST arrives at raysight", [Proxy.finished[t][1] - Proxy.finished[t][0] for t in tasks])
    quantiles("raysight: POST arrives -> API shows FINISHED", [queryable[t] - Proxy.finished[t][1] for t in tasks])
    quantiles("total: FINISHED -> API shows it", [queryable[t] - Proxy.finished[t][0] for t in tasks])
    quantiles("(driver: FINISHED -> ray.get returned)", [returned[t] - Proxy.finished[t][0] for t in tasks])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--every", type=float, default=0.5)
    parser.add_argument("--skip-idle", action="store_true")
    parser.add_argument("--skip-live", action="store_true")
    args = parser.parse_args()
    if not args.skip_idle:
        idle(args.batches)
    if not args.skip_live:
        live(args.seconds, args.every)


if __name__ == "__main__":
    main()
