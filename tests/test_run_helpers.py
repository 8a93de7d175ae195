"""`raysight env` as a shell evaluates it, and `wait_until_quiet` against a real server that keeps receiving."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import orjson
import pytest

from raysight.cli.run import wait_until_quiet
from tests.ray_scenarios import JSON, ServerProcess, without_ray_settings


def test_env_gives_the_head_the_system_config_that_reaches_drivers_started_elsewhere() -> None:
    shell = (
        f'eval "$({sys.executable} -m raysight env --server http://10.0.0.1:8271 --cluster prod)" && '
        'printf "%s\\n%s\\n" "$RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR" "$RAYSIGHT_RAY_SYSTEM_CONFIG"'
    )
    out = subprocess.run(["bash", "-c", shell], env=without_ray_settings(), capture_output=True, text=True, check=True)
    url, config = out.stdout.splitlines()
    assert url == "http://10.0.0.1:8271/ingest/ray-events?cluster=prod"
    assert json.loads(config) == {"enable_ray_event": True, "enable_core_worker_ray_event_to_aggregator": True}


def test_wait_until_quiet_fails_at_its_deadline_while_events_keep_coming(tmp_path: Path, ray_batches) -> None:
    server = ServerProcess(tmp_path / "store").start()
    stop = threading.Event()

    def keep_sending() -> None:
        with httpx.Client() as http:
            for i in range(1000):
                batch = [{**e, "sessionName": f"session_busy_{i}"} for e in ray_batches[0]]
                http.post(f"{server.url}/ingest/ray-events", content=orjson.dumps(batch), headers=JSON)
                if stop.wait(0.3):
                    return

    sender = threading.Thread(target=keep_sending)
    sender.start()
    try:
        with server.client() as client, pytest.raises(TimeoutError, match="still receiving or folding"):
            wait_until_quiet(client, quiet_s=2, timeout_s=4)
    finally:
        stop.set()
        sender.join(30)
        server.stop()
