"""Run under `raysight run`: an application's own metrics (`ray.util.metrics`: a Counter, a Gauge and a Histogram,
tagged by item) set by an actor, and tasks run, held until Ray's node exports their final values and raysight has
scraped them since; then writes Ray's own metrics page of the node, and when it was read, to ``argv[1]``."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import httpx
import orjson
import ray
from ray.util.metrics import Counter, Gauge, Histogram

from tests.ray_programs import raysight_server, wait_until_raysight

SALES = [("apple", 3, 5.0), ("pear", 2, 50.0), ("apple", 4, 500.0)]  # item, sold, wait (ms)
STOCK = 100
BOUNDARIES = [10.0, 100.0, 1000.0]
TASKS = 20


@ray.remote
class Shop:
    def __init__(self) -> None:
        self.sold = Counter("shop_sold", description="Items sold.", tag_keys=("item",))
        self.stock = Gauge("shop_stock", description="Items in stock.", tag_keys=("item",))
        self.wait = Histogram("shop_wait_ms", description="Wait.", boundaries=BOUNDARIES, tag_keys=("item",))

    def sell(self, item: str, n: int, wait_ms: float) -> None:
        tags = {"item": item}
        self.sold.inc(n, tags=tags)
        self.stock.set(STOCK - n, tags=tags)
        self.wait.observe(wait_ms, tags=tags)


@ray.remote
def work(i: int) -> int:
    return i


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


def final(samples: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> bool:
    """Ray's node exports the sales' final values (it exports every 10 s)."""
    sold = {item: sum(n for i, n, _ in SALES if i == item) for item, _, _ in SALES}
    return all(total(samples, "ray_shop_sold_total", item=item) == n for item, n in sold.items()) and total(
        samples, "ray_shop_wait_ms_count"
    ) == len(SALES)


def raysight_has(query: str, value: float) -> bool:
    answer = httpx.get(f"{raysight_server()}/api/v1/query", params={"query": query}).json()
    return answer["status"] == "success" and [float(r["value"][1]) for r in answer["data"]["result"]] == [value]


def main() -> None:
    ray.init(num_cpus=2)
    shop = Shop.remote()  # type: ignore[attr-defined]
    ray.get([shop.sell.remote(item, n, wait) for item, n, wait in SALES])
    ray.get([work.remote(i) for i in range(TASKS)])
    metrics = f"http://127.0.0.1:{ray.nodes()[0]['MetricsExportPort']}/metrics"
    deadline = time.monotonic() + 90
    while not final(exported(text := httpx.get(metrics, timeout=5).text)):
        if time.monotonic() > deadline:
            raise TimeoutError("Ray's node did not export the application's final metrics within 90 s")
        time.sleep(1)
    read_ms = time.time_ns() // 1_000_000
    apples = total(exported(text), "ray_shop_sold_total", item="apple")
    wait_until_raysight(
        lambda _: raysight_has('sum(ray_shop_sold_total{item="apple"})', apples), "the final sales, scraped", 30
    )
    Path(sys.argv[1]).write_bytes(orjson.dumps({"read_ms": read_ms, "text": text}))
    ray.shutdown()


if __name__ == "__main__":
    main()
