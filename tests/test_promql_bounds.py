"""Prometheus's query API under the requests that froze, swelled or broke it (issue 27): regexes in linear time, each
query within a samples and a time budget, Grafana's form POSTs answered, and 400s (not 500s) for the queries that
crashed the evaluator. Against real servers: one in a subprocess (its memory and its other requests watched) over a
session of 2,000 series, and the in-process app over ``tests/test_metrics.py``'s scrapes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from raysight.cli import main
from raysight.promql import matchers
from raysight.promql.budget import SERIES_COST, TOO_MANY_SAMPLES
from raysight.promql.matchers import Matcher
from raysight.promql.parse import MAX_NESTING, MAX_QUERY_CHARS
from raysight.server.app import create_app
from raysight.settings import QueryLimits, Settings
from raysight.signals.scrapes.apply import record_scrapes
from raysight.signals.scrapes.parse import Scrape
from raysight.store.store import Store
from tests import test_metrics
from tests.ray_scenarios import ServerProcess, peak_rss_mb
from tests.test_metrics import EVERY, SESSION, T0, at, load

RAY_SESSION = "session_2026-11-24_10-00-00_000000_12345"  # (40 characters: a Ray session name, its pid of 5 digits)
SERIES = 2000
GRAFANA = {"Content-Type": "application/x-www-form-urlencoded", "User-Agent": "Grafana/10.4.1"}
counters = test_metrics.counters  # (its fixture: the in-process app given its scrapes, for this module too)


@pytest.fixture(scope="module")
def probed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A real server over a session of 2,000 series scraped 60 times, 5 s apart, beside Ray's node CPU count
    labelled with the session's name (as Ray labels every metric); its query budget lowered to 1M samples."""
    data = tmp_path_factory.mktemp("promql-bounds") / "data"
    store = Store(data)
    try:
        page = "".join(f'probe{{i="{i}"}} {i}\n' for i in range(SERIES))
        page += f'ray_node_cpu_count{{SessionName="{RAY_SESSION}"}} 8\n'
        record_scrapes(store, [Scrape(RAY_SESSION, T0 + EVERY * k, "h:1", "ray", page) for k in range(60)])
    finally:
        store.close()
    with ServerProcess(data, options=["--metrics-downsample", "off", "--query-max-samples", "1000000"]) as server:
        yield server


def test_a_backtracking_regex_neither_freezes_the_server_nor_takes_long(probed: ServerProcess) -> None:
    """The probe's ``label_replace``, whose regex backtracks exponentially in Python's ``re`` (~7 s on this session
    name, holding the GIL: every request waited, ingest too), runs in RE2: its answer comes at once, and
    ``/api/raysight/ping`` answers within 1 s all the while (polled until the answer is in)."""
    hostile = 'label_replace(ray_node_cpu_count, "x", "$1", "SessionName", ".{12}(?:[\\\\w-]+)+X")'
    with (
        httpx.Client(base_url=probed.url, timeout=30) as http,
        httpx.Client(base_url=probed.url, timeout=1) as pings,
        ThreadPoolExecutor(1) as pool,
    ):
        asked = pool.submit(http.get, "/api/v1/query", params={"query": hostile, "time": at(59)})
        while True:
            assert pings.get("/api/raysight/ping").status_code == 200  # (a ReadTimeout past 1 s)
            if asked.done():
                break
            time.sleep(0.05)
        answer = asked.result()
        assert answer.status_code == 200, answer.text
        (series,) = answer.json()["data"]["result"]
        assert "x" not in series["metric"]  # (no match: the value has no X)
        # the same engine expands what matched, Prometheus's way
        pid = 'label_replace(ray_node_cpu_count, "pid", "$1", "SessionName", "session_.*_(\\\\d+)")'
        (matched,) = http.get("/api/v1/query", params={"query": pid, "time": at(59)}).json()["data"]["result"]
        assert matched["metric"]["pid"] == "12345"


def test_a_query_over_its_samples_budget_is_refused_and_the_server_stays_small(probed: ServerProcess) -> None:
    """The probe's ``query_range`` over 2,000 series at 11,000 steps (22M points: 36.6 s and 2.9 GB before) and
    ``{__name__=~".+"}`` over an hour at 1 s are refused with Prometheus's execution error, before the points are
    made; so is a query just over the server's ``--query-max-samples`` (1M here), while one within it is answered.
    (The series hold 60 samples each here, not the probe's hours of them: the points they would make are refused.)"""
    refused = {"status": "error", "errorType": "execution", "error": TOO_MANY_SAMPLES}
    with httpx.Client(base_url=probed.url, timeout=30) as http:
        for query, seconds, step in (("probe", 11_000, "1"), ('{__name__=~".+"}', 3600, "1"), ("probe", 295, "0.5")):
            params = {"query": query, "start": at(0), "end": at(0) + seconds, "step": step}
            answer = http.get("/api/v1/query_range", params=params)
            assert (answer.status_code, answer.json()) == (422, refused), query
        # 2,000 series (each counted as 128 samples: their labels) at 148 steps, and their 120k samples: within it
        within = http.get("/api/v1/query_range", params={"query": "probe", "start": at(0), "end": at(59), "step": "2"})
        assert within.status_code == 200, within.text[:300]
        result = within.json()["data"]["result"]
        assert len(result) == SERIES and all(len(r["values"]) == 148 for r in result)
    assert peak_rss_mb(probed.proc.pid) < 400  # type: ignore[union-attr]


def test_each_series_found_counts_for_its_labels(tmp_path: Path) -> None:
    """A series found holds its labels (~2 KB as Python objects): it counts as SERIES_COST samples, so a query over
    many series at few steps is bounded too (a session of 1M series would have held 2 GB at one step)."""
    limits = QueryLimits(max_samples=2 * SERIES_COST)
    with TestClient(
        create_app(Settings(tmp_path / "data").replace(fold_linger_s=0, fold_rest=0, queries=limits))
    ) as server:
        load(server)
        one = server.get("/api/v1/query", params={"query": 'req_total{route="/a"}', "time": at(12)})
        assert one.status_code == 200 and len(one.json()["data"]["result"]) == 1  # 128 + 13 samples + 1 point
        two = server.get("/api/v1/query", params={"query": "req_total", "time": at(12)})
        assert two.status_code == 422 and two.json()["error"] == TOO_MANY_SAMPLES  # 2 x (128 + 1), before loading


def test_each_error_is_typed_as_prometheus_types_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Prometheus's type of each error (``web/api/v1/api.go``), with its status: a parameter the caller must fix is
    bad_data (400), a query over its samples budget execution (422), one the server is too busy to take unavailable
    (503), a failure of the server's own internal (500). (All but the query's own errors said bad_data.)"""
    limits = QueryLimits(max_samples=2 * SERIES_COST)
    app = create_app(Settings(tmp_path / "data").replace(fold_linger_s=0, fold_rest=0, queries=limits))
    with TestClient(app, raise_server_exceptions=False) as server:
        load(server)
        query = {"query": "req_total", "time": str(at(12))}
        assert server.get("/api/v1/query").json()["errorType"] == "bad_data"
        too_many = server.get("/api/v1/query", params=query)
        assert (too_many.status_code, too_many.json()["errorType"]) == (422, "execution")
        bodies = server.app.state.raysight.bodies
        bodies.held = bodies.limit  # (as many bodies being read as the server holds at once)
        busy = server.post("/api/v1/query", content=urlencode(query), headers=GRAFANA)
        bodies.held = 0
        assert (busy.status_code, busy.json()["errorType"]) == (503, "unavailable"), busy.text

        def fails(*args: object) -> None:
            raise RuntimeError("a failure of the server's own")

        monkeypatch.setattr("raysight.signals.scrapes.metrics_query.metadata", fails)
        failed = server.get("/api/v1/metadata")
        assert failed.status_code == 500 and failed.json() == {
            "status": "error",
            "errorType": "internal",
            "error": "internal error (RuntimeError); the server's log says more",
        }


def test_a_query_past_its_time_budget_stops_with_prometheus_timeout(tmp_path: Path) -> None:
    """Each query has a time budget (``--query-timeout``), checked as it goes: past it, Prometheus's timeout error
    (503). (A budget of none: the first check stops it.)"""
    with TestClient(
        create_app(Settings(tmp_path / "data").replace(fold_linger_s=0, fold_rest=0, queries=QueryLimits(timeout_s=0)))
    ) as server:
        load(server)
        answer = server.get("/api/v1/query", params={"query": "sum(rate(req_total[1m]))", "time": at(12)})
        assert answer.status_code == 503
        assert answer.json() == {
            "status": "error",
            "errorType": "timeout",
            "error": "query timed out in expression evaluation",
        }


def test_regexes_are_anchored_as_prometheus_and_their_cache_is_bounded() -> None:
    """Prometheus 2.42's regex semantics (``^(?:…)$``, ``.`` matching no newline), in RE2, each compiled once while
    it is among the last 256 used (the probe's 300 patterns grew the server by 140 MB, never given back)."""
    assert Matcher("a", "=~", "b|c").matches({"a": "c"}) and not Matcher("a", "=~", "b").matches({"a": "abc"})
    assert not Matcher("a", "=~", "x.y").matches({"a": "x\ny"}) and Matcher("a", "!~", "x.y").matches({"a": "x\ny"})
    for i in range(300):
        Matcher("a", "=~", f"[a-z]+{i}").matches({"a": "x"})
    assert matchers._compiled.cache_info().currsize == 256


def test_an_invalid_regex_is_a_400_naming_it(counters: TestClient) -> None:
    query = 'label_replace(req_total, "x", "$1", "route", "(")'
    answer = counters.get("/api/v1/query", params={"query": query, "time": at(4)})
    assert answer.status_code == 400 and answer.json()["errorType"] == "bad_data"
    assert answer.json()["error"].startswith("invalid regular expression '(': missing )")


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/api/v1/query_range", {"query": 'req_total{route="/a"}', "start": at(0), "end": at(2), "step": "2.5"}),
        ("/api/v1/query", {"query": "sum by (job) (req_total)", "time": at(4)}),
        (f"/sessions/{SESSION}/api/v1/query", {"query": "req_total", "time": at(4)}),
        ("/api/v1/series", [("match[]", 'req_total{route="/a"}'), ("match[]", "depth")]),
        ("/api/v1/labels", [("match[]", "lat_bucket")]),
    ],
)
def test_grafanas_form_posts_are_answered_as_the_same_gets(
    counters: TestClient,
    path: str,
    params: dict[str, Any] | list[tuple[str, str]],
) -> None:
    """Grafana's Prometheus data source POSTs its queries as forms (its default), ``match[]`` repeated."""
    posted = counters.post(path, content=urlencode(params), headers=GRAFANA)
    assert posted.status_code == 200, posted.text
    assert posted.json() == counters.get(path, params=params).json()
    assert posted.json()["data"], posted.json()  # (an answer, not an empty one)


def test_a_post_not_a_form_too_big_or_from_another_site_is_refused(counters: TestClient) -> None:
    """A JSON or text body is refused with 415 naming the form Prometheus's API takes (JSON was a 500, a form a
    415); a form over 1 MiB with 413; another site's form (its Origin) with 403, as every POST from one is."""
    for headers, body in (({"Content-Type": "application/json"}, b'{"query": "up"}'), ({}, b"query=up")):
        answer = counters.post("/api/v1/query", content=body, headers=headers)
        assert answer.status_code == 415 and answer.json()["status"] == "error", answer.text
        assert "application/x-www-form-urlencoded" in answer.json()["error"]
    big = counters.post("/api/v1/query", content=b"query=" + b"x" * 1024 * 1024, headers=GRAFANA)
    assert big.status_code == 413 and big.json()["status"] == "error"
    cross = counters.post("/api/v1/query", content=b"query=up", headers={**GRAFANA, "Origin": "https://evil.example"})
    assert cross.status_code == 403


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"query": "req_total", "step": "NaN"}, 'invalid parameter "step": cannot parse "NaN"'),
        ({"query": "req_total", "start": "NaN"}, 'invalid parameter "start": cannot parse "NaN"'),
        ({"query": "req_total", "start": "-1e300"}, 'invalid parameter "start"'),
        ({"query": "req_total @ 1e18"}, "@ time is out of range"),
        ({"query": "req_total @ -5"}, "before 1970"),
        ({"query": "rate(req_total[1000000000y])"}, "range is out of range"),
        ({"query": "-" * 2000 + "req_total"}, "nests too deep"),
        ({"query": "(" * 5000 + "req_total" + ")" * 5000}, "nests too deep"),
        ({"query": "abs(" * 800 + "req_total" + ")" * 800}, "nests too deep"),
        ({"query": "+".join(["req_total"] * 3000)}, "nests too deep"),
        ({"query": "req_total" + " " * MAX_QUERY_CHARS}, "characters long"),
    ],
)
def test_queries_that_broke_the_evaluator_get_400s(
    counters: TestClient,
    params: dict[str, str],
    says: str,
) -> None:
    """The probe's queries, at its sizes (500s before: ValueError, RecursionError, +1.3 GB): refused before they are
    parsed or evaluated, in Prometheus's error shape. (POSTed: the longest is over a URL's length.)"""
    form = {"start": at(0), "end": at(12), "step": "5", **params}
    answer = counters.post("/api/v1/query_range", content=urlencode(form), headers=GRAFANA)
    assert answer.status_code == 400 and answer.json()["errorType"] == "bad_data", answer.text[:300]
    assert says in answer.json()["error"]


def test_nan_parameters_evaluate_as_prometheus_and_the_deepest_query_allowed_runs(
    counters: TestClient,
) -> None:
    """``quantile(NaN, x)`` is no error in Prometheus (its quantile is NaN: here, no point); ``topk``'s k must fit
    in int64 (its execution error). A query at the nesting bound evaluates (its evaluator recursing that deep)."""
    for query in ("quantile(NaN, req_total)", "histogram_quantile(NaN, lat_bucket)"):
        answer = counters.get("/api/v1/query", params={"query": query, "time": at(4)})
        assert answer.json() == {"status": "success", "data": {"resultType": "vector", "result": []}}
    topk = counters.get("/api/v1/query", params={"query": "topk(NaN, req_total)", "time": at(4)})
    assert topk.status_code == 422 and topk.json()["error"] == "Scalar value NaN overflows int64"
    deepest = "abs(" * (MAX_NESTING - 1) + "-req_total" + ")" * (MAX_NESTING - 1)
    answer = counters.get("/api/v1/query", params={"query": deepest, "time": at(4)})
    assert answer.status_code == 200 and sorted(float(r["value"][1]) for r in answer.json()["data"]["result"]) == [
        20.0,
        40.0,
    ]


def test_metrics_top_over_the_query_budget_says_so_with_a_503(tmp_path: Path) -> None:
    """`raysight metrics top` evaluates PromQL too, within the server's budget: past it the answer says which option
    to raise (it was a 500)."""
    app = create_app(
        Settings(tmp_path / "data").replace(fold_linger_s=0, fold_rest=0, queries=QueryLimits(max_samples=100))
    )
    page = "".join(f'raysight_process_cpu_seconds_total{{NodeId="n",pid="{pid}"}} 1\n' for pid in range(50))
    with TestClient(app) as client:
        body = {"session": RAY_SESSION, "scraped_ms": T0, "target": {"instance": "h", "job": "raysight"}, "text": page}
        assert client.post("/ingest/agent/metrics", json=body).status_code == 200
        answer = client.get("/api/raysight/metrics/top", params={"at": T0})
        assert answer.status_code == 503 and "--query-max-samples" in answer.json()["error"], answer.text


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [("--query-max-samples", "0", "0 is not in the range x>=1"), ("--query-timeout", "soon", "soon")],
)
def test_the_query_budget_options_refuse_what_is_no_budget(tmp_path: Path, option: str, value: str, says: str) -> None:
    refused = CliRunner().invoke(main, ["server", option, value, "--data-dir", str(tmp_path)])
    assert refused.exit_code == 2 and says in refused.output, refused.output


def test_queries_past_the_concurrency_bound_wait_their_turn_within_their_time(tmp_path: Path) -> None:
    """At most ``--query-max-concurrency`` queries are evaluated at once (each may hold its whole samples budget);
    another waits its turn, and that wait counts in its time: with the one place taken, a query times out in the
    queue, as in Prometheus; with it free, the same query is answered."""
    limits = QueryLimits(timeout_s=0.5, max_concurrency=1)
    with TestClient(
        create_app(Settings(tmp_path / "data").replace(fold_linger_s=0, fold_rest=0, queries=limits))
    ) as server:
        load(server)
        queries = server.app.state.raysight.queries
        params = {"query": "sum(rate(req_total[1m]))", "time": at(12)}
        server.portal.call(queries.acquire)  # (a query being evaluated)
        try:
            waited = server.get("/api/v1/query", params=params)
        finally:
            server.portal.call(queries.release)
        assert waited.status_code == 503 and waited.json()["error"] == "query timed out in query queue"
        assert server.get("/api/v1/query", params=params).json()["status"] == "success"
