"""Shared fixtures: a recorded Ray 2.60 session (`fixtures/ray_batches.json`, the POST bodies of a real run of
nested tasks, a failing task, a retried task, a killed actor and a restarted actor) and in-process servers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from raysight.server.app import create_app

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
    with TestClient(create_app(tmp_path / "data", max_body=1024 * 1024, fold_linger_s=0, fold_rest=0)) as client:
        yield client
