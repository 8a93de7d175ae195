"""`raysight start` and `raysight stop` where no Ray is needed: the system config they merge, what they refuse, and
what `raysight stop` stops of a node recorded (processes that stand in for Ray's, its agent and its poller). The real
`ray start` head is tests/test_ray_clusters.py's."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from raysight.cli import main
from raysight.cli.node import STATE_FILE, with_system_config

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


def raysight(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def test_the_users_system_config_keeps_its_keys_and_gains_raysights() -> None:
    ours = {"enable_ray_event": True, "enable_core_worker_ray_event_to_aggregator": True}
    assert with_system_config(["--head", "--num-cpus=1"], ours) == [
        "--head",
        "--num-cpus=1",
        f"--system-config={json.dumps(ours)}",
    ]
    given = ["--system-config", '{"enable_ray_event": false, "a": 1}', "--port=0", '--system-config={"b": 2}']
    (*rest, config) = with_system_config(given, ours)
    assert rest == ["--port=0"] and config.startswith("--system-config=")
    assert json.loads(config.removeprefix("--system-config=")) == {
        "enable_ray_event": False,  # the user's, kept
        "enable_core_worker_ray_event_to_aggregator": True,
        "a": 1,
        "b": 2,
    }
    for bad, said in (("{nope", "--system-config is not JSON"), ("[1]", "--system-config is not a JSON object")):
        with pytest.raises(ValueError, match=said):
            with_system_config([f"--system-config={bad}"], ours)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--head", "--system-config={nope"], "Error: --system-config is not JSON (Expecting property name"),
        (["--num-cpus=1"], "Error: start a head (--head) or a node that joins one (--address HEAD:PORT)"),
        (["--head", "--address", "h:6379"], "Error: start a head (--head) or a node that joins one"),
        (["--head", "--block"], "Error: `raysight start` leaves Ray running in the background and returns"),
    ],
)
def test_start_refuses_what_it_cannot_start_before_starting_anything(
    tmp_path: Path, args: list[str], said: str
) -> None:
    result = raysight("start", "--state-dir", str(tmp_path / "node"), *args)
    assert result.exit_code == 2 and result.output.splitlines()[-1].startswith(said), result.output
    assert not (tmp_path / "node").exists()


def test_stop_with_nothing_recorded_refuses_in_one_line(tmp_path: Path) -> None:
    result = raysight("stop", "--state-dir", str(tmp_path))
    assert (result.exit_code, result.output) == (
        1,
        f"Error: no node `raysight start` started is recorded in {tmp_path}: nothing to stop\n",
    )


@pytest.fixture
def recorded(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A node recorded as `raysight start` records one, its processes stood in for: Ray's (a process in a Unix session
    of its own that names the node's session directory, as a raylet does), the agent's (a process recorded with its
    command line) and the poller's (a pid recorded with another command line: a program the system gave it since);
    and a process in another Unix session naming the same directory."""
    session_dir = str(tmp_path / "ray" / "session_2026-01-01_00-00-00_000000_1")
    ray = subprocess.Popen([*SLEEPER, f"--session_dir={session_dir}"], start_new_session=True)
    beside = subprocess.Popen([*SLEEPER, f"--session_dir={session_dir}"], start_new_session=True)
    agent, other = subprocess.Popen(SLEEPER), subprocess.Popen(SLEEPER)
    node = {"sid": ray.pid, "session_dir": session_dir, "node_id": "n1", "gcs_address": "h:1", "dashboard": None}
    state = {
        "head": True,
        "server": "http://127.0.0.1:1",
        "cluster": None,
        "ray": node,
        "agent": {"pid": agent.pid, "command": SLEEPER, "log": "agent.log"},
        "poller": {"pid": other.pid, "command": [*SLEEPER, "--poll"], "log": "poll.log"},
    }
    (tmp_path / STATE_FILE).write_text(json.dumps(state))
    procs = {"ray": ray, "beside": beside, "agent": agent, "other": other}
    try:
        yield {"dir": tmp_path, "procs": procs}
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()


def test_start_refuses_while_the_node_recorded_runs(recorded: dict[str, Any]) -> None:
    result = raysight("start", "--head", "--state-dir", str(recorded["dir"]), "--num-cpus=1")
    agent = recorded["procs"]["agent"].pid
    assert (result.exit_code, result.output) == (
        1,
        "Error: a node `raysight start` started runs (Ray's 1 process of session_2026-01-01_00-00-00_000000_1, its "
        f"agent (pid {agent}); recorded in {recorded['dir'] / STATE_FILE}): `raysight stop` stops it\n",
    )


def test_stop_stops_what_was_recorded_and_nothing_else(recorded: dict[str, Any]) -> None:
    procs = recorded["procs"]
    result = raysight("stop", "--state-dir", str(recorded["dir"]))
    assert (result.exit_code, result.output) == (
        0,
        f"Stopped Ray on node n1 (1 process); its agent (pid {procs['agent'].pid}) stopped; its poller (pid "
        f"{procs['other'].pid}) had ended.\n",
    )
    assert procs["ray"].wait(5) == procs["agent"].wait(5) == -15  # SIGTERM
    assert procs["beside"].poll() is None and procs["other"].poll() is None
    assert not (recorded["dir"] / STATE_FILE).exists()


def test_stop_leaves_a_unix_session_that_names_not_the_node(tmp_path: Path) -> None:
    """The number of the session recorded, given since to another (none of its processes names the node's session
    directory): not Ray's, not stopped."""
    other = subprocess.Popen(SLEEPER, start_new_session=True)
    node = {"sid": other.pid, "session_dir": str(tmp_path / "session_x"), "node_id": "n1", "gcs_address": "h:1"}
    (tmp_path / STATE_FILE).write_text(json.dumps({"head": False, "ray": node, "agent": None, "poller": None}))
    try:
        result = raysight("stop", "--state-dir", str(tmp_path))
        assert (result.exit_code, result.output) == (0, "Ray on node n1 had ended.\n")
        assert other.poll() is None and not (tmp_path / STATE_FILE).exists()
    finally:
        other.kill()
        other.wait()
