"""Metrics scraped from Prometheus targets (``POST /ingest/agent/metrics``) and Prometheus's query API over them, on
synthetic scrapes whose answers follow from Prometheus's rules by hand: lookback and staleness, ``rate``'s
extrapolation and counter resets, aggregation, vector matching, histogram quantiles; errors in Prometheus's shape."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from click.testing import CliRunner, Result
from starlette.testclient import TestClient

from raysight import wire
from raysight.cli import main
from raysight.promql.budget import Budget
from raysight.promql.evaluator import evaluate
from raysight.promql.matchers import Matcher
from raysight.promql.range_functions import RANGE_FUNCTIONS
from raysight.promql.source import NEVER, Samples
from raysight.promql.values import Vector
from raysight.server.app import create_app
from raysight.settings import Downsampling, QueryLimits, Retention, Settings
from raysight.signals.scrapes import metric_retention
from raysight.signals.scrapes.apply import record_scrapes
from raysight.signals.scrapes.metric_downsample import downsample_metrics
from raysight.signals.scrapes.metric_retention import prune_metrics
from raysight.signals.scrapes.metrics_query import SessionMetrics
from raysight.signals.scrapes.parse import Scrape
from raysight.store.store import Store
from tests.ray_scenarios import ServerProcess

SESSION = "session_2026-11-24_10-00-00_000000_1"
T0 = 1_795_000_000_000  # ms: the first scrape
EVERY = 5_000


def scrape(server: TestClient, i: int, text: str, instance: str = "10.0.0.1:8080", session: str = SESSION) -> Any:
    body = {"session": session, "scraped_ms": T0 + EVERY * i, "target": {"instance": instance, "job": "ray"}}
    return server.post(wire.AGENT_METRICS, json={**body, "text": text})


def at(i: float) -> float:
    """The time of scrape ``i``, in seconds, as Prometheus's API takes it."""
    return (T0 + EVERY * i) / 1000


def instant(server: TestClient, query: str, i: float, session: str | None = None) -> list[dict[str, Any]]:
    answer = server.get(wire.in_session(wire.PROM_QUERY, session), params={"query": query, "time": at(i)})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["status"] == "success" and body["data"]["resultType"] == "vector", body
    return sorted(body["data"]["result"], key=lambda r: sorted(r["metric"].items()))


def values(result: list[dict[str, Any]]) -> list[float]:
    return [float(r["value"][1]) for r in result]


@pytest.fixture(scope="module")
def counters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """A server, for this module's reads, given 13 scrapes 5 s apart: a counter that rises by 10 (route /a) and 5
    (/b) a scrape, /b reset to 0 at scrape 8; a gauge exposed until scrape 5; a histogram's buckets."""
    with TestClient(
        create_app(Settings(tmp_path_factory.mktemp("metrics") / "data").replace(fold_linger_s=0, fold_rest=0))
    ) as server:
        load(server)
        yield server


def load(server: TestClient) -> None:
    for i in range(13):
        b = 5 * i if i < 8 else 5 * (i - 8)
        text = (
            "# HELP req_total Requests.\n# TYPE req_total counter\n"
            f'req_total{{route="/a"}} {10 * i}\nreq_total{{route="/b",code=""}} {b}\n'
            f'lat_bucket{{le="0.1"}} {i}\nlat_bucket{{le="1"}} {3 * i}\nlat_bucket{{le="+Inf"}} {4 * i}\n'
        )
        if i <= 5:
            text += 'depth{queue="q1"} 7\n'
        answer = scrape(server, i, text)
        assert answer.json() == {"ok": True, "samples": 5 + (i <= 5)}, answer.text


def test_rate_extrapolates_and_corrects_resets(counters: TestClient) -> None:
    a, b = instant(counters, "rate(req_total[1m])", 12)
    assert a["metric"] == {"instance": "10.0.0.1:8080", "job": "ray", "route": "/a"}  # (the name dropped)
    assert float(a["value"][1]) == 2.0  # 120 over the 60 s the samples span
    # /b: 35 up to the reset, then 20 more (the reset's drop corrected): 55 over 60 s
    assert float(b["value"][1]) == pytest.approx(55 / 60)
    # 20 s: five samples spanning 20 s of the window's 20 (the window is inclusive at both ends)
    assert values(instant(counters, 'increase(req_total{route="/a"}[20s])', 12)) == [40.0]
    # irate: the last two samples
    assert values(instant(counters, 'irate(req_total{route="/a"}[1m])', 12)) == [2.0]
    # extrapolated: samples over 35 s of a 37 s window, 2 s short of its start (within 1.1 intervals): 70 * 37 / 35
    assert values(instant(counters, 'increase(req_total{route="/a"}[37s])', 12)) == pytest.approx([74.0])
    # but never to before the counter was zero: a 40 s window whose samples start at 0, 10 s in, adds nothing
    assert values(instant(counters, 'increase(req_total{route="/a"}[40s])', 6)) == [60.0]


def test_a_series_gone_from_its_target_is_stale_at_once(counters: TestClient) -> None:
    assert values(instant(counters, "depth", 5.5)) == [7.0]  # within the lookback
    assert instant(counters, "depth", 6) == []  # scraped without it: stale, though 5 min of lookback remain
    assert instant(counters, "req_total", 12 + 300 / 5 + 1) == []  # beyond the 5 min lookback


def test_aggregation_matching_and_functions(counters: TestClient) -> None:
    (total,) = instant(counters, "sum by (job) (req_total)", 4)
    assert total["metric"] == {"job": "ray"} and float(total["value"][1]) == 60.0
    assert values(instant(counters, "count without (route) (req_total)", 4)) == [2.0]
    assert values(instant(counters, "max(req_total)", 4)) == [40.0]
    assert values(instant(counters, 'req_total{route="/a"} / on (instance) req_total{route="/b"}', 4)) == [2.0]
    assert values(instant(counters, "req_total > 25", 4)) == [40.0]  # a filter keeps the series' own value
    assert values(instant(counters, "req_total > bool 25", 4)) == [1.0, 0.0]  # /a, /b
    assert values(instant(counters, "req_total unless req_total > 25", 4)) == [20.0]
    replaced = instant(counters, 'label_replace(req_total, "path", "p-$1", "route", "/(.*)")', 4)
    assert [r["metric"]["path"] for r in replaced] == ["p-a", "p-b"]
    # buckets at scrape 4: 4 ≤ 0.1, 12 ≤ 1, 16 in all: the median (rank 8) is in (0.1, 1], 4 of its 8 in
    assert values(instant(counters, "histogram_quantile(0.5, lat_bucket)", 4)) == pytest.approx([0.1 + 0.9 * 4 / 8])


def test_range_queries_step_through_time(counters: TestClient) -> None:
    answer = counters.get(
        "/api/v1/query_range",
        params={"query": 'req_total{route="/a"}', "start": at(0), "end": at(2), "step": "2.5"},
    ).json()
    assert answer["data"]["resultType"] == "matrix"
    (series,) = answer["data"]["result"]
    assert series["values"] == [[at(0), "0"], [at(0.5), "0"], [at(1), "10"], [at(1.5), "10"], [at(2), "20"]]
    scalar = counters.get("/api/v1/query", params={"query": "2 * 3", "time": at(0)}).json()["data"]
    assert scalar == {"resultType": "scalar", "result": [at(0), "6"]}


def test_series_labels_values_and_metadata(counters: TestClient) -> None:
    series = counters.get("/api/v1/series", params={"match[]": 'req_total{route="/b"}'}).json()["data"]
    assert series == [{"__name__": "req_total", "instance": "10.0.0.1:8080", "job": "ray", "route": "/b"}]  # no code=""
    assert counters.get("/api/v1/labels").json()["data"] == ["__name__", "instance", "job", "le", "queue", "route"]
    assert counters.get("/api/v1/label/route/values").json()["data"] == ["/a", "/b"]
    assert counters.get("/api/v1/label/__name__/values").json()["data"] == ["depth", "lat_bucket", "req_total"]
    metadata = counters.get("/api/v1/metadata").json()["data"]
    assert metadata["req_total"] == [{"type": "counter", "help": "Requests.", "unit": ""}]


def test_each_session_by_its_path(server: TestClient) -> None:
    load(server)
    other = "session_2026-11-24_11-00-00_000000_2"
    assert scrape(server, 20, "req_total 1\n", session=other).status_code == 200
    assert values(instant(server, "req_total", 20)) == [1.0]  # the newest session
    assert values(instant(server, "req_total", 4, SESSION)) == [40.0, 20.0]  # /a, /b
    missing = server.get("/sessions/session_nope/api/v1/query", params={"query": "up"})
    assert missing.status_code == 404 and missing.json()["status"] == "error"


def test_scraped_labels_named_like_the_targets_are_kept_as_exported(server: TestClient) -> None:
    page = 'x{job="mine",instance="elsewhere",a="q\\"uote\\\\"} 1\n# a comment\nnot a sample line\ny{a="1",a="2"} 1\n'
    assert scrape(server, 0, page).json()["samples"] == 1  # (y names a label twice: no sample)
    (series,) = server.get("/api/v1/series", params={"match[]": "x"}).json()["data"]
    assert series == {
        "__name__": "x",
        "a": 'q"uote\\',
        "exported_instance": "elsewhere",
        "exported_job": "mine",
        "instance": "10.0.0.1:8080",
        "job": "ray",
    }


def test_a_targets_own_labels_label_the_series_that_lack_them(server: TestClient) -> None:
    node = "ab" * 28
    body = {
        "session": SESSION,
        "scraped_ms": T0,
        "target": {"instance": "h:1", "job": "ray", "labels": {"NodeId": node}},
    }
    page = f'ray_node_cpu_count{{ip="10.0.0.1"}} 2\nray_tasks{{NodeId="{"cd" * 28}"}} 1\n'
    assert server.post(wire.AGENT_METRICS, json={**body, "text": page}).json()["samples"] == 2
    series = server.get("/api/v1/series", params={"match[]": '{job="ray"}'}).json()["data"]
    assert {s["__name__"]: s.get("NodeId") for s in series} == {"ray_node_cpu_count": node, "ray_tasks": "cd" * 28}
    # the target's labels name its series: the same line under another NodeId is another series
    again = {**body, "scraped_ms": T0 + EVERY, "target": {**body["target"], "labels": {"NodeId": "ef" * 28}}}
    assert server.post(wire.AGENT_METRICS, json={**again, "text": page}).json()["samples"] == 2
    assert len(server.get("/api/v1/series", params={"match[]": "ray_node_cpu_count"}).json()["data"]) == 2


def test_a_scrape_older_than_the_targets_last_changes_nothing(server: TestClient) -> None:
    assert scrape(server, 2, "x 2\n").json()["samples"] == 1
    assert scrape(server, 1, "x 1\n").json()["samples"] == 0
    assert values(instant(server, "x", 2)) == [2.0]


@pytest.mark.parametrize(
    ("params", "status", "says"),
    [
        ({"query": "sum("}, 400, "parse error"),
        ({"query": "nosuch(x)"}, 400, "unknown function"),
        ({"query": "{}"}, 400, "parse error"),
        ({"query": "x", "time": "yesterday"}, 400, "cannot parse"),
        ({}, 400, 'missing parameter "query"'),
    ],
)
def test_bad_queries_get_prometheus_errors(
    counters: TestClient, params: dict[str, str], status: int, says: str
) -> None:
    answer = counters.get("/api/v1/query", params=params)
    body = answer.json()
    assert answer.status_code == status and body["status"] == "error" and body["errorType"] == "bad_data", body
    assert says in body["error"]


def test_a_range_of_too_many_points_is_refused(counters: TestClient) -> None:
    params = {"query": "req_total", "start": at(0), "end": at(0) + 86_400 * 7, "step": "1s"}
    body = counters.get("/api/v1/query_range", params=params).json()
    assert body["status"] == "error" and "exceeded maximum resolution of 11,000 points" in body["error"]
    bad_step = counters.get("/api/v1/query_range", params={**params, "step": "0"}).json()
    assert "zero or negative" in bad_step["error"]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"nope", "not JSON"),
        (b'{"session": "session_x", "scraped_ms": 1, "target": {"instance": "h:1", "job": "ray"}}', "text"),
        (b'{"session": "../x", "scraped_ms": 1, "target": {"instance": "h:1", "job": "ray"}, "text": ""}', "session"),
        (b'{"session": "session_x", "scraped_ms": -1, "target": {"instance": "h:1", "job": "ray"}, "text": ""}', "ms"),
        (
            b'{"session": "session_x", "scraped_ms": 1, "target": {"instance": "h:1", "job": "ray", "labels": {"job": '
            b'"x"}}, "text": ""}',
            "'job' is not a label a target may add",
        ),
        (
            b'{"session": "session_x", "scraped_ms": 1, "target": {"instance": "h:1", "job": "ray", '
            b'"labels": {"a": 1}}, "text": ""}',
            "must be a string",
        ),
        (
            b'{"session": "session_x", "scraped_ms": 1, "target": {"instance": "h:1", "job": "ray", "labels": []}, '
            b'"text": ""}',
            "must be an object",
        ),
    ],
)
def test_a_body_that_is_not_a_scrape_gets_a_400(server: TestClient, body: bytes, says: str) -> None:
    answer = server.post(wire.AGENT_METRICS, content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == 400 and says in answer.json()["error"], answer.text


@pytest.mark.parametrize(
    ("query", "expected"),
    [  # at scrape 4: req_total /a 40, /b 20 (sorted by labels: /a first); depth 7; the last 10 s: /a 20, 30, 40
        ("topk(1, req_total)", [40]),
        ("bottomk(1, req_total)", [20]),
        ("avg(req_total)", [30]),
        ("min(req_total)", [20]),
        ("group(req_total)", [1]),
        ("stddev(req_total)", [10]),
        ("stdvar(req_total)", [100]),
        ("quantile(0.5, req_total)", [30]),
        ("clamp(req_total, 25, 35)", [35, 25]),
        ("clamp_min(req_total, 30)", [40, 30]),
        ("clamp_max(req_total, 30)", [30, 20]),
        ("abs(-req_total)", [40, 20]),
        ("ceil(req_total / 3)", [14, 7]),
        ("floor(req_total / 3)", [13, 6]),
        ("round(req_total / 3)", [13, 7]),
        ("round(req_total / 3, 5)", [15, 5]),
        (
            "exp(vector(0)) + ln(vector(1)) + log2(vector(8)) + log10(vector(100)) + sqrt(vector(16))",
            [1 + 0 + 3 + 2 + 4],
        ),
        ("vector(scalar(depth) * 2)", [14]),
        ("vector(time())", [at(4)]),
        ("timestamp(depth)", [at(4)]),
        ("absent(nosuch)", [1]),
        ("absent(depth)", []),
        ("req_total offset 5s", [30, 15]),
        (f"req_total @ {at(2)}", [20, 10]),
        ('idelta(req_total{route="/a"}[20s])', [10]),
        ("delta(depth[20s])", [0]),
        ('avg_over_time(req_total{route="/a"}[10s])', [30]),
        ('sum_over_time(req_total{route="/a"}[10s])', [90]),
        ('min_over_time(req_total{route="/a"}[10s])', [20]),
        ('max_over_time(req_total{route="/a"}[10s])', [40]),
        ('count_over_time(req_total{route="/a"}[10s])', [3]),
        ('last_over_time(req_total{route="/a"}[10s])', [40]),
        ('present_over_time(req_total{route="/a"}[10s])', [1]),
        ('stdvar_over_time(req_total{route="/a"}[10s])', [pytest.approx(200 / 3)]),
        ('quantile_over_time(0.5, req_total{route="/a"}[10s])', [30]),
        ("req_total * on (instance) group_left (queue) depth", [280, 140]),
        ("req_total and depth", []),  # no series of the same labels
        ("req_total and on (instance) depth", [40, 20]),
        ("req_total or depth", [7, 40, 20]),
        ("(req_total) - 5", [35, 15]),
        ("-req_total + 100 > bool 70", [0, 1]),
    ],
)
def test_functions_and_operators(counters: TestClient, query: str, expected: list[float]) -> None:
    assert values(instant(counters, query, 4)) == expected


def test_sort_orders_an_instant_vector(counters: TestClient) -> None:
    for query, order in (("sort(req_total)", [20.0, 40.0]), ("sort_desc(req_total)", [40.0, 20.0])):
        answer = counters.get("/api/v1/query", params={"query": query, "time": at(4)}).json()["data"]["result"]
        assert [float(r["value"][1]) for r in answer] == order


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real server (for the CLI, as a user runs it) given the same scrapes."""
    with ServerProcess(tmp_path_factory.mktemp("metrics-cli") / "data") as server:
        with httpx.Client(base_url=server.url, timeout=10) as http:
            load(http)  # type: ignore[arg-type]
        yield server.url


def metrics_cli(url: str, *args: str) -> Result:
    return CliRunner().invoke(main, ["metrics", *args, "--server", url], catch_exceptions=False)


def test_raysight_metrics_names_labels_and_queries(served: str) -> None:
    assert metrics_cli(served, "names").stdout.split() == ["depth", "lat_bucket", "req_total"]
    labels = metrics_cli(served, "labels", "req_total").stdout
    assert "req_total: 2 series" in labels and any(
        line.split()[:3] == ["route", "/a,", "/b"] for line in labels.splitlines()
    )
    when = datetime.fromtimestamp(at(4), tz=timezone.utc).isoformat()
    table = metrics_cli(served, "query", "sum by (job) (req_total)", "--at", when).stdout.splitlines()
    assert table[0].split() == ["SERIES", "TIME_MS", "VALUE"] and table[1].split()[0] == '{job="ray"}'
    assert table[1].split()[-1] == "60"
    ranged = json.loads(
        metrics_cli(
            served, "query", 'req_total{route="/a"}', "--at", when, "--range", "10s", "--step", "5s", "--format", "json"
        ).stdout
    )
    assert [v for _, v in ranged["result"][0]["values"]] == ["20", "30", "40"]
    # no --at: the session ended long ago (its scrapes are of 2026-11-18): its last values
    last = json.loads(metrics_cli(served, "query", 'req_total{route="/a"}', "--format", "json").stdout)
    assert last["result"][0]["value"] == [at(12), "120"]
    bad = CliRunner().invoke(main, ["metrics", "query", "sum(", "--server", served])
    assert bad.exit_code == 2 and "parse error" in bad.output
    missing = CliRunner().invoke(main, ["metrics", "labels", "nosuch", "--server", served])
    assert missing.exit_code == 1 and "raysight metrics names" in missing.output


def test_the_doctor_shows_each_targets_scrapes_and_deleting_a_session_deletes_its_metrics(server: TestClient) -> None:
    load(server)
    scrape(server, 0, "other 1\n", session="session_2026-11-24_11-00-00_000000_2")
    (scrapes,) = [s for s in server.get("/api/raysight/doctor").json()["scrapes"] if s["session"] == SESSION]
    assert (scrapes["instance"], scrapes["scrapes"], scrapes["last_ms"], scrapes["last_samples"]) == (
        "10.0.0.1:8080",
        13,
        T0 + 12 * EVERY,
        5,
    )
    assert server.delete(f"/api/raysight/sessions/{SESSION}").is_success
    kept = server.app.state.raysight.writer.call(  # type: ignore[attr-defined]
        lambda store: store._run(
            "SELECT (SELECT count(*) FROM metric_samples), "
            "(SELECT count(*) FROM metric_series), (SELECT count(*) FROM metric_scrapes)"
        ).fetchone()
    ).result(10)
    assert kept == (1, 1, 1)  # the other session's one series, sample and scrape


def store_call(server: TestClient, fn: Any) -> Any:
    """``fn(store)`` run on the server's writer thread, its result."""
    return server.app.state.raysight.writer.call(fn).result(10)  # type: ignore[attr-defined]


FIVE = "".join(f"{name} 1\n" for name in ("a", "b", "c", "d", "e"))


def test_a_sessions_series_past_the_limit_are_refused_counted_and_taken_once_the_limit_is_raised(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    with TestClient(create_app(Settings(data).replace(fold_linger_s=0, fold_rest=0, metrics_max_series=3))) as server:
        assert scrape(server, 0, FIVE).json()["samples"] == 3
        assert scrape(server, 1, FIVE).json()["samples"] == 3
        names = server.get(f"/sessions/{SESSION}/api/v1/label/__name__/values").json()["data"]
        assert names == ["a", "b", "c"]  # (the first by name)
        other = "session_2026-11-24_11-00-00_000000_2"
        assert scrape(server, 0, FIVE, session=other).json()["samples"] == 3  # a limit per session
        (refused,) = [
            r for r in server.get("/api/raysight/doctor").json()["metrics_refused"] if r["session"] == SESSION
        ]
        assert (refused["series_held"], refused["series_refused"], refused["samples_dropped"]) == (3, 2, 4)
        assert refused["last_ms"] == T0 + EVERY
    with TestClient(create_app(Settings(data).replace(fold_linger_s=0, fold_rest=0, metrics_max_series=10))) as server:
        assert scrape(server, 2, FIVE).json()["samples"] == 5
        # (after the restart, the lines seen before are found again as the same series, from their labels)
        assert (
            len(server.get(f"/sessions/{SESSION}/api/v1/series", params={"match[]": '{job="ray"}'}).json()["data"]) == 5
        )
        assert values(instant(server, "count_over_time(a[1m])", 2, SESSION)) == [3.0]
        assert values(instant(server, '{__name__=~"d|e"}', 2, SESSION)) == [1.0, 1.0]


def test_the_series_limit_is_a_server_option_and_the_doctor_shows_what_it_refused(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", options=["--metrics-max-series", "2"]).start()
    try:
        body = {"session": SESSION, "scraped_ms": T0, "target": {"instance": "h:1", "job": "ray"}, "text": FIVE}
        assert httpx.post(server.url + wire.AGENT_METRICS, json=body).json()["samples"] == 2
        shown = CliRunner().invoke(main, ["doctor", "--server", server.url])
        assert shown.exit_code == 0, shown.output
        section = shown.output[shown.output.index("Metric series refused") :]
        assert re.search(rf"{SESSION}\s+2\s+3\s+3\s", section), section
    finally:
        server.stop()


def test_retention_drops_the_oldest_samples_leaves_a_marker_and_queries_that_reach_them_warn(
    server: TestClient,
) -> None:
    load(server)  # 13 scrapes, 5 s apart: 6 samples each up to scrape 5, 5 after
    assert store_call(server, lambda s: prune_metrics(s, Retention(max_age="30s"), now_ms=0)) == 0  # (at the epoch)
    dropped = store_call(server, lambda s: prune_metrics(s, Retention(max_age="30s"), now_ms=T0 + 12 * EVERY))
    assert dropped == 6 * 6  # scrapes 0-5, older than 30 s
    (marker,) = [m for m in server.get("/api/raysight/doctor").json()["metrics_dropped"] if m["session"] == SESSION]
    assert (marker["samples"], marker["through_ms"]) == (36, T0 + 5 * EVERY)
    assert marker["why"] == "dropped by the server's metrics retention (older than 30s)"
    answer = server.get("/api/v1/query", params={"query": "req_total", "time": at(12)}).json()
    assert sorted(values(answer["data"]["result"])) == [20.0, 120.0]  # what is left still answers
    through = datetime.fromtimestamp((T0 + 5 * EVERY) / 1000, timezone.utc).isoformat(timespec="seconds")
    assert answer["warnings"] == [
        f"samples through {through} were dropped by the server's metrics retention (older than 30s): "
        "the answer lacks them"
    ]
    later = server.get("/api/v1/query", params={"query": "req_total", "time": at(12) + 600}).json()
    assert "warnings" not in later  # (its lookback does not reach them)
    assert store_call(server, lambda s: prune_metrics(s, Retention(max_age="30s"), now_ms=T0 + 12 * EVERY)) == 0


def test_size_retention_keeps_the_newest_samples_within_the_size(server: TestClient) -> None:
    load(server)
    samples, per_sample = store_call(server, lambda s: metric_retention.footprint(s.tx.run))
    bound = samples * per_sample / 2
    dropped = store_call(server, lambda s: prune_metrics(s, Retention(max_size=f"{bound:.0f}B")))
    left, _ = store_call(server, lambda s: metric_retention.footprint(s.tx.run))
    assert left == samples - dropped and left * per_sample <= bound < (left + 6) * per_sample  # (a scrape's worth)
    (oldest,) = store_call(server, lambda s: s._one("SELECT min(ts_ms) FROM metric_samples"))
    assert oldest > T0 and values(instant(server, 'req_total{route="/a"}', 12)) == [120.0]


def test_scrapes_kept_together_are_each_kept_as_alone(tmp_path: Path) -> None:
    """The writer keeps the scrapes that wait together, in one transaction: a target's second scrape of the batch
    finds the series its first added, one older than the target's last changes nothing, and each says its samples."""
    store = Store(tmp_path / "data")
    try:
        batch = [
            Scrape(SESSION, T0, "h:1", "ray", "x 1\ny 2\n"),
            Scrape(SESSION, T0, "h:2", "ray", "x 5\n"),
            Scrape(SESSION, T0 + EVERY, "h:1", "ray", "x 2\nz 3\n"),
            Scrape(SESSION, T0 + EVERY - 1, "h:1", "ray", "x 9\n"),  # older than the one before it
        ]
        assert record_scrapes(store, batch) == [2, 1, 2, 0]
        assert record_scrapes(store, [Scrape(SESSION, T0 + 2 * EVERY, "h:1", "ray", "x 3\n")]) == [1]
        rows = store.con.execute(
            """SELECT s.instance, s.name, list(m.value ORDER BY m.ts_ms) FROM metric_samples m
               JOIN metric_series s USING (series_no) GROUP BY ALL ORDER BY ALL"""
        ).fetchall()
        assert rows == [("h:1", "x", [1.0, 2.0, 3.0]), ("h:1", "y", [2.0]), ("h:1", "z", [3.0]), ("h:2", "x", [5.0])]
        assert store.con.execute("SELECT count(*) FROM metric_scrapes").fetchone() == (4,)
        # a line naming a label twice is no sample, and no series refused either
        malformed = Scrape(SESSION, T0 + 3 * EVERY, "h:1", "ray", 'x 4\nbad{a="1",a="2"} 1\n')
        assert record_scrapes(store, [malformed]) == [1]
        assert store.con.execute("SELECT count(*) FROM metric_refused").fetchone() == (0,)
    finally:
        store.close()


def test_samples_stored_out_of_time_order_are_read_in_order(tmp_path: Path) -> None:
    """A page may stamp its samples (``x 1 <ms>``): a later scrape can store a series' sample older than one before
    it, and the selection still reads each series in time order (its fast path checks, and sorts by both keys)."""
    store = Store(tmp_path / "data")
    try:
        record_scrapes(store, [Scrape(SESSION, T0 + EVERY, "h:1", "ray", f"x 1 {T0 + 3000}\ny 7\n")])
        record_scrapes(store, [Scrape(SESSION, T0 + 2 * EVERY, "h:1", "ray", f"x 2 {T0 + 1000}\ny 8\n")])
        source = SessionMetrics(store.con, SESSION)
        (x,) = source.select([Matcher("__name__", "=", "x")], T0, T0 + 3 * EVERY, Budget(QueryLimits()), 0)
        assert x.ts.tolist() == [T0 + 1000, T0 + 3000] and x.values.tolist() == [2.0, 1.0]
    finally:
        store.close()


def test_metrics_top_sums_each_nodes_processes_and_orders_the_busiest_first(server: TestClient) -> None:
    def page(i: int) -> str:
        return (
            f'raysight_process_cpu_seconds_total{{NodeId="n1",pid="10",Component="raylet"}} {i * 15}\n'
            f'raysight_process_cpu_seconds_total{{NodeId="n1",pid="11",Component="ray::IDLE",WorkerId="w1"}} {i * 30}\n'
            f'raysight_process_cpu_seconds_total{{NodeId="n2",pid="12",Component="ray::IDLE",WorkerId="w2"}} {i * 3}\n'
            f'raysight_process_resident_memory_bytes{{NodeId="n1",pid="11",Component="ray::IDLE",WorkerId="w1"}} 5e8\n'
        )

    for i in range(3):  # 30 s apart: a minute
        body = {"session": SESSION, "scraped_ms": T0 + 30_000 * i, "target": {"instance": "h", "job": "raysight"}}
        assert server.post(wire.AGENT_METRICS, json={**body, "text": page(i)}).json()["samples"] == 4
    top = server.get("/api/raysight/metrics/top", params={"at": T0 + 60_000, "limit": 1}).json()
    assert top["session"] == SESSION and top["at_ms"] == T0 + 60_000
    (node,) = top["nodes"]  # (the busiest of two)
    assert (node["node_id"], node["processes"], node["cpu"], node["rss_bytes"]) == ("n1", 2, 1.5, 5e8)
    (worker,) = top["workers"]
    assert (worker["worker_id"], worker["pid"], worker["cpu"], worker["worker_type"]) == ("w1", 11, 1.0, None)
    assert top["actors"] == []  # (no actor recorded on these workers)
    every = server.get("/api/raysight/metrics/top", params={"at": T0 + 60_000}).json()
    assert [w["cpu"] for w in every["workers"]] == [1.0, 0.1]
    assert server.get("/api/raysight/metrics/top", params={"limit": 5000}).status_code == 400
    assert server.get("/api/raysight/metrics/top", params={"session": "session_nope"}).status_code == 404


def _samples(store: Store, name: str) -> tuple[list[int], list[float]]:
    rows = store.con.execute(
        "SELECT m.ts_ms, m.value FROM metric_samples m JOIN metric_series s USING (series_no) WHERE s.name = ? "
        "ORDER BY m.ts_ms",
        [name],
    ).fetchall()
    return [r[0] for r in rows], [r[1] for r in rows]


def _increase(values: list[float]) -> float:
    """A counter's increase over its samples, each reset counted from zero (as rate() does)."""
    return values[-1] - values[0] + sum(a for a, b in zip(values, values[1:]) if b < a)


def test_downsampling_keeps_each_intervals_last_sample_and_each_counters_last_before_a_reset(tmp_path: Path) -> None:
    """Half an hour of 5 s scrapes: a counter reset once, a gauge, a histogram's bucket. Thinned to one a minute, a
    series keeps its value at each minute's end, the counter its increase across the reset; thinned to one each 10
    minutes, an instant query still finds the last sample within twice the interval."""
    store = Store(tmp_path / "data")
    try:
        for i in range(360):
            counter = i if i < 200 else i - 200  # reset at scrape 200
            page = f'c_total {counter}\ng {i % 7}\nh_bucket{{le="1"}} {i // 2}\n'
            record_scrapes(store, [Scrape(SESSION, T0 + EVERY * i, "h:1", "ray", page)])
        raw_ts, raw_g = _samples(store, "g")
        raw_c_ts, raw_c = _samples(store, "c_total")
        last_ms = T0 + EVERY * 359
        assert downsample_metrics(store, Downsampling("1m", "1d"), now_ms=0) == 0  # (at the epoch nothing is old)
        thinned = downsample_metrics(store, Downsampling("1m", "1d"), now_ms=last_ms + 3_600_000)
        ts, g = _samples(store, "g")
        minutes = {t // 60_000 for t in raw_ts}
        assert len(ts) == len(minutes) and thinned == 3 * 360 - len(_samples(store, "c_total")[0]) - 2 * len(ts)
        assert all(g[k] == raw_g[raw_ts.index(t)] and (t + EVERY) // 60_000 > t // 60_000 or t == raw_ts[-1]
                   for k, t in enumerate(ts))  # fmt: skip
        c_ts, c = _samples(store, "c_total")
        assert len(c_ts) == len(ts) + 1 and 199.0 in c  # (the last sample before the reset kept)
        since_first = [v for t, v in zip(raw_c_ts, raw_c) if t >= c_ts[0]]  # (the first minute's end on)
        assert _increase(c) == _increase(since_first) == 199 - c[0] + 159
        (scrapes,) = store.con.execute("SELECT count(*) FROM metric_scrapes").fetchone()  # type: ignore[misc]
        assert scrapes == len(ts)
        assert downsample_metrics(store, Downsampling("1m", "1d"), now_ms=last_ms + 3_600_000) == 0  # done already

        downsample_metrics(store, Downsampling("1m", "10m"), now_ms=last_ms + 3_600_000)
        ts, g = _samples(store, "g")
        assert len(ts) == len({t // 600_000 for t in raw_ts})
        source = SessionMetrics(store.con, SESSION)
        at = ts[0] + 9 * 60_000  # 9 minutes after the sample before it: past the 5-minute lookback, within 20
        assert at < ts[1]
        answer = evaluate("g", source, at, at, 1)
        assert isinstance(answer, Vector) and [s.values[0] for s in answer.series] == [g[0]]
    finally:
        store.close()


@pytest.mark.parametrize("given", ["7d", "90d,7d", "7d,x"])
def test_a_bad_downsampling_is_refused_at_start(tmp_path: Path, given: str) -> None:
    shown = CliRunner().invoke(main, ["server", "--metrics-downsample", given, "--data-dir", str(tmp_path)])
    assert shown.exit_code == 2 and "--metrics-downsample" in shown.output, shown.output


def _window_reference(name: str, window: np.ndarray) -> float:
    """A range function over one window, as Prometheus computes it sample by sample."""
    finite = window[~np.isnan(window)]
    return {
        "sum_over_time": lambda: float(window.sum()),
        "avg_over_time": lambda: float(window.mean()),
        "min_over_time": lambda: float(finite.min()) if len(finite) else np.nan,
        "max_over_time": lambda: float(finite.max()) if len(finite) else np.nan,
        "count_over_time": lambda: float(len(window)),
        "last_over_time": lambda: float(window[-1]),
        "present_over_time": lambda: 1.0,
    }[name]()


@pytest.mark.parametrize("seed", range(20))
def test_the_over_time_functions_of_every_step_at_once_are_those_of_each_window(seed: int) -> None:
    rng = np.random.default_rng(seed)
    values = rng.normal(size=int(rng.integers(1, 60))) * 10 ** rng.integers(0, 12)
    values[rng.random(len(values)) < 0.1] = np.nan
    ts = np.cumsum(rng.integers(1, 10_000, size=len(values)))
    series = Samples({}, ts, values, np.full(len(ts), NEVER))
    steps = np.sort(rng.integers(0, int(ts[-1]) + 20_000, size=40))
    range_ms = int(rng.integers(1, 60_000))
    lo, hi = np.searchsorted(ts, steps - range_ms, side="left"), np.searchsorted(ts, steps, side="right")
    for name in ("sum_over_time", "avg_over_time", "min_over_time", "max_over_time", "count_over_time",
                 "last_over_time", "present_over_time"):  # fmt: skip
        got = RANGE_FUNCTIONS[name](series, steps, lo, hi, range_ms, None)
        expected = [_window_reference(name, values[a:b]) if b > a else np.nan for a, b in zip(lo, hi)]
        np.testing.assert_allclose(
            got, expected, rtol=1e-9, atol=1e-9 * np.nanmax(np.abs(values), initial=1), err_msg=name
        )
