"""The poller's own rules (``agent/state_poll.py``): where a session's dashboard is, the token it sends (read again
when refused) and the User-Agent; what it could not poll, and why, is what `raysight doctor` shows."""

from __future__ import annotations

from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import pytest
from starlette.testclient import TestClient

from raysight import wire
from raysight.agent.state_poll import dashboard_client, dashboard_url, due, poll_dashboard, ray_auth_headers
from raysight.cli.run import free_port
from raysight.client import Client
from raysight.config import USER_AGENT
from tests.ray_scenarios import serving

SESSION = "session_2026-11-26_12-00-00_000000_3"


def test_the_dashboard_is_where_the_head_last_said_it_listens(tmp_path: Path) -> None:
    session = tmp_path / "session_2026-11-24_10-00-00_000000_1"
    (session / "logs").mkdir(parents=True)
    assert dashboard_url(session) is None  # no log yet: not started
    log = session / "logs" / "dashboard.log"
    log.write_text("2026-11-24 10:00:01,000\tINFO head.py:272 -- Loaded 1 dashboard head modules\n")
    assert dashboard_url(session) is None
    with log.open("a") as f:
        f.write(
            "2026-11-24 10:00:02,000\tINFO http_server_head.py:492 -- Dashboard head http address: 127.0.0.1:8265\n"
        )
        f.write("2026-11-24 10:05:00,000\tINFO http_server_head.py:492 -- Dashboard head http address: 10.0.0.5:8266\n")
    assert dashboard_url(session) == "http://10.0.0.5:8266"  # restarted elsewhere: the last


def test_the_token_is_the_one_rays_own_processes_send(tmp_path: Path) -> None:
    token_file = tmp_path / "auth_token"
    assert ray_auth_headers({"RAY_AUTH_TOKEN_PATH": str(token_file)}) == {}  # none anywhere
    token_file.write_text("from-file\n")
    assert ray_auth_headers({"RAY_AUTH_TOKEN_PATH": str(token_file)}) == {"authorization": "Bearer from-file"}
    given = {"RAY_AUTH_TOKEN": "from-env", "RAY_AUTH_TOKEN_PATH": str(token_file)}
    assert ray_auth_headers(given) == {"authorization": "Bearer from-env"}
    assert ray_auth_headers({**given, "RAY_AUTH_MODE": "disabled"}) == {}


def test_objects_are_sampled_every_sixth_poll_and_the_rest_every_poll() -> None:
    assert [n for n in range(13) if "objects" in due(n)] == [0, 6, 12]
    assert all(set(due(n)) | {"objects"} == set(due(0)) for n in range(13))


class Dashboard(BaseHTTPRequestHandler):
    """Ray's dashboard as its token auth answers the poller (401 without a token, 403 with another, as
    ``text/plain``), listing nothing; it keeps each request's User-Agent."""

    token = ""  # the cluster's
    agents: list[str | None] = []

    def do_GET(self) -> None:
        Dashboard.agents.append(self.headers.get("user-agent"))
        sent, path = self.headers.get("authorization"), urlsplit(self.path).path
        if sent != f"Bearer {Dashboard.token}":
            self._answer(401 if sent is None else 403, b"401: Unauthorized", "text/plain")
        elif path == wire.RAY_JOBS:
            self._answer(200, b"[]")
        elif path == wire.RAY_CLUSTER_STATUS:
            self._answer(200, orjson.dumps({"data": {"clusterStatus": {"loadMetricsReport": {}}}}))
        else:
            self._answer(200, orjson.dumps({"result": True, "msg": "", "data": {"result": {"result": []}}}))

    def _answer(self, status: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def dashboard() -> Iterator[str]:
    Dashboard.token, Dashboard.agents = "", []
    with serving(Dashboard) as url:
        yield url


def test_a_refused_token_is_read_again_and_the_doctor_keeps_each_resource_s_last_error(
    server: TestClient, dashboard: str, tmp_path: Path
) -> None:
    token_file = tmp_path / "auth_token"
    every = len(due(0))  # (objects are polled every sixth poll: polls 0, 6, 12 … ask for everything)

    def polls() -> dict[str, dict[str, Any]]:
        return {p["resource"]: p for p in server.get("/api/raysight/doctor").json()["polls"] if p["session"] == SESSION}

    with (
        Client("http://testserver", transport=server._transport) as client,
        dashboard_client({"RAY_AUTH_TOKEN_PATH": str(token_file)}) as http,  # started before Ray wrote a token
    ):

        def poll(count: int) -> dict[str, str]:
            errors: dict[str, str] = poll_dashboard(client, None, dashboard, http, count, SESSION)["errors"]
            return errors

        Dashboard.token = "first"  # the cluster's, its file not written yet
        refused = poll(0)
        assert len(refused) == every and all(e.startswith("TokenRefused: 401 Unauthorized") for e in refused.values())
        assert {p["last_error"] for p in polls().values()} == set(refused.values())  # sent, though nothing was found
        token_file.write_text("first\n")  # Ray writes it as the cluster starts
        assert poll(6) == {}
        assert all(p["last_ok_ms"] and p["last_error"] == refused[r] for r, p in polls().items())  # kept, whatever
        Dashboard.token = "second"  # a new cluster, a new token: the old one gets 403, the new one is read
        token_file.write_text("second\n")
        assert poll(12) == {}
        Dashboard.token = "third"  # refused again, with no new token to read: the last poll failed
        assert all(e.startswith("TokenRefused: 403 Forbidden") for e in poll(18).values())
        last = polls()
        assert len(last) == every and all(p["last_error"].startswith("TokenRefused: 403") for p in last.values())
        assert all(p["last_error_ms"] >= p["last_ok_ms"] for p in last.values())
        with pytest.raises(httpx.ConnectError):  # a dashboard that answers nothing: gone, nothing sent
            poll_dashboard(client, None, f"http://127.0.0.1:{free_port()}", http, 24, SESSION)
    assert set(Dashboard.agents) == {USER_AGENT} and USER_AGENT.startswith("raysight/")
