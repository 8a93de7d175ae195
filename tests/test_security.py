"""The server against a hostile browser, a hostile network and a careless one: Host and cross-site checks, content
types, the three secrets, WebSocket handshakes, bad numbers and credentials, file modes, slow clients."""

from __future__ import annotations

import json
import logging
import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from starlette.routing import WebSocketRoute
from starlette.testclient import TestClient, WebSocketDenialResponse
from starlette.websockets import WebSocket

from raysight.client import Client
from raysight.errors import Forbidden
from raysight.server.app import create_app
from raysight.server.auth import Secrets
from tests.test_server import post

JSON = {"Content-Type": "application/json"}
SECRETS = Secrets(token="read-secret", ingest_key="write-secret", admin_token="admin-secret")
READ, ADMIN = ({"Authorization": f"Bearer {t}"} for t in ("read-secret", "admin-secret"))


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[TestClient]:
    """The app as bound beyond loopback: all three secrets required."""
    with TestClient(create_app(tmp_path / "data", secrets=SECRETS, fold_interval_s=0)) as client:
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
    assert server.get("/api/raysight/sessions", headers=link).status_code == 200  # a link followed from elsewhere


def test_websocket_handshakes_pass_the_same_checks(tmp_path: Path) -> None:
    async def echo(websocket: WebSocket) -> None:
        await websocket.accept()
        await websocket.send_text(await websocket.receive_text())
        await websocket.close()

    for secrets in (None, SECRETS):
        app = create_app(tmp_path / "data", secrets=secrets)
        app.router.routes.append(WebSocketRoute("/api/raysight/echo", echo))  # as live views will be
        with TestClient(app) as client:
            granted = READ if secrets else {}
            with client.websocket_connect("/api/raysight/echo", headers=granted) as ws:
                ws.send_text("hi")
                assert ws.receive_text() == "hi"
            refused = [{**granted, "Origin": "http://evil.example"}]
            refused += [{}, {**ADMIN, "Origin": "null"}] if secrets else []
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
    from raysight.server.auth import load_or_create

    first = load_or_create(tmp_path, None, None, None)
    assert len({first.token, first.ingest_key, first.admin_token}) == 3 and None not in (first.admin_token,)
    assert load_or_create(tmp_path, None, None, None) == first
    assert load_or_create(tmp_path, None, None, "given").admin_token == "given"
    assert stat.S_IMODE((tmp_path / "secrets.json").stat().st_mode) == 0o600


def test_bad_credentials_are_refused_in_one_line(secured: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    for value in (b"Bearer \xe9", b"Bearer read-secret\xe9", b"\xe9"):
        assert secured.get("/api/raysight/sessions", headers={"Authorization": value}).status_code == 401
    for key in ("%C3%A9", "%FF", "write-secret%00"):
        assert secured.post(f"/ingest/ray-events?key={key}", content=b"[]", headers=JSON).status_code == 401
        assert secured.post(f"/ingest/ray-events/{key}", content=b"[]", headers=JSON).status_code == 401
        assert secured.post(f"/ingest/agent/run-exit?key={key}", content=b"{}", headers=JSON).status_code == 401
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


def test_ray_metrics_are_posted_as_json(server: TestClient) -> None:
    """`raysight run` posts Prometheus text wrapped in JSON, a type no web page can send without asking."""
    text = "# TYPE x counter\n"
    with Client("http://testserver", transport=server._transport) as client:
        assert client.ray_metrics(text, None) == 0
    for bad in (b'"text"', b'{"text": 5}', b"[]"):
        answer = server.post("/ingest/agent/ray-metrics", content=bad, headers=JSON)
        assert answer.status_code == 400 and '{"text"' in answer.json()["error"]
