"""Run under `raysight run`: an application's own metrics (`ray.util.metrics`: a Counter, a Gauge and a Histogram,
tagged by item) set by an actor, and a Ray Serve application of two deployments (an ingress calling the other
through a handle, whose replica tracks its allocations with memray as RAY_SERVE_ENABLE_MEMORY_PROFILING has Serve
do); then tasks run and HTTP requests are served at a steady pace for ``ACTIVE_S`` (while raysight and
a Prometheus scrape the cluster: Serve's own metrics too), and three requests with chosen IDs (``CHOSEN``: one slow,
one failing) are sent, until Ray's node
exports the final values and raysight has scraped them since; then writes Ray's own metrics page of the node, and
when it was read, to ``argv[1]`` (with the node's ID, the pids of the driver and the actor, and what Ray's own `serve
status` and `serve config` printed at the end of the active rounds, and when, and the status of each chosen
request)."""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import ray
from click.testing import CliRunner
from ray import serve
from ray.util.metrics import Counter, Gauge, Histogram

from tests.ray_programs import raysight_server, wait_until_raysight

SALES = [("apple", 3, 5.0), ("pear", 2, 50.0), ("apple", 4, 500.0)]  # item, sold, wait (ms)
STOCK = 100
BOUNDARIES = [10.0, 100.0, 1000.0]
TASKS = 20  # a round
REQUESTS = 5  # to the Serve application, a round
ACTIVE_S = 90  # rounds of tasks, one a second


@ray.remote
class Shop:
    def __init__(self) -> None:
        self.sold = Counter("shop_sold", description="Items sold.", tag_keys=("item",))
        self.stock = Gauge("shop_stock", description="Items in stock.", tag_keys=("item",))
        self.wait = Histogram("shop_wait_ms", description="Wait.", boundaries=BOUNDARIES, tag_keys=("item",))

        self.in_stock: dict[str, float] = {}

    def pid(self) -> int:
        return os.getpid()

    def sell(self, item: str, n: int, wait_ms: float) -> None:
        tags = {"item": item}
        self.sold.inc(n, tags=tags)
        self.in_stock[item] = STOCK - n
        self.stock.set(STOCK - n, tags=tags)
        self.wait.observe(wait_ms, tags=tags)

    def report(self) -> None:
        """Set the stock again (Ray exports a gauge only while it is set)."""
        for item, left in self.in_stock.items():
            self.stock.set(left, tags={"item": item})


@ray.remote
def work(i: int) -> int:
    return i


@ray.remote(num_cpus=0)
def nap(seconds: float) -> None:
    time.sleep(seconds)


# Requests sent last, each with its own ID (``X-Request-ID``): a quick one, a slow one, one that fails in Scorer
CHOSEN = {"raysight-quick": "", "raysight-slow": "?sleep=0.4", "raysight-fails": "?fail=1"}
MEMORY_PROFILING = "RAY_SERVE_ENABLE_MEMORY_PROFILING"
REMEMBERED = 64 * 1024  # bytes Greeter keeps of each request
CRASH = "raysight-crash"  # sent after them: its Scorer replica exits (``os._exit(1)``), and Serve replaces it


# (a health check each second: Serve finds its crashed replica within a second or so, not ten)
@serve.deployment(ray_actor_options={"num_cpus": 0}, health_check_period_s=1)
class Scorer:
    async def __call__(self, sleep_s: float, fail: bool, crash: bool = False) -> str:
        if crash:
            os._exit(1)
        if fail:
            raise ValueError("no score")
        if sleep_s:  # in a task of its own: its span nests under the replica's
            await nap.remote(sleep_s)
        return "scored"


# (its replica tracks its allocations with memray, as Serve's actors do where RAY_SERVE_ENABLE_MEMORY_PROFILING=1)
@serve.deployment(ray_actor_options={"num_cpus": 0, "runtime_env": {"env_vars": {MEMORY_PROFILING: "1"}}})
class Greeter:
    """The ingress: calls Scorer through a handle (``?sleep=S``: it sleeps so long first; ``?fail=1``: it fails;
    ``?crash=1``: its process exits); it remembers a little of each request (what its memray capture shows)."""

    def __init__(self, scorer: Any) -> None:
        self.scorer = scorer
        self.remembered: list[bytearray] = []

    def remember(self) -> None:
        self.remembered.append(bytearray(REMEMBERED))  # what Greeter's memray capture shows at its peak

    async def __call__(self, request: Any) -> str:
        self.remember()
        params = request.query_params
        await self.scorer.remote(float(params.get("sleep", 0)), bool(params.get("fail")), bool(params.get("crash")))
        return "hello"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def exported(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Each sample of a metrics page: (name, labels) → value."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def total(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls)


def final(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], tasks: int) -> bool:
    """Ray's node exports the final values (it exports every 10 s): the sales, and ``tasks`` tasks run, none left."""
    sold = {item: sum(n for i, n, _ in SALES if i == item) for item, _, _ in SALES}
    work = [
        (dict(labels)["State"], v)
        for (n, labels), v in samples.items()
        if n == "ray_tasks" and ("Name", "work") in labels
    ]
    return (
        all(total(samples, "ray_shop_sold_total", item=item) == n for item, n in sold.items())
        and total(samples, "ray_shop_wait_ms_count") == len(SALES)
        and {dict(labels).get("item") for name, labels in samples if name == "ray_shop_stock"} == set(sold)
        and sum(v for state, v in work if state != "FINISHED") == 0
        and sum(v for state, v in work if state == "FINISHED") >= tasks
    )


def raysight_has(query: str, value: float) -> bool:
    answer = httpx.get(f"{raysight_server()}/api/v1/query", params={"query": query}).json()
    return answer["status"] == "success" and [float(r["value"][1]) for r in answer["data"]["result"]] == [value]


def rays_serve(dashboard: str) -> dict[str, str]:
    """What Ray's own `serve status` and `serve config` print, asking the dashboard."""
    from ray.serve.scripts import config, status

    printed = {
        name: CliRunner().invoke(command, ["-a", dashboard])
        for name, command in (("status", status), ("config", config))
    }
    assert all(p.exit_code == 0 for p in printed.values()), {n: p.output for n, p in printed.items()}
    return {f"serve_{name}": p.stdout for name, p in printed.items()}


def scorers(dashboard: str) -> tuple[str, set[str]]:
    """Scorer's status and its RUNNING replicas, as Ray's dashboard gives them to `serve status`."""
    from ray.dashboard.modules.serve.sdk import ServeSubmissionClient

    scorer = ServeSubmissionClient(dashboard).get_serve_details()["applications"]["greeter"]["deployments"]["Scorer"]
    return scorer["status"], {r["replica_id"] for r in scorer["replicas"] if r["state"] == "RUNNING"}


def crash_a_replica(http: httpx.Client, port: int, dashboard: str) -> tuple[int, str, str]:
    """Send ``CRASH``, whose Scorer replica exits, and wait until Serve has replaced it (Scorer HEALTHY, a replica
    RUNNING that is not the one that crashed): the request's status code, the crashed replica's ID and its
    replacement's."""
    _, (crashed,) = scorers(dashboard)
    status = http.get(f"http://127.0.0.1:{port}/greet?crash=1", headers={"X-Request-ID": CRASH}).status_code
    deadline = time.monotonic() + 60
    while (now := scorers(dashboard))[0] != "HEALTHY" or not now[1] or crashed in now[1]:
        if time.monotonic() > deadline:
            raise TimeoutError(f"Serve did not replace Scorer's crashed replica {crashed} within 60 s: {now}")
        time.sleep(0.2)
    (replacement,) = now[1]
    return status, crashed, replacement


def main() -> None:
    dashboard = f"http://{ray.init(num_cpus=2).dashboard_url}"
    shop = Shop.remote()  # type: ignore[attr-defined]
    ray.get([shop.sell.remote(item, n, wait) for item, n, wait in SALES])
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(Greeter.bind(Scorer.bind()), name="greeter", route_prefix="/greet")
    started, active_from_ms, tasks = time.monotonic(), time.time_ns() // 1_000_000, 0
    with httpx.Client(timeout=10) as http:
        while time.monotonic() - started < ACTIVE_S:
            ray.get([work.remote(i) for i in range(TASKS)] + [shop.report.remote()])
            tasks += TASKS
            for _ in range(REQUESTS):
                http.get(f"http://127.0.0.1:{port}/greet").raise_for_status()
            time.sleep(1)  # (the workload's pace)
        answered = {
            request_id: http.get(f"http://127.0.0.1:{port}/greet{query}", headers={"X-Request-ID": request_id})
            for request_id, query in CHOSEN.items()
        }
        serve_read_ms, serve_printed = time.time_ns() // 1_000_000, rays_serve(dashboard)
        crash_status, crashed, replacement = crash_a_replica(http, port, dashboard)
    metrics = f"http://127.0.0.1:{ray.nodes()[0]['MetricsExportPort']}/metrics"
    deadline = time.monotonic() + 90
    while not final(exported(text := httpx.get(metrics, timeout=5).text), tasks):
        if time.monotonic() > deadline:
            raise TimeoutError("Ray's node did not export the application's final metrics within 90 s")
        time.sleep(1)
    read_ms = time.time_ns() // 1_000_000
    samples = exported(text)
    apples, finished = (
        total(samples, "ray_shop_sold_total", item="apple"),
        total(samples, "ray_tasks", Name="work", State="FINISHED"),
    )
    wait_until_raysight(
        lambda _: (
            raysight_has('sum(ray_shop_sold_total{item="apple"})', apples)
            and raysight_has('sum(ray_tasks{Name="work",State="FINISHED"})', finished)
        ),
        "the final values, scraped",
        30,
    )
    wait_until_raysight(  # (its poller saw the replacement run: `serve history` and `serve replicas` show it)
        lambda client: any(
            (t["replica"], t["to"]) == (replacement, "RUNNING")
            for t in client.serve_history(app="greeter")["transitions"]
        ),
        "Scorer's replacement replica, polled",
        30,
    )
    written = {
        "read_ms": read_ms,
        "text": text,
        "active_from_ms": active_from_ms,
        "node_id": ray.get_runtime_context().get_node_id(),
        "shop_pid": ray.get(shop.pid.remote()),
        "driver_pid": os.getpid(),
        "serve_read_ms": serve_read_ms,
        "serve_answered": {
            **{request_id: answer.status_code for request_id, answer in answered.items()},
            CRASH: crash_status,
        },
        "serve_crashed": {"replica": crashed, "replacement": replacement},
        **serve_printed,
    }
    Path(sys.argv[1]).write_bytes(orjson.dumps(written))
    serve.shutdown()
    ray.shutdown()


if __name__ == "__main__":
    main()
