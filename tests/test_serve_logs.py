"""Serve's logs: its components' files written by Ray's own logger setup (``configure_component_logger``: text or
JSON, access logs on or off, a level per deployment, rotation), shipped by a real agent to a real server, each line
found by its request, application, deployment and replica; and the pure parse of its lines."""

from __future__ import annotations

import logging
import logging.handlers
import subprocess
import time
from collections.abc import Iterator
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
from raysight.signals.log_lines.parse import LINE_FIELDS, Access, access
from tests.ray_scenarios import ServerProcess, agent_command

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
    fields = ", ".join(f"{sql} AS {field}" for field, sql in LINE_FIELDS.items() if field != "own")
    with duckdb.connect() as con:
        row = con.execute(f"SELECT {fields} FROM (SELECT ? AS name, ? AS text)", [name, text]).fetchall()[0]
    return {field: value for field, value in zip([f for f in LINE_FIELDS if f != "own"], row) if value is not None}


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
        serve.component("quiet_Q", "quiet001", replica=True, enable_access_log=False)
        serve.log("working quietly", C)
        serve.log("GET /quiet 200 0.9ms", C)  # (an access line: left out)
    finally:
        serve.restore()
    with (serve_dir / "replica_shop_Cart_cart0001.log").open("a") as f:
        f.write("a print of Cart, in no format\n")


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A real server, given the Serve logs by a real agent (``--once``)."""
    tmp_path = tmp_path_factory.mktemp("serve_logs")
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
MODEL_LINES = [(MODEL, "scoring 3 items"), (MODEL, "CALL __call__ OK 0.2ms"), (MODEL, "CALL __call__ ERROR 0.3ms")]


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
