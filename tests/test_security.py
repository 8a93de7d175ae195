"""The server against a hostile browser, a hostile network and a careless one: Host and cross-site checks, content
types, the three secrets, WebSocket handshakes, bad numbers and credentials, file modes, slow clients."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from click.testing import CliRunner
from starlette.routing import WebSocketRoute
from starlette.testclient import TestClient, WebSocketDenialResponse
from starlette.websockets import WebSocket

from raysight.cli import main
from raysight.cli.server import private_data_dir
from raysight.client import Client
from raysight.errors import Forbidden
from raysight.server.app import create_app
from raysight.server.auth import Secrets, load_or_create
from raysight.settings import DB_FILE, SECRETS_FILE, Settings
from tests.ray_scenarios import JSON, ServerProcess
from tests.test_server import post

SECRETS = Secrets(token="read-secret", ingest_key="write-secret", admin_token="admin-secret")
READ, ADMIN = ({"Authorization": f"Bearer {t}"} for t in ("read-secret", "admin-secret"))


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[TestClient]:
    """The app as bound beyond loopback: all three secrets required."""
    with TestClient(create_app(Settings(tmp_path / "data").replace(secrets=SECRETS, fold_linger_s=0))) as client:
        yield client


def sessions(client: TestClient, headers: dict[str, str] | None = None) -> list[dict]:
    return client.get("/api/raysight/sessions", headers=headers).json()["sessions"]


def test_posts_a_web_page_could_send_without_asking_are_refused(server: TestClient, ray_batches) -> None:
    """A cross-site page may POST text/plain or a form without a preflight; no such POST changes anything."""
    body = orjson.dumps(ray_batches[0])
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None):
        headers = {"Content-Type": content_type} if content_type else {}
        refused = server.post("/ingest/ray-events", content=body, headers=headers)
        assert refused.status_code == 415 and "application/json" in refused.json()["error"]
        assert server.post("/api/raysight/reindex", content=b"a=b", headers=headers).status_code == 415
    assert sessions(server) == []
    ok = server.post("/ingest/ray-events", content=body, headers={"Content-Type": "application/json; charset=utf-8"})
    assert ok.status_code == 200  # as Ray's aggregator sends it: JSON, no Origin, no credentials


def test_requests_another_site_sends_are_refused(server: TestClient, ray_batches) -> None:
    body = orjson.dumps(ray_batches[0])
    for other_site in (
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},  # another port of localhost is another program
    ):
        refused = server.post("/ingest/ray-events", content=body, headers={**JSON, **other_site})
        assert refused.status_code == 403 and "another site" in refused.json()["error"]
        assert server.get("/api/raysight/sessions", headers={**other_site, "Sec-Fetch-Mode": "cors"}).status_code == 403
        assert server.get("/api/v0/tasks", headers=other_site).json()["result"] is False  # Ray's envelope
    assert sessions(server) == []
    same_origin = {"Origin": "http://testserver", "Sec-Fetch-Site": "same-origin"}
    assert server.post("/ingest/ray-events", content=body, headers={**JSON, **same_origin}).status_code == 200
    link = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}
    for page in ("/", "/ui/sessions"):
        assert server.get(page, headers=link).status_code == 200  # a link to the dashboard followed from elsewhere
    frame = {**link, "Sec-Fetch-Dest": "iframe"}
    for path, headers in (
        ("/api/raysight/sessions", link),  # another site's tab or frame has no reason to open raysight's JSON,
        ("/api/v1/query?query=up", link),  # the Prometheus API (a query can cost the server dearly),
        ("/sessions/x/api/v0/tasks", link),  # or the Ray-compatible routes
        ("/api/raysight/sessions", frame),
        ("/", frame),  # nor frame the dashboard
    ):
        assert server.get(path, headers=headers).status_code == 403, (path, headers)
    same_site_frame = {"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "iframe"}
    assert server.get("/api/raysight/sessions", headers=same_site_frame).status_code == 200


def test_websocket_handshakes_pass_the_same_checks(tmp_path: Path) -> None:
    async def echo(websocket: WebSocket) -> None:
        await websocket.accept()
        await websocket.send_text(await websocket.receive_text())
        await websocket.close()

    for secrets in (Secrets.loopback(), SECRETS):
        app = create_app(Settings(tmp_path / "data").replace(secrets=secrets))
        app.router.routes.append(WebSocketRoute("/api/raysight/echo", echo))  # as live views will be
        with TestClient(app) as client:
            granted = READ if secrets.token else {}
            with client.websocket_connect("/api/raysight/echo", headers=granted) as ws:
                ws.send_text("hi")
                assert ws.receive_text() == "hi"
            refused = [{**granted, "Origin": "http://evil.example"}]
            refused += [{}, {**ADMIN, "Origin": "null"}] if secrets.token else []
            for headers in refused:
                with (
                    pytest.raises(WebSocketDenialResponse) as denied,
                    client.websocket_connect("/api/raysight/echo", headers=headers),
                ):
                    pass
                assert denied.value.status_code in (401, 403) and denied.value.json()["ok"] is False


def test_destructive_operations_need_the_admin_token(secured: TestClient, ray_batches) -> None:
    post(secured, ray_batches[0], "?cluster=t&key=write-secret")
    [session] = sessions(secured, READ)
    for method, path in (("DELETE", f"/api/raysight/sessions/{session['session']}"), ("POST", "/api/raysight/reindex")):
        refused = secured.request(method, path, headers={**READ, **JSON})
        assert refused.status_code == 403 and "admin token" in refused.json()["error"]
        ingest_key = {**JSON, "Authorization": "Bearer write-secret"}
        assert secured.request(method, path, headers=ingest_key).status_code == 401
    assert sessions(secured, ADMIN) == [session]  # the admin token reads too
    reader = Client("http://testserver", token="read-secret", transport=secured._transport)
    with reader, pytest.raises(Forbidden, match="admin token"):
        reader.reindex()
    with Client("http://testserver", admin_token="admin-secret", transport=secured._transport) as admin:
        assert admin.reindex() == len(ray_batches[0])
        assert admin.delete_session(session["session"]) == session["session"]
        assert admin.sessions() == []


def test_the_admin_token_is_generated_and_kept_like_the_others(tmp_path: Path) -> None:
    first = load_or_create(tmp_path, None, None, None)
    assert first.admin_token and len({first.token, first.ingest_key, first.admin_token}) == 3
    assert load_or_create(tmp_path, None, None, None) == first
    assert load_or_create(tmp_path, None, None, "given").admin_token == "given"
    assert stat.S_IMODE((tmp_path / SECRETS_FILE).stat().st_mode) == 0o600


def test_bad_credentials_are_refused_in_one_line(secured: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    for value in (b"Bearer \xe9", b"Bearer read-secret\xe9", b"\xe9"):
        assert secured.get("/api/raysight/sessions", headers={"Authorization": value}).status_code == 401
    for key in ("%C3%A9", "%FF", "write-secret%00"):
        assert secured.post(f"/ingest/ray-events?key={key}", content=b"[]", headers=JSON).status_code == 401
        assert secured.post(f"/ingest/ray-events/{key}", content=b"[]", headers=JSON).status_code == 401
        assert secured.post(f"/ingest/agent/run-exit?key={key}", content=b"{}", headers=JSON).status_code == 401
        assert secured.post(f"/ingest/agent/logs?key={key}", content=b"{}", headers=JSON).status_code == 401
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_numbers_out_of_range_are_400_and_no_sql_is_echoed(server: TestClient, ray_batches) -> None:
    post(server, ray_batches[0])
    for path, params in (
        ("/api/raysight/tasks", {"offset": 2**63}),
        ("/api/raysight/tasks", {"limit": 2**64}),
        ("/api/raysight/tasks", {"offset": -1}),
        ("/api/v0/tasks", {"limit": -(2**63) - 1}),
    ):
        answer = server.get(path, params=params)
        assert answer.status_code == 400, (path, params, answer.text)
        assert "SELECT" not in answer.text and "integer from 0" in answer.text


def test_a_query_parameter_a_route_does_not_take_is_400_naming_it_and_those_it_takes(
    server: TestClient, ray_batches
) -> None:
    """Ignored, a misspelt or guessed parameter answers as if it were not given: every failed task asked for with
    `?state=FAILED` came back as all of them."""
    for batch in ray_batches:
        post(server, batch)
    every, failed = (
        server.get("/api/raysight/tasks", params=p).json()["total"] for p in ({}, {"filter": "state=FAILED"})
    )
    assert 0 < failed < every
    for path, params, said in (
        ("/api/raysight/tasks", {"state": "FAILED"}, "'state': it takes count_by, detail, filter, include_driver, "),
        ("/api/raysight/tasks", {"state": "FAILED"}, "; a field's filter is filter=FIELD=VALUE"),
        ("/api/raysight/logs", {"tsk": "ab", "grp": "x", "grep": "x"}, "no query parameter 'grp', 'tsk': it takes "),
        ("/api/raysight/serve/requests", {"latency": "1s"}, "'latency': it takes app, by, deployment, limit, "),
        (
            "/api/raysight/ping",
            {"verbose": "1"},
            "/api/raysight/ping takes no query parameter 'verbose': it takes none",
        ),
    ):
        answer = server.get(path, params=params)
        assert answer.status_code == 400 and said in answer.json()["error"], (path, answer.text)
    # Ray's own routes take what Ray's callers send, as Ray's dashboard does (its CLI sends more than it reads)
    assert server.get("/api/v0/tasks", params={"limit": 5, "timeout": 30, "unknown": 1}).status_code == 200


def run_exit(client: TestClient, body: object) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()  # orjson stops at 64-bit integers
    return client.post("/ingest/agent/run-exit", content=content, headers=JSON)


def test_run_exits_are_validated(server: TestClient) -> None:
    good = {"run_id": "r1", "driver_pid": 42, "exit_code": -9, "ended_ns": 1_700_000_000_000_000_000}
    for bad, says in (
        ({**good, "exit_code": 2**40}, "exit_code"),
        ({**good, "exit_code": True}, "exit_code"),
        ({**good, "ended_ns": 2**64 - 1}, "ended_ns"),
        ({**good, "ended_ns": -1}, "ended_ns"),
        ({**good, "driver_pid": 2**63}, "driver_pid"),
        ({**good, "driver_pid": "42"}, "driver_pid"),
        ({**good, "run_id": ""}, "run_id"),
        ({**good, "run_id": "x" * 1000}, "run_id"),
        ({**good, "session": "../../etc"}, "session"),
        ({**good, "session": 5}, "session"),
        ({k: v for k, v in good.items() if k != "ended_ns"}, "ended_ns"),
        ([good], "object"),
        (b"{", "not JSON"),
        (b'"\xff"', "not JSON"),
    ):
        answer = run_exit(server, bad)
        assert answer.status_code == 400 and says in answer.json()["error"], (bad, answer.text)
    too_big = run_exit(server, {**good, "pad": "x" * 70_000})
    assert too_big.status_code == 413 and "bytes" in too_big.json()["error"]
    assert run_exit(server, good).json() == {"ok": True}
    assert run_exit(server, {**good, "driver_pid": None}).json() == {"ok": True}
    assert run_exit(server, {**good, "session": "session_2026-11-24_05-18-43_009092_26119"}).json() == {"ok": True}


def test_ray_metrics_are_posted_as_json(server: TestClient) -> None:
    """Node agents post Prometheus text wrapped in JSON, a type no web page can send without asking."""
    answer = server.post("/ingest/agent/ray-metrics", content=b'{"text": "# TYPE x counter\\n"}', headers=JSON)
    assert answer.status_code == 200 and answer.json()["samples"] == 0, answer.text
    for bad in (b'"text"', b'{"text": 5}', b"[]"):
        answer = server.post("/ingest/agent/ray-metrics", content=bad, headers=JSON)
        assert answer.status_code == 400 and '{"text"' in answer.json()["error"]


# A real server: what its process creates on disk, which Host names it answers, how it treats slow clients.

HEADER_TIMEOUT_S, BODY_TIMEOUT_S, MAX_CONNECTIONS = 1.0, 1.0, 12


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    options = ["--allowed-host", "raysight.example", "--header-timeout", str(HEADER_TIMEOUT_S)]
    options += ["--body-timeout", str(BODY_TIMEOUT_S), "--max-connections", str(MAX_CONNECTIONS)]
    umask = os.umask(0o022)  # a common umask, which the server must not rely on
    try:
        server = ServerProcess(tmp_path_factory.mktemp("live") / "data", options=options).start()
    finally:
        os.umask(umask)
    try:
        yield server
    finally:
        server.stop()


def test_on_loopback_only_loopback_host_names_are_served(live: ServerProcess) -> None:
    port = live.port
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", f"[::1]:{port}", "raysight.example:80"):
        assert httpx.get(live.url + "/api/raysight/sessions", headers={"Host": host}).status_code == 200, host
    for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example", "localhost.", ""):
        answer = httpx.get(live.url + "/api/raysight/sessions", headers={"Host": host})
        assert answer.status_code == 400 and "--allowed-host" in answer.json()["error"], host
        assert httpx.post(live.url + "/api/raysight/reindex", headers={**JSON, "Host": host}).status_code == 400


def test_a_bind_to_another_loopback_address_serves_that_address(tmp_path: Path) -> None:
    """127.0.0.2 is loopback too: the server it prints must answer there (it refused its own address, 400)."""
    server = ServerProcess(tmp_path / "data", options=["--host", "127.0.0.2"])
    server.url = f"http://127.0.0.2:{server.port}"
    with server:
        assert httpx.get(f"{server.url}/api/raysight/sessions").status_code == 200
        other = httpx.get(f"{server.url}/api/raysight/sessions", headers={"Host": "127.0.0.3"})
        assert other.status_code == 400 and "--allowed-host" in other.json()["error"]


def test_allowed_hosts_are_for_loopback_binds(tmp_path: Path) -> None:
    """Beyond loopback the tokens decide; a Host list there would only block remote nodes that use another name."""
    result = CliRunner().invoke(
        main, ["server", "--host", "0.0.0.0", "--allowed-host", "x", "--data-dir", str(tmp_path)]
    )
    assert result.exit_code == 2 and "--allowed-host is for a loopback --host" in result.output
    assert list(tmp_path.iterdir()) == []


def test_the_data_dir_and_its_files_are_private(live: ServerProcess, ray_batches) -> None:
    with live.client() as client:
        for batch in ray_batches[:3]:
            httpx.post(live.url + "/ingest/ray-events?cluster=t", content=orjson.dumps(batch), headers=JSON)
        deadline = time.monotonic() + 20
        while client.ingest_backlog()["batches"] or not client.sessions():
            assert time.monotonic() < deadline, "the server did not fold its batches"
            time.sleep(0.05)
    made = [live.data_dir, *live.data_dir.rglob("*")]
    assert any(p.suffix == ".duckdb" for p in made) and any(p.suffix == ".log" for p in made)
    modes = {str(p.relative_to(live.data_dir.parent)): oct(stat.S_IMODE(p.stat().st_mode)) for p in made}
    assert {p: m for p, m in modes.items() if m not in ("0o700", "0o600")} == {}
    assert all(m == "0o700" for p, m in modes.items() if Path(live.data_dir.parent, p).is_dir())


def _connect(port: int, first: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(first)
    return sock


def _wait_closed(socks: dict[str, socket.socket], drip: dict[str, bytes], limit_s: float) -> dict[str, float]:
    """Send each socket's drip one byte every 0.2 s until the server closes it; return when each was closed."""
    started, closed, replies = time.monotonic(), {}, {}
    while len(closed) < len(socks):
        assert time.monotonic() - started < limit_s, f"still open after {limit_s} s: {sorted(set(socks) - set(closed))}"
        for name, sock in socks.items():
            if name in closed:
                continue
            try:
                sock.settimeout(0.2 / len(socks))
                data = sock.recv(4096)
            except TimeoutError:
                data = None
            except ConnectionResetError:
                data = b""
            if data:
                replies[name] = replies.get(name, b"") + data
            elif data == b"":
                closed[name] = time.monotonic() - started
            elif drip.get(name):
                try:
                    sock.sendall(drip[name][:1])
                    drip[name] = drip[name][1:]
                except (BrokenPipeError, ConnectionResetError):
                    closed[name] = time.monotonic() - started
    for sock in socks.values():
        sock.close()
    return closed


def test_slow_clients_are_cut_off(live: ServerProcess) -> None:
    """A connection that sends nothing, headers at 5 bytes/s, a body at 5 bytes/s: each closed after its timeout."""
    headers = b"POST /ingest/ray-events HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    socks = {
        "idle": _connect(live.port),
        "slow headers": _connect(live.port, b"GET /api/raysight/sessions HTTP/1.1\r\n"),
        "slow body": _connect(live.port, headers + b"Content-Length: 1000\r\n\r\n["),
    }
    drip = {"slow headers": b"X-Slow: " + b"a" * 1000, "slow body": b"[]," * 300}
    closed = _wait_closed(socks, drip, limit_s=HEADER_TIMEOUT_S + BODY_TIMEOUT_S + 5)
    assert max(closed.values()) < max(HEADER_TIMEOUT_S, BODY_TIMEOUT_S) + 3
    assert httpx.get(live.url + "/api/raysight/ping").status_code == 200


def test_connections_past_the_limit_are_turned_away_at_once(live: ServerProcess) -> None:
    flood = {f"c{i}": _connect(live.port, b"GET / HTTP/1.1\r\n") for i in range(3 * MAX_CONNECTIONS)}
    turned_away = 0
    for sock in flood.values():
        sock.settimeout(0.05)
        with contextlib.suppress(TimeoutError):
            turned_away += sock.recv(4096).startswith(b"HTTP/1.1 503")
    assert turned_away >= 2 * MAX_CONNECTIONS
    _wait_closed(flood, {}, limit_s=HEADER_TIMEOUT_S + 5)
    assert httpx.get(live.url + "/api/raysight/ping").status_code == 200


def test_the_three_secrets_must_differ(tmp_path: Path) -> None:
    """An ingest key equal to the read token would make the URL Ray logs in clear a read credential."""
    for same in (["--token", "x1", "--ingest-key", "x1"], ["--token", "x2", "--admin-token", "x2"]):
        args = ["server", "--host", "0.0.0.0", "--data-dir", str(tmp_path / "data"), *same]
        refused = CliRunner().invoke(main, args)
        assert refused.exit_code == 2 and "must all differ" in refused.output
        assert not (tmp_path / "data" / SECRETS_FILE).exists()


def test_a_data_dir_of_other_things_keeps_its_mode(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    new, ours, shared = tmp_path / "new", tmp_path / "ours", tmp_path / "shared"
    for path, content in ((ours, DB_FILE), (shared, "notes.txt")):
        path.mkdir(mode=0o755)
        path.chmod(0o755)
        (path / content).write_text("")
    for path in (new, ours, shared):
        private_data_dir(path)
    assert [stat.S_IMODE(p.stat().st_mode) for p in (new, ours, shared)] == [0o700, 0o700, 0o755]
    assert f"warning: {shared} holds other files" in capsys.readouterr().err
