"""Work per request is bounded: elements per body, events per fold group, and the server's memory under hostile bodies
(anyone with the ingest key, which Ray logs in clear, or any local process can send them)."""

from __future__ import annotations

import contextlib
import signal
import socket
import time
from pathlib import Path

import httpx
import orjson
import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from raysight.cli import main
from raysight.server.app import create_app
from raysight.settings import Settings
from tests.ray_scenarios import JSON, ServerProcess, peak_rss_mb, wait_folded

MAX_EVENTS = 100_000  # the default of --max-events
RSS_BOUND_MB = 1024  # the server's peak resident set under hostile bodies (measured: 640 MB; DuckDB's limit is 1 GB)


def _post(client: TestClient | httpx.Client, url: str, body: bytes) -> httpx.Response:
    return client.post(url, content=body, headers=JSON)


def _zeros(n: int) -> bytes:
    return b"[" + b",".join([b"0"] * n) + b"]"


def test_a_body_of_more_events_than_the_limit_is_refused_with_what_to_do(server: TestClient) -> None:
    """Ray sends at most 1,000 events per POST (and never more than its 100k buffer): far more is refused, whole."""
    refused = _post(server, "/ingest/ray-events", _zeros(MAX_EVENTS + 1))
    assert refused.status_code == 413
    assert refused.json()["error"] == f"{MAX_EVENTS + 1} events in one body, over {MAX_EVENTS} " + (
        "(raise --max-events)"
    )
    assert _post(server, "/ingest/ray-events", _zeros(MAX_EVENTS)).status_code == 200
    assert 'raysight_ingest_rejected_total{reason="too_many_events"} 1.0' in server.get("/metrics").text


def test_the_limits_are_set_on_the_command_line(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", options=["--max-events", "10", "--memory-limit", "300MB"]).start()
    try:
        with httpx.Client(base_url=server.url) as client:
            assert _post(client, "/ingest/ray-events", _zeros(11)).status_code == 413
            assert _post(client, "/ingest/ray-events", _zeros(10)).status_code == 200
    finally:
        server.stop()
    refused = CliRunner().invoke(main, ["server", "--memory-limit", "lots", "--data-dir", str(tmp_path / "other")])
    assert refused.exit_code == 2 and "'lots' is not a memory size such as 512MB or 2GB" in refused.output


def test_a_fold_group_holds_a_bounded_number_of_events_however_small(
    tmp_path: Path, ray_batches, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bytes alone do not bound a group: 48 MB of [{},{},…] is 16M events. A group closes at MAX_GROUP_EVENTS."""
    batch = ray_batches[2]
    monkeypatch.setattr("raysight.store.writer.MAX_GROUP_EVENTS", len(batch) + 1, raising=False)
    with TestClient(create_app(Settings(tmp_path / "data").replace(fold_linger_s=30))) as client:
        writer = client.app.state.raysight.writer
        for i in range(4):
            body = orjson.dumps([{**e, "sessionName": f"group_{i}"} for e in batch])
            assert _post(client, "/ingest/ray-events", body).status_code == 200
        deadline = time.monotonic() + 30
        while writer.backlog()["batches"]:  # full groups are folded at once, without waiting for the linger
            assert time.monotonic() < deadline, "the backlog was not folded"
            time.sleep(0.02)
        assert client.get("/api/raysight/doctor").json()["counters"]["batches"] == 2  # two batches a group


def test_hostile_bodies_keep_the_server_under_its_memory_bound(tmp_path: Path) -> None:
    """Bodies of up to 16 MiB built to cost the most memory per byte: millions of elements are refused; what is
    under the limits is folded (quarantined, as it is not Ray's) with the server's peak RSS under RSS_BOUND_MB."""
    server = ServerProcess(tmp_path / "data").start()
    assert server.proc is not None
    try:
        with httpx.Client(timeout=60) as http:
            url = f"{server.url}/ingest/ray-events"
            for element in (b"0", b"{}"):  # 8.4M and 5.6M elements
                body = b"[" + b",".join([element] * ((16 * 1024 * 1024 - 2) // (len(element) + 1))) + b"]"
                assert _post(http, url, body).status_code == 413
            wide = orjson.dumps([{"eventId": str(i), "sessionName": "x" * 130} for i in range(MAX_EVENTS)])
            nested = orjson.dumps([{"eventId": "n", "sessionName": "s", "a": [0] * 8_000_000}])
            distinct = orjson.dumps(list(range(MAX_EVENTS)))
            for body in (wide, nested, nested, nested, distinct, wide):
                assert len(body) <= 16 * 1024 * 1024
                assert _post(http, url, body).status_code == 200
            wait_folded(server.url, timeout_s=180)
        peak = peak_rss_mb(server.proc.pid)
        print(f"server peak RSS {peak:.0f} MB")
        assert peak < RSS_BOUND_MB
    finally:
        server.stop(signal.SIGKILL)


def test_bodies_held_at_once_are_bounded_however_many_connections_send_them(tmp_path: Path) -> None:
    """A body is at most --max-body and connections at most --max-connections, but not their product: past what the
    server holds at once (16 bodies of the largest size), a body is refused with 503 before it is read."""
    server = ServerProcess(tmp_path / "data").start()
    head = (
        b"POST /ingest/ray-events HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n[" % (16 * 1024 * 1024)
    )
    senders: list[socket.socket] = []
    try:
        answer = b""
        while not answer and len(senders) <= 16:  # each says it brings the largest body, then sends nothing more
            sender = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            sender.sendall(head)
            sender.settimeout(0.5)
            try:
                answer = sender.recv(4096)  # none while its body is awaited
            except TimeoutError:
                senders.append(sender)
                continue
            with contextlib.suppress(TimeoutError):  # the rest of the answer
                while chunk := sender.recv(4096):
                    answer += chunk
            sender.close()
        assert len(senders) == 16, f"{len(senders)} bodies held before a refusal"
        assert answer.startswith(b"HTTP/1.1 503") and b"bytes of request bodies are being read" in answer, answer
        assert b"retry-after: 1" in answer.lower()
        for sender in senders:
            sender.close()
        senders.clear()
        deadline = time.monotonic() + 10
        with httpx.Client(timeout=10) as http:  # the budget comes back with the connections
            while (status := _post(http, f"{server.url}/ingest/ray-events", b"[]").status_code) == 503:
                assert time.monotonic() < deadline, "the budget did not come back"
                time.sleep(0.05)
        assert status == 200
    finally:
        for sender in senders:
            sender.close()
        server.stop()
