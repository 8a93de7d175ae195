"""Ray's metrics as `raysight run` scraped them from a real cluster (tests/ray_programs/app_metrics.py: an
application's Counter, Gauge and Histogram tagged by item, and 90 s of tasks), answered by a restarted server after the
cluster is gone through Prometheus's query API: the same series and values Ray's own endpoint showed; and every panel
of the Grafana dashboards Ray generates (default, Serve, Serve deployment, Data, Train) answers as a real Prometheus
(Debian's 2.42) that scraped the same cluster answers, instant and range."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import memray
import orjson
import pytest
from click.testing import CliRunner

from raysight import Client, flame
from raysight.cli import main
from raysight.cli.run import free_port
from tests import test_ui
from tests.ray_programs import app_metrics
from tests.ray_programs.app_metrics import CHOSEN, CRASH, TASKS, exported
from tests.ray_scenarios import replayed

pytestmark = pytest.mark.ray
PAGE = "app-metrics-page.json"
PROGRAM = Path(app_metrics.__file__)
browser, watched = test_ui.browser, test_ui.watched  # (the dashboard's fixtures, for its test here)
ADDED = ("instance", "job", "NodeId")  # the target's labels, which Prometheus adds (and raysight: the node's ID)


PROMETHEUS_CONFIG = """
global: {scrape_interval: 5s, scrape_timeout: 4s, evaluation_interval: 5s}
scrape_configs:
  - job_name: ray
    file_sd_configs: [{files: ["%s"], refresh_interval: 5s}]
"""


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Debian's Prometheus, on a data dir and port of its own, scraping every 5 s what Ray lists for Prometheus (the
    service-discovery file of the latest session under /tmp/ray, where the test's cluster runs)."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("Prometheus is not installed: ./dev.sh test installs Debian's (apt-get install prometheus)")
    home = tmp_path_factory.mktemp("prometheus")
    (home / "prometheus.yml").write_text(PROMETHEUS_CONFIG % "/tmp/ray/prom_metrics_service_discovery.json")
    url = f"http://127.0.0.1:{free_port()}"
    command = [
        binary,
        f"--config.file={home / 'prometheus.yml'}",
        f"--storage.tsdb.path={home / 'data'}",
        f"--web.listen-address={url.removeprefix('http://')}",
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=(home / "prometheus.log").open("wb"))
    try:
        deadline = time.monotonic() + 60
        while not _ready(url):
            assert process.poll() is None and time.monotonic() < deadline, (home / "prometheus.log").read_text()
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=60)


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/-/ready", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="module")
def metered(prometheus: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, Any]]]:
    """The URL of a server started after the run, and Ray's own metrics page as the program read it (a Prometheus
    scraping the same cluster all the while)."""
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


def series(url: str, match: str) -> list[dict[str, str]]:
    answer = httpx.get(f"{url}/api/v1/series", params={"match[]": match}).json()
    assert answer["status"] == "success", answer
    return answer["data"]  # type: ignore[no-any-return]


def test_a_nodes_series_carry_its_id_which_rays_node_metrics_lack(metered: tuple[str, dict[str, Any]]) -> None:
    url, page = metered
    assert rays(page, "ray_node_cpu_count") and all("NodeId" not in dict(k) for k in rays(page, "ray_node_cpu_count"))
    assert {s.get("NodeId") for s in series(url, '{__name__=~"ray_node_.*"}')} == {page["node_id"]}


def test_each_ray_process_has_its_own_stats_keyed_to_its_worker(metered: tuple[str, dict[str, Any]]) -> None:
    """Ray sums its workers by title (``ray_component_*{pid=""}``); raysight reads each process, labelled with its
    pid and worker: the actor's worker, the driver's, the raylet and the GCS, all on the one node."""
    url, page = metered
    processes = series(url, "raysight_process_cpu_seconds_total")
    by_pid = {int(s["pid"]): s for s in processes}
    assert {s["NodeId"] for s in processes} == {page["node_id"]} and {s["job"] for s in processes} == {"raysight"}
    assert {"raylet", "gcs_server", "ray::DashboardAgent", "ray::RuntimeEnvAgent"} <= {
        s["Component"] for s in processes
    }
    with Client(url) as client:
        workers = {w["pid"]: w["worker_id"] for w in client.list("workers", limit=None)["rows"]}
    shop, driver = by_pid[page["shop_pid"]], by_pid[page["driver_pid"]]
    assert shop["Component"].startswith("ray::Shop") and shop["WorkerId"] == workers[page["shop_pid"]]
    assert driver["WorkerId"] == workers[page["driver_pid"]]
    assert {s["WorkerId"] for s in processes if "WorkerId" in s} <= set(workers.values())
    read_at = page["read_ms"] / 1000
    for name, least in (("raysight_process_resident_memory_bytes", 20e6), ("raysight_process_threads", 2)):
        answer = httpx.get(
            f"{url}/api/v1/query", params={"query": f'{name}{{pid="{page["shop_pid"]}"}}', "time": read_at}
        ).json()
        (value,) = [float(r["value"][1]) for r in answer["data"]["result"]]
        assert value >= least, (name, value)


def test_metrics_top_shows_the_busiest_nodes_workers_and_actors_with_what_ran_in_them(
    metered: tuple[str, dict[str, Any]],
) -> None:
    url, page = metered
    read_at = datetime.fromtimestamp(page["read_ms"] / 1000, tz=UTC).isoformat()
    shown = CliRunner().invoke(main, ["metrics", "top", "--at", read_at, "--server", url, "--format", "json"])
    assert shown.exit_code == 0, shown.output
    report = json.loads(shown.output)
    (node,) = report["nodes"]
    assert node["node_id"] == page["node_id"] and node["processes"] >= 6 and node["rss_bytes"] > 100e6
    assert 0 < node["node_cpu_percent"] <= 100 and node["node_mem_used_bytes"] < node["node_mem_total_bytes"]
    (shop,) = [a for a in report["actors"] if a["class_name"] == "Shop"]
    assert shop["pid"] == page["shop_pid"] and shop["rss_bytes"] > 20e6 and shop["cpu"] >= 0
    driver = next(w for w in report["workers"] if w["pid"] == page["driver_pid"])
    assert driver["worker_type"] == "DRIVER" and driver["job_id"]
    cpus = [w["cpu"] or 0 for w in report["workers"]]  # (a worker gone before its CPU was sampled twice: none)
    assert cpus == sorted(cpus, reverse=True)  # the busiest first
    table = CliRunner().invoke(main, ["metrics", "top", "actors", "--at", read_at, "--server", url])
    assert table.exit_code == 0 and "Busiest actors" in table.output and "Shop" in table.output, table.output
    assert "Busiest nodes" not in table.output


# Grafana's duration variables, as the dashboards' defaults (and Grafana's rate interval for a 5 s scrape) set them;
# every other variable (instance, session, cluster, deployment …) is a label matcher, set to Grafana's "All" (.*).
DURATIONS = {"$__rate_interval": "1m", "$__range": "5m", "$interval": "30s", "$window": "30s"}


def dashboard_expressions() -> list[str]:
    """Every panel expression of the dashboards Ray generates for Grafana (default, Serve, Serve deployment, Data,
    Train), its variables filled in as Grafana would."""
    from ray.dashboard.modules.metrics import grafana_dashboard_factory as factory

    found = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            found.extend(target["expr"] for target in panel.get("targets", []))
            walk(panel.get("panels", []))

    for generate in (
        factory.generate_default_grafana_dashboard,
        factory.generate_serve_grafana_dashboard,
        factory.generate_serve_deployment_grafana_dashboard,
        factory.generate_data_grafana_dashboard,
        factory.generate_train_grafana_dashboard,
    ):
        walk(json.loads(generate()[0])["panels"])
    expressions = []
    for expr in found:
        for variable, duration in DURATIONS.items():
            expr = expr.replace(variable, duration)
        expressions.append(re.sub(r"\$\w+", ".*", expr))
    return expressions


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
    assert answered > 130  # (the Data and Train panels find none of them here)


Answers = dict[frozenset[tuple[str, str]], list[tuple[float, float]]]


def points(url: str, expr: str, start: float, end: float, step: float) -> Answers:
    """A range query's answer: each series' labels → its (time, value) points."""
    params = {"query": expr, "start": start, "end": end, "step": step}
    answer = httpx.get(f"{url}/api/v1/query_range", params=params, timeout=30).json()
    assert answer["status"] == "success", (url, expr, answer)
    return {frozenset(r["metric"].items()): [(t, float(v)) for t, v in r["values"]] for r in answer["data"]["result"]}


def within(value: float, around: list[float]) -> bool:
    """Whether ``value`` is among what the other side answered around the same moment: within their least and
    greatest, give or take 2% (rate's extrapolation moves with the phase of the scrapes), or NaN as one of theirs."""
    if math.isnan(value):
        return any(math.isnan(v) for v in around)
    finite = [v for v in around if not math.isnan(v)]
    if not finite:
        return False
    low, high = min(finite), max(finite)
    slack = 0.02 * max(abs(low), abs(high)) + 1e-9
    return low - slack <= value <= high + slack


def without_node(answers: Answers, node_id: str) -> Answers:
    """The answers without the node's ID where raysight added it (Prometheus has none to add)."""
    return {labels - {("NodeId", node_id)}: values for labels, values in answers.items()}


def test_every_panel_answers_as_prometheus_does(metered: tuple[str, dict[str, Any]], prometheus: str) -> None:
    """Both scraped the same cluster every 5 s, but not at the same instants, and Ray updates what it exports every
    5 s or so (10 s for its own and the application's metrics), not in step with either: so raysight's answer at a
    moment must be one Prometheus gives within 10 s of it (each second of that window asked: its scrapes over 25 s),
    and the other way round, for every series of every panel, over the minute of steady activity before Ray's page was
    read, a point each 15 s. A Ray update the one scraped and the other did not (two updates between two of its
    scrapes) can still differ: at most 5% of the points may, and no series may be missing on either side. The node's
    ``NodeId``, which raysight adds to what it scraped from the node, is set aside."""
    url, page = metered
    end = page["read_ms"] / 1000 - 10
    start = max(page["active_from_ms"] / 1000 + 30, end - 60)
    compared, differing, serve_series = 0, [], 0
    for expr in dashboard_expressions():
        ours, theirs = (without_node(points(u, expr, start, end, 15), page["node_id"]) for u in (url, prometheus))
        serve_series += len(ours) if "ray_serve_" in expr else 0
        fine = {
            side: without_node(points(u, expr, start - 10, end + 10, 1), page["node_id"])
            for side, u in (("ours", url), ("theirs", prometheus))
        }
        for coarse, other in ((ours, fine["theirs"]), (theirs, fine["ours"])):
            for labels, series in coarse.items():
                assert labels in other, (expr, "series missing on the other side", dict(labels))
                for t, value in series:
                    around = [v for s, v in other[labels] if t - 10 <= s <= t + 10]
                    compared += 1
                    if not within(value, around):
                        differing.append((expr, dict(labels), t, value, around))
        instant = httpx.get(f"{url}/api/v1/query", params={"query": expr, "time": end}).json()["data"]
        if instant["resultType"] == "vector":  # (the instant query's path too, held to the same tolerance)
            for r in instant["result"]:
                labels = frozenset(r["metric"].items()) - {("NodeId", page["node_id"])}
                assert labels in fine["theirs"], (expr, "instant series missing from Prometheus", dict(labels))
                around = [v for s, v in fine["theirs"][labels] if end - 10 <= s <= end + 10]
                compared += 1
                if not within(float(r["value"][1]), around):
                    differing.append((expr, dict(labels), end, r["value"][1], around))
    assert compared > 500 and len(differing) <= compared * 0.05, (compared, differing[:10])
    assert serve_series > 20  # (the Serve panels compared the application's series, not empty answers)


def test_serve_status_and_config_are_what_ray_printed_and_its_history_reaches_running(
    metered: tuple[str, dict[str, Any]],
) -> None:
    """After the cluster is gone, raysight's `serve status|config --at` and Ray's own `serve status|config -a` against
    raysight print what Ray's printed while it lived (Ray's, the newest sample: Serve as the poller last saw it)."""
    from ray.serve.scripts import config, status

    url, page = metered
    read_at = datetime.fromtimestamp(page["serve_read_ms"] / 1000, tz=UTC).isoformat()
    for command, printed in (("status", page["serve_status"]), ("config", page["serve_config"])):
        ours = CliRunner().invoke(main, ["serve", command, "--at", read_at, "--server", url])
        assert ours.exit_code == 0 and ours.stdout == printed, (ours.output, printed)
    assert "greeter" in page["serve_status"] and "RUNNING" in page["serve_status"]
    for name, command in (("status", status), ("config", config)):  # the newest sample, as raysight's own shows it
        rays, newest = (
            CliRunner().invoke(command, ["-a", url]),
            CliRunner().invoke(main, ["serve", name, "--server", url]),
        )
        assert rays.exit_code == 0 and rays.stdout == newest.stdout, (rays.output, newest.output)
    history = CliRunner().invoke(main, ["serve", "history", "-n", "greeter", "--server", url, "--format", "json"])
    changes = orjson.loads(history.stdout)["transitions"]
    assert ("application", "RUNNING") in {(t["kind"], t["to"]) for t in changes}, changes


def _serve_json(url: str, *args: str) -> dict[str, Any]:
    shown = CliRunner().invoke(main, ["serve", *args, "--server", url, "--format", "json"])
    assert shown.exit_code == 0, shown.output
    return orjson.loads(shown.stdout)  # type: ignore[no-any-return]


def test_serve_requests_sent_with_chosen_ids_are_found_with_status_latency_replicas_and_lines(
    metered: tuple[str, dict[str, Any]],
) -> None:
    """After the cluster is gone, each request the workload sent with its own ``X-Request-ID`` is found by it: its
    proxy's status and latency, the two deployments it crossed (the ingress, and Scorer through a handle) with their
    replicas and node, and its lines in every component; the slow one by its latency, the failed one by its 5xx."""
    url, page = metered
    assert {r: page["serve_answered"][r] for r in CHOSEN} == {
        "raysight-quick": 200,
        "raysight-slow": 200,
        "raysight-fails": 500,
    }
    found = {}
    for request_id in CHOSEN:
        answer = _serve_json(url, "request", request_id)
        request = found[request_id] = answer["request"]
        assert request is not None, answer
        assert (request["route"], request["method"], request["application"]) == ("/greet", "GET", "greeter")
        assert request["status"] == str(page["serve_answered"][request_id]), request
        crossed = {(r["deployment"], r["method"], r["call"]) for r in request["replicas"]}
        assert crossed == {("Greeter", "GET", None), ("Scorer", "CALL", "__call__")}, request
        assert all(r["replica"] and r["host"] == request["host"] for r in request["replicas"]), request
        components = {line["component"] for line in answer["lines"]}
        assert components == {"proxy", "replica"} and {line["request_id"] for line in answer["lines"]} == {request_id}
    assert found["raysight-slow"]["latency_ms"] >= 400 > found["raysight-quick"]["latency_ms"]
    scorer = next(r for r in found["raysight-fails"]["replicas"] if r["deployment"] == "Scorer")
    assert (scorer["status"], found["raysight-fails"]["error"]) == ("ERROR", True)
    # found by its latency: the chosen requests at least as slow as the slow one (the failed one too, where a loaded
    # machine made it as slow)
    floor = f"{found['raysight-slow']['latency_ms']}ms"
    slow = {r["request_id"] for r in _serve_json(url, "requests", "--min-latency", floor)["requests"]}
    assert "raysight-slow" in slow
    assert slow & set(CHOSEN) == {r for r in CHOSEN if found[r]["latency_ms"] >= found["raysight-slow"]["latency_ms"]}
    failed = _serve_json(url, "requests", "--status", "5xx", "--app", "greeter")["requests"]
    assert [r["request_id"] for r in failed] == [CRASH, "raysight-fails"]  # (newest first)
    (route,) = _serve_json(url, "requests", "--by", "route")["latencies"]
    assert route["route"] == "/greet" and route["requests"] > 100 and route["errors"] == 2, route


def test_serve_stats_show_each_deployments_rates_latency_and_replicas(metered: tuple[str, dict[str, Any]]) -> None:
    """`serve stats` at the end of the active rounds: both of greeter's deployments served requests (the ingress and
    Scorer through its handle), with a latency, a healthy replica each, and nothing else named greeter; by route, its
    proxy served /greet."""
    url, page = metered
    read_at = datetime.fromtimestamp(page["serve_read_ms"] / 1000, tz=UTC).isoformat()
    rows = _serve_json(url, "stats", "--at", read_at, "-n", "greeter")
    assert {(r["application"], r["deployment"]) for r in rows} == {("greeter", "Greeter"), ("greeter", "Scorer")}
    for row in rows:
        assert row["requests_per_s"] > 0 and row["p50_ms"] > 0 and row["healthy_replicas"] >= 1, row
        assert row["p50_ms"] <= row["p95_ms"] <= row["p99_ms"], row
    routes = _serve_json(url, "stats", "--at", read_at, "-n", "greeter", "--by", "route")  # as its proxy saw them
    assert [(r["application"], r["route"]) for r in routes] == [("greeter", "/greet")], routes
    assert routes[0]["requests_per_s"] > 0 and routes[0]["p50_ms"] > 0, routes  # (none failed then: no error series)


# --- issue 33 point 6: Serve's traces -------------------------------------------------------------------------------


def _ancestors(span: dict[str, Any], by_id: dict[str, dict[str, Any]]) -> list[str]:
    """The names of a span's ancestors, its parent first."""
    names = []
    while (span := by_id.get(span["parent_span_id"])) is not None:  # type: ignore[assignment]
        names.append(span["name"])
    return names


def test_serve_requests_are_traced_by_their_id_proxy_to_each_replica_each_span_once(
    metered: tuple[str, dict[str, Any]],
) -> None:
    """`raysight run` traced every Serve request (Serve's exporter, raysight's): each chosen request has one trace,
    found by its ``X-Request-ID`` (as `serve request` shows it), in which its proxy's span leads to Greeter's replica
    span, and that to Scorer's; the slow one lasts its sleep, the failed one failed; and no span was stored twice."""
    url, _ = metered
    traces: set[str] = set()
    for request_id in CHOSEN:
        (found,) = _serve_json(url, "request", request_id)["traces"]
        listed = CliRunner().invoke(main, ["traces", "--request-id", request_id, "--server", url, "--format", "json"])
        assert [t["trace_id"] for t in orjson.loads(listed.stdout)["traces"]] == [found["trace_id"]], listed.output
        shown = CliRunner().invoke(main, ["traces", "show", found["trace_id"], "--server", url, "--format", "json"])
        spans = orjson.loads(shown.stdout)["spans"]
        by_id = {span["span_id"]: span for span in spans}
        assert len(by_id) == len(spans)
        ours = [span["name"] for span in spans if span["request_id"] == request_id]
        proxy = "proxy_http_request Greeter GET "  # (Serve names its spans by what they serve)
        assert {proxy, "replica_handle_request Greeter __call__"} <= set(ours), ours
        assert spans[0]["name"] == proxy and spans[0]["parent_span_id"] is None, spans[0]  # the root: a trace each
        # Scorer's replica span descends from Greeter's (in whose user code the handle call ran), and that from the
        # proxy's: Serve's spans alone (raysight makes no task span of Serve's actors' calls)
        greeter = "replica_handle_request Greeter __call__"
        ups = [_ancestors(s, by_id) for s in spans if s["name"] == "replica_handle_request Scorer __call__"]
        assert ups and all(greeter in up and up.index(greeter) < up.index(proxy) == len(up) - 1 for up in ups), ups
        assert not [s["name"] for s in spans if s["name"].startswith(("ServeReplica:", "ProxyActor."))], spans
        traces.add(found["trace_id"])
        if request_id == "raysight-slow":  # Scorer slept in a task it submitted: the task's span is in the trace too
            assert found["duration_ns"] >= 400_000_000, found
            (nap,) = [_ancestors(s, by_id) for s in spans if s["name"] == "nap"]
            assert nap[0] == "replica_handle_request Scorer __call__", nap
        failed = [s["name"] for s in spans if s["request_id"] == request_id and s["status"] == "error"]  # Serve's
        assert bool(failed) is (request_id == "raysight-fails"), [(s["name"], s["status_message"]) for s in spans]
    assert len(traces) == len(CHOSEN)
    counted = httpx.get(f"{url}/api/raysight/doctor").json()["counters"]
    assert counted["spans"] > 450 * 4 and counted.get("spans_deduplicated", 0) == 0, counted


# issue 33 point 3: replicas as entities, a crashed replica as a failure


def test_a_crashed_replica_is_a_serve_failure_with_its_exit_its_failed_request_and_its_replacement(
    metered: tuple[str, dict[str, Any]],
) -> None:
    """The request that made a Scorer replica exit (``os._exit(1)``) is found with its 5xx; `raysight errors` has the
    replica's crash as a failure of its own — its worker's exit as Ray recorded it, that request counted under it, its
    replacement named — and not the replicas and proxy that `serve.shutdown` stopped at the end, nor their calls."""
    url, page = metered
    crashed, replacement = page["serve_crashed"]["replica"], page["serve_crashed"]["replacement"]
    assert page["serve_answered"][CRASH] == 500
    request = _serve_json(url, "request", CRASH)["request"]
    assert request["status"] == "500" and request["error"], request
    assert "Scorer" not in {r["deployment"] for r in request["replicas"]}  # (it died before answering)
    shown = CliRunner().invoke(main, ["errors", "--server", url, "--format", "json"])
    assert shown.exit_code == 0, shown.output
    (group,) = orjson.loads(shown.stdout)["groups"]  # (nothing Serve stopped on purpose)
    example = group["example"]
    assert (group["kind"], group["error_type"], group["count"]) == ("replica", "ACTOR_DIED", 1), group
    assert group["affected"] == ["/greet", "ServeReplica:greeter:Scorer"] and group["consequences"] == {"requests": 1}
    assert "Worker exit type: SYSTEM_ERROR" in example["message"], example
    assert example["replica_id"] == crashed and example["failed_requests"] == [CRASH], example
    assert example["replacement"]["replica_id"] == replacement, example
    table = CliRunner().invoke(main, ["errors", "show", example["id"], "--server", url])
    assert f"Serve replica {crashed}, replaced by replica {replacement}" in table.output, table.output
    assert f"Requests that failed with it: {CRASH}" in table.output, table.output
    actor = CliRunner().invoke(main, ["get", "actors", example["id"], "--server", url, "--format", "json"])
    assert actor.exit_code == 0 and orjson.loads(actor.stdout)["class_name"] == "ServeReplica:greeter:Scorer"


def test_serve_history_and_replicas_show_the_crashed_replica_and_its_replacement(
    metered: tuple[str, dict[str, Any]],
) -> None:
    """`serve history` has the crashed replica gone and its replacement come RUNNING; `serve replicas` lists both
    with their actor, pid, node and log file, the crashed one's end (crashed, as Ray recorded it) before its
    replacement started, and Greeter's replica stopped by `serve.shutdown`; a replica leads to its log lines."""
    url, page = metered
    crashed, replacement = page["serve_crashed"]["replica"], page["serve_crashed"]["replacement"]
    changes = _serve_json(url, "history", "-n", "greeter")["transitions"]
    assert {(t["replica"], t["to"]) for t in changes} >= {(crashed, None), (replacement, "RUNNING")}, changes
    replicas = {r["replica_id"]: r for r in _serve_json(url, "replicas", "--deployment", "Scorer")["replicas"]}
    assert list(replicas) == [crashed, replacement], replicas
    dead, new = replicas[crashed], replicas[replacement]
    assert dead["ended"]["how"] == "crashed" and "SYSTEM_ERROR" in dead["ended"]["message"], dead
    assert dead["gone_ms"] is not None and dead["ended"]["time_ms"] <= new["start_time_ms"], (dead, new)
    for replica in (dead, new):
        assert replica["actor_id"] and replica["pid"] and replica["worker_id"] and replica["node_id"] == page["node_id"]
        assert replica["log_file_path"].endswith(f"_{replica['replica_id']}.log"), replica
    (greeter,) = _serve_json(url, "replicas", "-n", "greeter", "--deployment", "Greeter")["replicas"]
    assert greeter["ended"]["how"] == "stopped", greeter
    lines = CliRunner().invoke(main, ["logs", "--replica", crashed, "--server", url, "--format", "json"])
    assert lines.exit_code == 0 and "raysight-fails" in lines.stdout, lines.output


def test_greeters_memray_capture_is_listed_and_rendered_after_the_cluster_is_gone(
    metered: tuple[str, dict[str, Any]], tmp_path: Path, watched: Any
) -> None:
    """Serve's memray capture of Greeter's replica (RAY_SERVE_ENABLE_MEMORY_PROFILING=1 in its runtime env), shipped
    by `raysight run`'s agent: listed with the profiles, of Greeter's replica actor and pid, its heaviest line the one
    that keeps part of each request; its file, and memray's own flame graph of it, written from a server started
    after the cluster is gone; the replica's actor's page in the dashboard draws it and downloads its file."""
    url, _ = metered
    (greeter,) = _serve_json(url, "replicas", "-n", "greeter", "--deployment", "Greeter")["replicas"]
    file = Path(greeter["log_file_path"]).name.removesuffix(".log") + "_memray_0.bin"
    (capture,) = [row for row in Client(url).captures()["rows"] if row["file"]]
    assert (capture["file"], capture["status"], capture["kind"], capture["error"]) == (file, "done", "memory", None)
    assert (capture["actor_id"], capture["pid"]) == (greeter["actor_id"], greeter["pid"]), capture
    listed = CliRunner().invoke(main, ["profiles", "--server", url])
    assert listed.exit_code == 0 and capture["capture_id"] in listed.stdout and "Serve (RAY_SERVE" in listed.stdout
    shown = CliRunner().invoke(main, ["profiles", capture["capture_id"], "--server", url, "--format", "json"])
    assert shown.exit_code == 0, shown.output
    line = next(n for n, text in enumerate(PROGRAM.read_text().splitlines(), 1) if "what Greeter's memray" in text)
    heaviest = flame.top(orjson.loads(shown.stdout)["stacks"], lines=True)[0]
    assert heaviest["function"] == f"remember ({PROGRAM}:{line})", heaviest
    table = CliRunner().invoke(main, ["profiles", capture["capture_id"], "--server", url])
    assert table.exit_code == 0 and f"remember ({PROGRAM}:{line})" in table.stdout, table.output
    written = tmp_path / "greeter.bin"
    saved = CliRunner().invoke(main, ["profiles", capture["capture_id"], "--server", url, "-o", str(written)])
    assert saved.exit_code == 0 and memray.FileReader(str(written)).metadata.pid == greeter["pid"], saved.output
    report = tmp_path / "greeter.html"
    drawn = CliRunner().invoke(main, ["profiles", capture["capture_id"], "--server", url, "-o", str(report)])
    assert drawn.exit_code == 0 and "memray's flame graph" in drawn.stderr, drawn.output
    assert "remember" in report.read_text() and "cdn.jsdelivr.net" not in report.read_text()  # (offline: --no-web)
    page = watched(url).open(f"/ui/sessions/metered/actors/{greeter['actor_id']}")
    listed = page.locator("#actors-captures tbody tr", has_text="Serve (RAY_SERVE")
    assert listed.count() == 1
    page.wait_for_selector("#actors-captures .flame svg", timeout=15_000)  # (the newest, shown at once)
    assert "remember (" in page.locator("#actors-captures .flame svg").inner_html()
    with page.expect_download() as download:
        listed.locator("button.capture-file").click()
    downloaded = tmp_path / "downloaded.bin"
    download.value.save_as(downloaded)
    assert download.value.suggested_filename == file and downloaded.read_bytes() == written.read_bytes()
