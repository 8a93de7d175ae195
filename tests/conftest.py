"""Shared fixtures: a recorded Ray 2.60 session (`fixtures/ray_batches.json`, the POST bodies of a real run of
nested tasks, a failing task, a retried task, a killed actor and a restarted actor), in-process servers, and the demo
workload run for real once per test session (`raysight demo`, then `raysight run` into the same store), read by the
integration and browser tests alike."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from raysight.cli.run import free_port
from raysight.server.app import create_app
from raysight.settings import ENV_SERVER, Settings
from raysight.signals.run_exits.apply import record as record_run_exit
from raysight.store.store import Store
from tests.docs_examples import documented
from tests.ray_scenarios import ServerProcess, ray_run

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="session", autouse=True)
def agent_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Node agents started by the tests (`raysight run`'s, `raysight demo`'s) keep their checkpoints here, not in the
    user's ~/.local/state."""
    state = tmp_path_factory.mktemp("agent-state")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_STATE_HOME", str(state))
        yield state


@pytest.fixture(scope="session")
def ray_batches() -> list[list[dict[str, Any]]]:
    return orjson.loads((FIXTURES / "ray_batches.json").read_bytes())


@pytest.fixture
def server(tmp_path: Path) -> TestClient:
    """The real app over a fresh store, in-process, folding each batch at once (no linger, no rest)."""
    with TestClient(
        create_app(Settings(tmp_path / "data").replace(max_body=1024 * 1024, fold_linger_s=0, fold_rest=0))
    ) as client:
        yield client


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, str]:
    """`raysight demo --exit` as a user runs it (as docs/getting-started.md shows it), on a data dir and port of the
    test's: (data dir, port, its output)."""
    data_dir, port = tmp_path_factory.mktemp("store"), free_port()
    demo = documented("raysight demo")[1:]
    done = subprocess.run(
        [sys.executable, "-m", "raysight", *demo, "--data-dir", str(data_dir), "--port", str(port)],
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", ENV_SERVER)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return data_dir, port, done.stdout


@pytest.fixture(scope="session")
def recorded(demo: tuple[Path, int, str]) -> Iterator[ServerProcess]:
    """The demo workload recorded twice (two sessions with the same deterministic task IDs): first by
    `raysight demo` (label "demo"), then by `raysight run` into the same store (label "second")."""
    with ServerProcess(demo[0]) as server:
        ray_run(server.url, "second", "-m", "raysight.demo_workload")
        yield server


SCREENSHOTS = Path("/tmp/raysight-ui-screenshots")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Name the folder of the dashboard's screenshots (tests/test_ui.py writes one of each page it visits)."""
    if SCREENSHOTS.is_dir() and any(SCREENSHOTS.iterdir()):
        terminalreporter.write_line(f"Screenshots of the dashboard's pages: {SCREENSHOTS}")


def run_exit(
    store: Store, run_id: str, driver_pid: int | None, exit_code: int, ended_ns: int, session: str | None = None
) -> None:
    """What the run-exit route writes of `raysight run`'s report of its driver's end."""
    store.write(lambda tx: record_run_exit(tx, (run_id, driver_pid, exit_code, ended_ns, session)))
