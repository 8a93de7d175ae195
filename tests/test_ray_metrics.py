"""Ray's metrics as `raysight run` scraped them from a real cluster (tests/ray_programs/app_metrics.py: an
application's Counter, Gauge and Histogram tagged by item, and tasks), answered by a restarted server after the cluster
is gone through Prometheus's query API: the same series and values Ray's own endpoint showed; and every panel of the
Grafana dashboards Ray generates (default, Serve) evaluates, instant and range."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.ray_programs.app_metrics import TASKS, exported
from tests.ray_scenarios import replayed

pytestmark = pytest.mark.ray
PAGE = "app-metrics-page.json"
ADDED = ("instance", "job")  # the target's labels, which Prometheus adds to what it scrapes


@pytest.fixture(scope="module")
def metered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, Any]]]:
    """The URL of a server started after the run, and Ray's own metrics page as the program read it."""
    out = tmp_path_factory.getbasetemp() / PAGE
    with replayed(tmp_path_factory.mktemp("store"), "metered", "-m", "tests.ray_programs.app_metrics", str(out)) as s:
        yield s.url, orjson.loads(out.read_bytes())


def last_values(url: str, query: str, read_ms: int) -> dict[frozenset[tuple[str, str]], float]:
    """Each series of ``query`` (without the target's labels) → its last value in the minute after Ray's page was
    read (raysight scraped the final values in it)."""
    params = {"query": query, "start": read_ms / 1000, "end": read_ms / 1000 + 60, "step": "1"}
    answer = httpx.get(f"{url}/api/v1/query_range", params=params).json()
    assert answer["status"] == "success", answer
    return {
        frozenset((k, v) for k, v in r["metric"].items() if k not in ADDED): float(r["values"][-1][1])
        for r in answer["data"]["result"]
    }


def rays(page: dict[str, Any], name: str) -> dict[frozenset[tuple[str, str]], float]:
    """Ray's page's series of ``name`` as Prometheus keeps them: a label of empty value is no label."""
    return {
        frozenset((k, v) for k, v in labels if v) | {("__name__", n)}: value
        for (n, labels), value in exported(page["text"]).items()
        if n == name
    }


@pytest.mark.parametrize(
    "name",
    [
        "ray_shop_sold_total",
        "ray_shop_stock",
        "ray_shop_wait_ms_bucket",
        "ray_shop_wait_ms_sum",
        "ray_shop_wait_ms_count",
    ],
)
def test_the_applications_metrics_are_what_ray_exported(metered: tuple[str, dict[str, Any]], name: str) -> None:
    url, page = metered
    expected = rays(page, name)
    assert expected and {dict(k).get("item") for k in expected} == {"apple", "pear"}
    assert last_values(url, name, page["read_ms"]) == expected


def test_the_nodes_stats_and_the_tasks_by_state(metered: tuple[str, dict[str, Any]]) -> None:
    url, page = metered
    for name in ("ray_node_cpu_count", "ray_node_mem_total"):
        (value,) = last_values(url, name, page["read_ms"]).values()
        assert value == sum(rays(page, name).values()) and value > 0, name
    by_state = last_values(url, 'sum by (State) (ray_tasks{Name="work"})', page["read_ms"])
    expected: dict[str, float] = {}
    for labels, value in rays(page, "ray_tasks").items():
        if dict(labels).get("Name") == "work":
            expected[dict(labels)["State"]] = expected.get(dict(labels)["State"], 0) + value
    assert {dict(k)["State"]: v for k, v in by_state.items()} == expected and expected.get("FINISHED", 0) >= TASKS


def test_the_node_was_scraped_every_five_seconds(metered: tuple[str, dict[str, Any]]) -> None:
    url, page = metered
    params = {
        "query": "timestamp(ray_node_cpu_count)",
        "start": page["read_ms"] / 1000 - 60,
        "end": page["read_ms"] / 1000 + 60,
        "step": "1",
    }
    (series,) = httpx.get(f"{url}/api/v1/query_range", params=params).json()["data"]["result"]
    scraped = sorted({float(v) for _, v in series["values"]})
    gaps = [b - a for a, b in zip(scraped, scraped[1:])]
    assert len(scraped) >= 2 and all(4 <= gap <= 6.5 for gap in gaps), scraped


def dashboard_expressions() -> list[str]:
    """Every panel expression of the default and Serve dashboards Ray generates for Grafana, its variables set to
    Grafana's "All" (``.*``)."""
    from ray.dashboard.modules.metrics.grafana_dashboard_factory import (
        generate_default_grafana_dashboard,
        generate_serve_grafana_dashboard,
    )

    found = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            found.extend(target["expr"] for target in panel.get("targets", []))
            walk(panel.get("panels", []))

    for generate in (generate_default_grafana_dashboard, generate_serve_grafana_dashboard):
        walk(json.loads(generate()[0])["panels"])
    return [re.sub(r"\$\w+", ".*", expr) for expr in found]


def test_every_panel_of_rays_dashboards_evaluates(metered: tuple[str, dict[str, Any]]) -> None:
    url, page = metered
    expressions = dashboard_expressions()
    assert len(expressions) > 100
    end = page["read_ms"] / 1000 + 30
    answered = 0
    for expr in expressions:
        for path, params in (
            ("query", {"query": expr, "time": end}),
            ("query_range", {"query": expr, "start": end - 120, "end": end, "step": "15"}),
        ):
            answer = httpx.get(f"{url}/api/v1/{path}", params=params).json()
            assert answer["status"] == "success", (expr, answer)
            answered += bool(answer["data"]["result"])
    assert answered > len(expressions) / 2  # (the Serve panels find no Serve here)
