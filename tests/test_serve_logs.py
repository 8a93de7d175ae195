"""Serve's logs: its components' files written by Ray's own logger setup (``configure_component_logger``: text or
JSON, access logs on or off, a level per deployment, rotation), shipped by a real agent to a real server, each line
found by its request, application, deployment and replica; and the pure parse of its lines."""

from __future__ import annotations

import logging
import logging.handlers
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import httpx
import orjson
import pytest
from click.testing import CliRunner

from raysight import wire
from raysight.cli import main
from raysight.client import Client
from raysight.signals.log_lines.parse import LINE_FIELDS, Access, access, read_lines
from tests.ray_scenarios import ServerProcess, agent_command, wait_folded

SESSION = "session_2026-11-27_01-02-03_000000_9"


@pytest.mark.parametrize(
    ("message", "parsed"),
    [
        ("GET / 200 8.9ms", Access("GET", "/", "200", 8.9)),
        ("CALL __call__ OK 0.2ms", Access("CALL", "__call__", "OK", 0.2)),
        ("POST /shop/cart 503 120.0ms", Access("POST", "/shop/cart", "503", 120.0)),
        ("CALL predict CANCELLED 3.0ms", Access("CALL", "predict", "CANCELLED", 3.0)),
        ("127.0.0.1:50312 GET /hello 200 1.5ms", Access("GET", "/hello", "200", 1.5, "127.0.0.1:50312")),
        ("[::1]:50312 CALL f ERROR 1.0ms", Access("CALL", "f", "ERROR", 1.0, "[::1]:50312")),
        ("added 3 items to the cart", None),
        ("GET / 200 fast", None),
    ],
)
def test_an_access_line_s_method_route_status_and_latency_are_read(message: str, parsed: Access | None) -> None:
    assert access(message) == parsed


def _fields(name: str, text: str) -> dict[str, Any]:
    with duckdb.connect() as con:
        read = con.execute(read_lines("SELECT ? AS name, ? AS text"), [name, text])
        row = dict(zip([column for column, *_ in read.description], read.fetchall()[0]))
    return {field: row[field] for field in LINE_FIELDS if field != "own" and row[field] is not None}


def test_what_a_serve_line_says_and_its_file_s_name_where_it_does_not() -> None:
    replica = "replica_my_app_Model_ab12CD34.log"
    of_replica = {"component": "replica", "component_id": "ab12CD34", "replica": "ab12CD34"}
    stamp = "2026-11-27 08:44:05,242"
    assert _fields(replica, f"INFO {stamp} my_app_Model ab12CD34 req-1 -- CALL __call__ OK 0.2ms") == {
        **of_replica,
        "level": "INFO",
        "request_id": "req-1",
        "application": "my",  # (text alone cannot tell an application's underscore from its deployment's)
        "deployment": "app_Model",
    }
    assert _fields(replica, f"WARNING {stamp} my_app_Model ab12CD34 req-2 filename.py -- GET /x 404 1.0ms") == {
        **of_replica,
        "level": "WARNING",
        "request_id": "req-2",
        "route": "/x",
        "application": "my",
        "deployment": "app_Model",
    }
    json_line = {"levelname": "DEBUG", "message": "GET / 200 1.0ms", "request_id": "r-3", "route": "/"}
    json_line |= {"application": "my_app", "deployment": "my_app_Model", "replica": "ab12CD34"}
    assert _fields(replica, orjson.dumps(json_line).decode()) == {
        **of_replica,
        "level": "DEBUG",
        "request_id": "r-3",
        "route": "/",
        "application": "my_app",
        "deployment": "Model",
    }
    assert _fields(replica, "a print, in no format") == {**of_replica, "application": "my", "deployment": "app_Model"}
    assert _fields("replica_Model_ab12CD34.log", "hello") == {**of_replica, "deployment": "Model"}  # app unnamed
    proxy = f"INFO {stamp} proxy 10.0.0.1 req-4 -- 10.0.0.9:5000 GET /shop 200 8.9ms"
    assert _fields("proxy_10.0.0.1.log", proxy) == {
        "component": "proxy",
        "component_id": "10.0.0.1",
        "level": "INFO",
        "request_id": "req-4",
        "route": "/shop",
    }
    controller = f"INFO {stamp} controller 4242 -- Controller starting -- version 2.60"
    assert _fields("controller_4242.log", controller) == {
        "component": "controller",
        "component_id": "4242",
        "level": "INFO",
    }
    assert _fields("raylet.out", f"INFO {stamp} proxy 10.0.0.1 req-4 -- GET / 200 1.0ms") == {"level": "INFO"}


class _Serve:
    """Ray's Serve logger, set up for one component after another as Ray sets it up in each (its file under
    ``serve_dir``), and requests logged within their context as Serve logs them."""

    def __init__(self, serve_dir: Path) -> None:
        self.serve_dir = serve_dir
        self.logger = logging.getLogger("ray.serve")
        self.saved = (self.logger.level, self.logger.propagate, list(self.logger.handlers))

    def component(self, name: str, component_id: str, replica: bool = False, max_bytes: int = 0, **config: Any) -> None:
        from ray.serve._private.common import ServeComponentType
        from ray.serve._private.logging_utils import configure_component_logger
        from ray.serve.schema import LoggingConfig

        self.close()
        configure_component_logger(
            component_name=name,
            component_id=component_id,
            logging_config=LoggingConfig(logs_dir=str(self.serve_dir), **config),
            component_type=ServeComponentType.REPLICA if replica else None,
            max_bytes=max_bytes,
            backup_count=2,
        )

    def log(self, message: str, request: tuple[str, str, str] | None = None, level: int = logging.INFO) -> None:
        """Log ``message`` (within the request (route, request ID, application)); an access line where it is one."""
        from ray.serve import context

        token = context._serve_request_context.set(
            context._RequestContext(*request[:2], app_name=request[2]) if request else context._RequestContext()
        )
        try:
            extra = {"serve_access_log": True, "request_id": request[1]} if access(message) and request else {}
            self.logger.log(level, message, extra=extra)
        finally:
            context._serve_request_context.reset(token)

    def close(self) -> None:
        for handler in self.logger.handlers:
            handler.close()
            if isinstance(handler, logging.handlers.MemoryHandler) and handler.target is not None:
                handler.target.close()
        self.logger.handlers.clear()

    def restore(self) -> None:
        self.close()
        self.logger.level, self.logger.propagate, self.logger.handlers[:] = self.saved


A, B, C = ("/shop", "req-a", "shop"), ("/shop", "req-b", "shop"), ("/quiet", "req-c", "quiet")
D = ("/slow", "req/d", "shop")  # a slow one, its ID (a client's X-Request-ID) holding a /


def _write_serve_logs(serve_dir: Path) -> None:
    """A session's Serve logs: the controller's, a proxy's, and three replicas' (``shop``'s ``Cart`` in text at INFO,
    rotated; ``shop``'s ``Model`` in JSON at DEBUG; ``quiet``'s ``Q`` in text without access lines)."""
    pytest.importorskip("ray.serve")
    serve = _Serve(serve_dir)
    try:
        serve.component("controller", "4242")
        serve.log("Controller starting (version='2.60.0').")
        serve.component("proxy", "10.0.0.1")
        for route, request_id, _ in (A, B, C):
            serve.log(f"GET {route} {503 if request_id == 'req-b' else 200} 8.9ms", (route, request_id, ""))
        serve.log("GET /slow 200 812.5ms", (D[0], D[1], ""))
        serve.component("shop_Cart", "cart0001", replica=True, max_bytes=300)
        serve.log("a debug line of Cart, under its INFO level", A, logging.DEBUG)
        serve.log("added 3 items to the cart", A)
        serve.log("GET /shop 200 1.1ms", A)
        serve.log("emptied the cart", B)
        serve.log("GET /shop 503 0.4ms", B)
        serve.component("shop_Model", "model001", replica=True, encoding="JSON", log_level="DEBUG")
        serve.log("scoring 3 items", A, logging.DEBUG)
        serve.log("CALL __call__ OK 0.2ms", A)
        serve.log("CALL __call__ ERROR 0.3ms", B, logging.ERROR)
        serve.log("CALL __call__ OK 800.1ms", D)
        serve.component("quiet_Q", "quiet001", replica=True, enable_access_log=False)
        serve.log("working quietly", C)
        serve.log("GET /quiet 200 0.9ms", C)  # (an access line: left out)
    finally:
        serve.restore()
    with (serve_dir / "replica_shop_Cart_cart0001.log").open("a") as f:
        f.write("a print of Cart, in no format\n")


@contextmanager
def serve_logs_server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A real server, given a session's Serve logs (:func:`_write_serve_logs`) by a real agent (``--once``)."""
    serve_dir = tmp_path / "ray" / SESSION / "logs" / "serve"
    serve_dir.mkdir(parents=True)
    _write_serve_logs(serve_dir)
    assert (serve_dir / "replica_shop_Cart_cart0001.log.1").exists()  # rotated: the same replica's
    server = ServerProcess(tmp_path / "data").start()
    try:
        command = agent_command(server.url, tmp_path / "ray", tmp_path / "state", "--once")
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        with Client(server.url) as client:
            deadline = time.monotonic() + 10
            while client.ingest_backlog()["batches"] and time.monotonic() < deadline:  # acknowledged: folding
                time.sleep(0.05)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with serve_logs_server(tmp_path_factory.mktemp("serve_logs")) as server:
        yield server


def _cli(server: ServerProcess, *options: str) -> list[tuple[str, str]]:
    """`raysight logs OPTIONS`: (component ID, message) of each line found."""
    result = CliRunner().invoke(main, ["logs", "--server", server.url, "--format", "json", *options])
    assert result.exit_code == 0, result.output
    return [_said(orjson.loads(line)) for line in result.stdout.splitlines()]


def _said(row: dict[str, Any]) -> tuple[str, str]:
    text = row["text"]
    message = orjson.loads(text)["message"] if text.startswith("{") else text.split(" -- ", 1)[-1]
    return row["component_id"], message


CART, MODEL, PROXY = "cart0001", "model001", "10.0.0.1"
CART_LINES = [
    (CART, "added 3 items to the cart"),
    (CART, "GET /shop 200 1.1ms"),
    (CART, "emptied the cart"),
    (CART, "GET /shop 503 0.4ms"),
    (CART, "a print of Cart, in no format"),
]
MODEL_LINES = [
    (MODEL, "scoring 3 items"),
    (MODEL, "CALL __call__ OK 0.2ms"),
    (MODEL, "CALL __call__ ERROR 0.3ms"),
    (MODEL, "CALL __call__ OK 800.1ms"),
]


def test_a_request_s_lines_are_found_in_every_component_by_its_id(shipped: ServerProcess) -> None:
    assert sorted(_cli(shipped, "--request-id", "req-a")) == sorted(
        [
            (PROXY, "GET /shop 200 8.9ms"),
            (CART, "added 3 items to the cart"),
            (CART, "GET /shop 200 1.1ms"),
            (MODEL, "scoring 3 items"),
            (MODEL, "CALL __call__ OK 0.2ms"),
        ]
    )
    # the replica's access lines off: its own line of the request, and the proxy's access line
    assert _cli(shipped, "--request-id", "req-c") == [(PROXY, "GET /quiet 200 8.9ms"), ("quiet001", "working quietly")]
    assert _cli(shipped, "--request-id", "req-z") == []


def test_an_application_s_deployment_s_and_replica_s_lines_are_found_rotated_json_and_plain_alike(
    shipped: ServerProcess,
) -> None:
    assert sorted(_cli(shipped, "--replica", CART)) == sorted(CART_LINES)  # its rotated file's and a print
    assert sorted(_cli(shipped, "--deployment", "Model")) == sorted(MODEL_LINES)  # JSON, at DEBUG
    assert sorted(_cli(shipped, "--app", "shop")) == sorted(CART_LINES + MODEL_LINES)
    assert _cli(shipped, "--app", "quiet") == [("quiet001", "working quietly")]
    assert _cli(shipped, "--app", "shop", "--deployment", "Cart", "--grep", "emptied") == [CART_LINES[2]]


def test_the_api_filters_alike_and_names_a_bad_value(shipped: ServerProcess) -> None:
    def rows(**params: str) -> list[dict[str, Any]]:
        answer = httpx.get(shipped.url + wire.LOGS, params={"session": SESSION, **params})
        assert answer.status_code == 200, answer.text
        return answer.json()["rows"]  # type: ignore[no-any-return]

    (line,) = rows(request_id="req-b", deployment="Model")
    assert {k: line[k] for k in ("component", "replica", "application", "deployment", "route", "level")} == {
        "component": "replica",
        "replica": MODEL,
        "application": "shop",
        "deployment": "Model",
        "route": "/shop",
        "level": "ERROR",
    }
    assert [_said(row) for row in rows(replica="quiet001")] == [("quiet001", "working quietly")]
    (proxy,) = rows(request_id="req-b", file="proxy")
    assert (proxy["component"], proxy["route"], proxy["application"]) == ("proxy", "/shop", None)
    for params, why in [
        ({"replica": "cart-1"}, "replica must be a Serve replica's ID"),
        ({"request_id": "a b"}, "request_id must be up to 256 printable characters"),
    ]:
        answer = httpx.get(shipped.url + wire.LOGS, params=params)
        assert answer.status_code == 400 and why in answer.json()["error"], answer.text


def _requests(server: ServerProcess, *options: str) -> dict[str, Any]:
    """`raysight serve requests OPTIONS --format json`."""
    result = CliRunner().invoke(main, ["serve", "requests", "--server", server.url, "--format", "json", *options])
    assert result.exit_code == 0, result.output
    return orjson.loads(result.stdout)  # type: ignore[no-any-return]


def _ids(server: ServerProcess, *options: str) -> list[str]:
    return sorted(r["request_id"] for r in _requests(server, *options)["requests"])


def test_serve_requests_are_found_by_status_latency_app_and_route(shipped: ServerProcess) -> None:
    answer = _requests(shipped)
    assert (answer["session"], answer["total"]) == (SESSION, 4)
    by_id = {r["request_id"]: r for r in answer["requests"]}
    failed = by_id["req-b"]
    said = ("method", "route", "status", "latency_ms", "error", "application")
    assert [failed[k] for k in said] == ["GET", "/shop", "503", 8.9, True, "shop"]
    assert failed["host"] and {r["host"] for r in failed["replicas"]} == {failed["host"]}  # (the agent's node)
    assert failed["proxy"]["component"] == "proxy"
    crossed = [
        (r["deployment"], r["replica"], r["method"], r["call"], r["status"], r["latency_ms"])
        for r in failed["replicas"]
    ]
    assert sorted(crossed) == [
        ("Cart", CART, "GET", None, "503", 0.4),
        ("Model", MODEL, "CALL", "__call__", "ERROR", 0.3),
    ]
    assert [by_id[i]["error"] for i in ("req-a", "req-c", "req/d")] == [False, False, False]
    assert _ids(shipped, "--status", "5xx") == _ids(shipped, "--status", "503") == _ids(shipped, "--status", "error")
    assert _ids(shipped, "--status", "5xx") == ["req-b"]
    assert _ids(shipped, "--status", "200") == ["req-a", "req-c", "req/d"]
    (slow,) = _requests(shipped, "--min-latency", "250ms")["requests"]
    assert (slow["request_id"], slow["latency_ms"], slow["route"]) == ("req/d", 812.5, "/slow")
    assert [(r["deployment"], r["latency_ms"]) for r in slow["replicas"]] == [("Model", 800.1)]
    assert _ids(shipped, "--deployment", "Model", "--min-latency", "0.25ms") == ["req-b", "req/d"]
    assert _ids(shipped, "--app", "shop") == ["req-a", "req-b", "req/d"]
    assert _ids(shipped, "--route", "/quiet") == ["req-c"]  # (its replica's access lines off: its proxy's alone)
    assert _ids(shipped, "--app", "quiet") == []
    assert _ids(shipped, "--since", "2000-01-01", "--until", "2001-01-01") == []
    assert len(_requests(shipped, "--limit", "2")["requests"]) == 2


def test_serve_latency_percentiles_by_route_and_deployment(shipped: ServerProcess) -> None:
    routes = {r["route"]: r for r in _requests(shipped, "--by", "route")["latencies"]}
    assert {route: (r["requests"], r["errors"], r["p50_ms"]) for route, r in routes.items()} == {
        "/quiet": (1, 0, 8.9),
        "/shop": (2, 1, 8.9),
        "/slow": (1, 0, 812.5),
    }
    deployments = {
        (r["application"], r["deployment"]): r for r in _requests(shipped, "--by", "deployment")["latencies"]
    }
    assert {key: (r["requests"], r["errors"]) for key, r in deployments.items()} == {
        ("shop", "Cart"): (2, 1),
        ("shop", "Model"): (3, 1),
    }
    model = deployments[("shop", "Model")]
    assert model["p50_ms"] == 0.3 and model["p50_ms"] < model["p95_ms"] < model["p99_ms"] < 800.1
    (slow,) = _requests(shipped, "--by", "deployment", "--min-latency", "250ms")["latencies"]
    assert (slow["deployment"], slow["requests"], slow["p99_ms"]) == ("Model", 1, 800.1)


def test_a_serve_request_is_shown_whole_with_its_lines_in_every_component(shipped: ServerProcess) -> None:
    shown = CliRunner().invoke(main, ["serve", "request", "req-b", "--server", shipped.url])
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.startswith("Request req-b: GET /shop 503 8.9ms (failed)")
    for seen in ("proxy", "ERROR", "__call__", "0.4ms", "[replica_shop_Cart_cart0001.log", "emptied the cart"):
        assert seen in shown.stdout
    answer = Client(shipped.url).serve_request("req-b")
    assert (answer["request"]["proxy"]["component"], answer["request"]["proxy"]["status"]) == ("proxy", "503")
    # (the replicas in the order logged: the files' lines of one millisecond come in the order the agent read them)
    assert sorted((a["component"], a["status"]) for a in answer["request"]["replicas"]) == [
        ("replica", "503"),
        ("replica", "ERROR"),
    ]
    assert sorted(_said(row) for row in answer["lines"]) == sorted(
        [(PROXY, "GET /shop 503 8.9ms"), CART_LINES[2], CART_LINES[3], MODEL_LINES[2]]
    )
    slow = CliRunner().invoke(main, ["serve", "request", "req/d", "--server", shipped.url])  # (its ID holds a /)
    assert slow.exit_code == 0 and slow.stdout.startswith("Request req/d: GET /slow 200 812.5ms"), slow.output
    missing = CliRunner().invoke(main, ["serve", "request", "req-z", "--server", shipped.url])
    assert missing.exit_code == 1 and "no Serve request req-z" in missing.output


def test_the_serve_requests_api_names_a_bad_parameter(shipped: ServerProcess) -> None:
    for path, params, why in [
        (wire.SERVE_REQUESTS, {"status": "teapot"}, "status must be an HTTP code"),
        (wire.SERVE_REQUESTS, {"min_latency": "fast"}, "min_latency"),
        (wire.SERVE_REQUESTS, {"by": "host"}, "by must be one of route, deployment"),
        (wire.SERVE_REQUESTS, {"limit": "-1"}, "limit must be an integer"),
        (wire.SERVE_REQUESTS, {"limit": "20000"}, "limit must be 0 to 10000"),
        (wire.SERVE_REQUESTS, {"offset": "-1"}, "offset must be an integer"),
        (wire.SERVE_REQUESTS, {"since": "soon"}, "since"),
        (wire.SERVE_LATENCY, {"by": "host"}, "by must be one of route, deployment"),
        (wire.SERVE_LATENCY, {"step": "0.5ms"}, "step must be at least 1ms"),
        (wire.SERVE_LATENCY, {"step": "fast"}, "step"),
        (wire.SERVE_LATENCY, {"step": "1ms", "since": "-1h"}, "over 10000"),
        (wire.SERVE_LATENCY, {"status": "teapot"}, "status must be an HTTP code"),
        (wire.SERVE_LATENCY, {"min_latency": "slow"}, "min_latency"),
    ]:
        answer = httpx.get(shipped.url + path, params=params)
        assert answer.status_code == 400 and why in answer.json()["error"], (path, params, answer.text)
    answer = httpx.get(shipped.url + wire.path(wire.SERVE_REQUEST, request_id="a\x01b"))
    assert answer.status_code == 400 and "request_id must be" in answer.json()["error"], answer.text


# ── The dashboard's Serve page (issue 33, point 7): what its API adds ─────────────────────────────────────────────
def send_request_span(url: str, request_id: str, start_ns: int) -> None:
    """Send a server one span of :data:`SESSION`'s (OTLP in JSON), within the Serve request ``request_id``."""
    attribute = {"key": wire.ATTR_SERVE_REQUEST_ID, "value": {"stringValue": request_id}}
    span = {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "proxy_http_request", "attributes": [attribute]}
    span |= {"startTimeUnixNano": str(start_ns), "endTimeUnixNano": str(start_ns + 5_000_000)}
    resource = {"attributes": [{"key": wire.ATTR_SESSION, "value": {"stringValue": SESSION}}]}
    export = orjson.dumps({"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": [span]}]}]})
    sent = httpx.post(url + wire.OTLP_TRACES, content=export, headers={"Content-Type": "application/json"})
    assert sent.status_code == 200, sent.text


def test_serve_requests_page_by_offset(shipped: ServerProcess) -> None:
    def ids(**params: str) -> tuple[int, list[str]]:
        answer = httpx.get(shipped.url + wire.SERVE_REQUESTS, params=params).json()
        return answer["total"], [r["request_id"] for r in answer["requests"]]

    total, newest = ids()
    assert (total, ids(limit="2"), ids(limit="2", offset="2")) == (4, (4, newest[:2]), (4, newest[2:]))
    assert ids(offset="10") == (4, [])  # (past the last page: still counted)


def test_serve_latency_over_time_by_route_and_deployment(shipped: ServerProcess) -> None:
    """Each route's (and deployment's) totals, as `serve requests --by` gives them, and its requests, failures and
    percentiles in bins that cover the session's span."""

    def latency(**params: str) -> dict[str, Any]:
        answer = httpx.get(shipped.url + wire.SERVE_LATENCY, params=params)
        assert answer.status_code == 200, answer.text
        return answer.json()  # type: ignore[no-any-return]

    routes = latency(step="1s")
    assert (routes["by"], routes["step_ms"], routes["live"]) == ("route", 1000, True)  # (no end: still live)
    totals = _requests(shipped, "--by", "route")["latencies"]
    assert [{k: v for k, v in s.items() if k != "bins"} for s in routes["series"]] == totals
    n = (routes["end_ms"] - routes["start_ms"]) // 1000 + 1
    for series in routes["series"]:
        bins = series["bins"]
        assert {len(v) for v in bins.values()} == {n}
        assert (sum(bins["requests"]), sum(bins["errors"])) == (series["requests"], series["errors"])
        assert all((p is None) == (count == 0) for p, count in zip(bins["p99_ms"], bins["requests"]))
    slow = next(s for s in routes["series"] if s["route"] == "/slow")
    assert [p for p in slow["bins"]["p50_ms"] if p is not None] == [812.5]
    deployments = {(s["application"], s["deployment"]): s for s in latency(by="deployment")["series"]}
    assert {key: (s["requests"], sum(s["bins"]["errors"])) for key, s in deployments.items()} == {
        ("shop", "Cart"): (2, 1),
        ("shop", "Model"): (3, 1),
    }
    (slowest,) = latency(by="deployment", min_latency="250ms")["series"]
    assert (slowest["deployment"], max(p or 0 for p in slowest["bins"]["p99_ms"])) == ("Model", 800.1)
    assert latency(by="deployment", step="24h")["step_ms"] == 86_400_000  # (its 400s: the test above)


def test_a_session_says_whether_serve_ran_and_a_trace_which_requests_it_served(shipped: ServerProcess) -> None:
    other = "session_2000-01-01_00-00-00_000000_1"  # (a poll that found no ServeController)
    body = {"session": other, "polled_ns": time.time_ns(), "resources": {}, "errors": {}, "serve": None}
    assert httpx.post(shipped.url + wire.AGENT_RAY_STATE, json=body).status_code == 200
    send_request_span(shipped.url, "req-b", time.time_ns())
    wait_folded(shipped.url)
    sessions = {s["session"]: s["serve"] for s in httpx.get(shipped.url + wire.SESSIONS).json()["sessions"]}
    assert sessions == {SESSION: True, other: False}
    (trace,) = httpx.get(shipped.url + wire.TRACES, params={"session": SESSION, "request": "req-b"}).json()["traces"]
    assert (trace["requests"], trace["jobs"]) == (["req-b"], [])  # (a list, where no span names a job)
