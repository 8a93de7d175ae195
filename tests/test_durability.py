"""A server killed with SIGKILL mid-ingest comes back with every event it acknowledged (journalled or folded)."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import httpx
import orjson

from tests.ray_scenarios import ServerProcess


def test_sigkill_mid_ingest_keeps_every_acknowledged_event(tmp_path: Path, ray_batches) -> None:
    server = ServerProcess(tmp_path).start()
    events = [e for b in ray_batches for e in b]
    acked: list[str] = []
    stop = threading.Event()

    def send() -> None:
        with httpx.Client(timeout=5) as http:
            for i in range(10_000):
                if stop.is_set():
                    return
                session = f"session_kill_{i:05d}"
                body = orjson.dumps([{**e, "sessionName": session} for e in events])
                try:
                    reply = http.post(f"{server.url}/ingest/ray-events", content=body)
                except httpx.TransportError:
                    return
                if reply.status_code == 200:
                    acked.append(session)

    sender = threading.Thread(target=send)
    sender.start()
    deadline = time.monotonic() + 60
    while len(acked) < 15:
        assert sender.is_alive() and time.monotonic() < deadline, f"only {len(acked)} batches acknowledged"
        threading.Event().wait(0.05)
    server.stop(signal.SIGKILL)
    stop.set()
    sender.join(30)
    server.start()
    try:
        with server.client() as client:
            deadline = time.monotonic() + 60
            while client.doctor()["ingest_backlog"]["batches"]:  # the journal's unfolded batches are replayed
                assert time.monotonic() < deadline, "the journal was not replayed"
                time.sleep(0.1)
            kept = {s["session"]: s["events"] for s in client.sessions()}
        assert set(acked) <= set(kept)
        assert all(kept[s] == len(events) for s in acked)
    finally:
        server.stop()
