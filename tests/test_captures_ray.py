"""On-demand profiles of a live Ray (tests/ray_programs/captured.py: an actor spinning on CPU, one growing its memory),
made by the node's agent as users ask for them: `raysight profile stack|cpu|memory`, `raysight profiles`; refused
without the admin token or unless the server allows profiling; an agent that may not ptrace says how to allow it."""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from raysight import wire
from raysight.agent.captures import PTRACE_HELP
from raysight.flame import top
from raysight.settings import ENV_ADMIN_TOKEN, ENV_SERVER, SECRETS_FILE
from tests import test_ui
from tests.ray_scenarios import ServerProcess, without_ray_settings

pytestmark = pytest.mark.ray
browser, watched = test_ui.browser, test_ui.watched  # (the dashboard's fixtures, for its test here)
PROGRAM = Path(__file__).parent / "ray_programs" / "captured.py"
ALLOCATING_LINE = next(n for n, line in enumerate(PROGRAM.read_text().splitlines(), 1) if "the allocating line" in line)


@dataclass
class Live:
    server: ServerProcess
    ids: dict[str, Any]
    env: dict[str, str]  # a user's shell beside the server: its URL, and the admin token
    agent: subprocess.Popen[bytes]
    tmp: Path


def _agent(
    server: ServerProcess, env: dict[str, str], log: Path, *more: str, prefix: tuple[str, ...] = ()
) -> subprocess.Popen[bytes]:
    """`raysight agent`, once it ships (so holds its state dir: `raysight run` then leaves the node to it)."""
    command = [*prefix, sys.executable, "-m", "raysight", "agent", "--server", server.url, *more]
    with log.open("wb") as said:
        agent = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=said)
    deadline = time.monotonic() + 60
    while "raysight agent: shipping" not in log.read_text():
        assert agent.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)
    return agent


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop ``proc`` as a user would (SIGTERM: the program ends its cluster, the agent ships what is left)."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=90)


def _ended(run: subprocess.Popen[bytes], stop: Path) -> None:
    """The program told to end (it ends its cluster itself), else stopped."""
    stop.touch()
    with contextlib.suppress(subprocess.TimeoutExpired):
        run.wait(timeout=60)
    _stop(run)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """A server that allows profiling, its node's agent (as root), and the program running under `raysight run`
    (which leaves the node to that agent), both actors busy and known to the server."""
    tmp = tmp_path_factory.mktemp("captures")
    ray_tmp = Path(tempfile.mkdtemp(prefix="rs-"))  # this cluster's alone, for its agent to ship (a short path: Ray's
    os.chmod(ray_tmp, 0o755)  # sockets' must fit 107 characters)
    server = ServerProcess(tmp / "data", options=["--allow-profiling"]).start()
    admin = orjson.loads((tmp / "data" / SECRETS_FILE).read_bytes())["admin_token"]
    env = {
        **without_ray_settings(),
        "XDG_STATE_HOME": str(tmp / "state"),
        ENV_SERVER: server.url,
        "RAY_TMPDIR": str(ray_tmp),
    }
    out, stop = tmp / "ids.json", tmp / "stop"
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(shutil.rmtree, ray_tmp, ignore_errors=True)
        cleanup.callback(server.stop)
        agent = _agent(server, env, tmp / "agent.log")
        cleanup.callback(_stop, agent)
        with (tmp / "run.log").open("wb") as said:
            run = subprocess.Popen(
                [sys.executable, "-m", "raysight", "run", "--server", server.url, "--cluster", "captures", "--"]
                + [sys.executable, "-m", "tests.ray_programs.captured", str(out), str(stop)],
                env=env,
                stdout=said,
                stderr=subprocess.STDOUT,
            )
        cleanup.callback(_ended, run, stop)
        deadline = time.monotonic() + 120
        while not out.exists() or not _alive(server, json.loads(out.read_text())):
            assert run.poll() is None and time.monotonic() < deadline, (tmp / "run.log").read_text()[-3000:]
            time.sleep(0.3)
        yield Live(server, json.loads(out.read_text()), {**env, ENV_ADMIN_TOKEN: admin}, agent, tmp)


def _alive(server: ServerProcess, ids: dict[str, Any]) -> bool:
    """Whether the server knows both actors alive, with their pids."""
    with httpx.Client(base_url=server.url, timeout=10) as http:
        rows = http.get(wire.path(wire.RESOURCE, resource="actors"), params={"detail": True}).json()["rows"]
    alive = {row["actor_id"] for row in rows if row["state"] == "ALIVE" and row["pid"]}
    return {ids["spinner"], ids["grower"]} <= alive


def raysight(live: Live, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`raysight ARGS…` as a user runs it in a shell beside the server."""
    command = [sys.executable, "-m", "raysight", *args]
    return subprocess.run(command, env=env or live.env, capture_output=True, text=True, timeout=180)


def test_a_busy_actor_s_stack_shows_its_method(live: Live) -> None:
    done = raysight(live, "profile", "stack", "--actor", live.ids["spinner"])
    assert done.returncode == 0, done.stderr
    assert f"of pid {live.ids['spinner_pid']} (actor {live.ids['spinner']})" in done.stdout, done.stdout
    assert "    Spinner.spin (tests/ray_programs/captured.py:" in done.stdout, done.stdout  # py-spy dump's lines
    assert "waiting for the node's agent" in done.stderr


def test_a_busy_actor_s_cpu_profile_is_a_flame_graph_whose_hottest_frame_is_its_loop(live: Live) -> None:
    svg = live.tmp / "spinner.svg"
    done = raysight(live, "profile", "cpu", "--actor", live.ids["spinner"], "--duration", "2s", "-o", str(svg))
    assert done.returncode == 0, done.stderr
    assert svg.read_text().startswith("<svg") and "Spinner.spin (" in svg.read_text()
    asked = re.search(r"cpu profile ([0-9a-f]{16}) of pid", done.stderr)
    assert asked, done.stderr
    capture_id = asked[1]
    listed = raysight(live, "profiles", "--actor", live.ids["spinner"])
    (line,) = [line for line in listed.stdout.splitlines() if line.startswith(capture_id)]
    assert " cpu " in line and f"{getpass.getuser()}@{socket.gethostname()}" in line and " done" in line, line
    kept = raysight(live, "profiles", capture_id, "--format", "json")  # as long as the server keeps it
    assert kept.returncode == 0, kept.stderr
    whole = json.loads(kept.stdout)
    stacks = [(stack, weight) for stack, weight in whole["stacks"]]
    assert whole["unit"] == "samples" and sum(w for _, w in stacks) >= 100, whole  # 2 s at 100 Hz, on CPU throughout
    assert top(stacks)[0]["function"].startswith("Spinner.spin ("), top(stacks)[:3]


def test_an_actor_s_page_lists_its_on_demand_profiles_and_draws_each(live: Live, watched: Any) -> None:
    stack = raysight(live, "profile", "stack", "--actor", live.ids["spinner"])  # (beside the CPU profile before)
    assert stack.returncode == 0, stack.stderr
    capture_id = re.findall(r"stack profile ([0-9a-f]{16}) of pid", stack.stderr)[0]
    assert raysight(live, "profiles", capture_id).stdout == stack.stdout  # shown again as it was
    page = watched(live.server.url).open(f"/ui/sessions/captures/actors/{live.ids['spinner']}")
    listed = page.locator("#actors-captures tbody tr")
    assert listed.count() >= 2 and listed.first.locator("td").nth(4).inner_text() == "done"
    assert "Spinner.spin (tests/ray_programs/captured.py:" in page.locator("#actors-captures pre.stack").inner_text()
    page.locator("#actors-captures button.capture-show", has_text="cpu").first.click()
    page.wait_for_selector("#actors-captures .flame svg", timeout=15_000)
    assert "Spinner.spin (" in page.locator("#actors-captures .flame svg").inner_html()


def test_a_growing_actor_s_memory_profile_names_the_line_that_allocates(live: Live) -> None:
    done = raysight(live, "profile", "memory", "--actor", live.ids["grower"], "--duration", "2s", "--format", "json")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    stacks = [(stack, weight) for stack, weight in found["stacks"]]
    assert found["unit"] == "bytes" and found["kind"] == "memory"
    heaviest = top(stacks, lines=True)[0]
    assert heaviest["function"].startswith("grow (") and heaviest["function"].endswith(
        f"captured.py:{ALLOCATING_LINE})"
    )
    table = raysight(live, "profile", "memory", "--actor", live.ids["grower"], "--duration", "1s", "--leaks")
    assert table.returncode == 0, table.stderr
    title, header, first, *_ = table.stdout.splitlines()
    assert title.startswith("Memory still allocated of pid") and header.split() == ["OWN", "TOTAL", "LINE"]
    assert first.endswith(f"grow ({PROGRAM}:{ALLOCATING_LINE})"), table.stdout


def test_without_the_admin_token_each_on_demand_profile_is_refused_and_recorded_for_none(live: Live) -> None:
    before = raysight(live, "profiles").stdout.count("\n")
    bare = {k: v for k, v in live.env.items() if k != ENV_ADMIN_TOKEN} | {"RAYSIGHT_DATA": str(live.tmp / "none")}
    for kind in ("stack", "cpu", "memory"):
        done = raysight(live, "profile", kind, "--actor", live.ids["spinner"], env=bare)
        assert done.returncode == 1 and "need the server's admin token" in done.stderr, done.stderr
    wrong = {**live.env, ENV_ADMIN_TOKEN: "not-the-token"}
    done = raysight(live, "profile", "stack", "--actor", live.ids["spinner"], env=wrong)
    assert done.returncode == 1 and "need the server's admin token" in done.stderr, done.stderr
    assert raysight(live, "profiles").stdout.count("\n") == before  # nothing was asked


def test_a_task_not_running_is_refused_saying_where_its_profile_is(live: Live) -> None:
    with httpx.Client(base_url=live.server.url, timeout=10) as http:
        rows = http.get(wire.path(wire.RESOURCE, resource="tasks"), params={"detail": True}).json()["rows"]
    ready = next(row for row in rows if row["name"].endswith(".ready") and row["state"] == "FINISHED")
    done = raysight(live, "profile", "stack", "--task", ready["task_id"])
    assert done.returncode == 1 and f"raysight profile --task {ready['task_id']}" in done.stderr, done.stderr


NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")


def nobody_runs_raysight() -> bool:
    """Whether user nobody can run this checkout's raysight (root, setpriv, and a checkout others may read)."""
    if shutil.which("setpriv") is None or os.geteuid() != 0:
        return False
    probe = subprocess.run([*NOBODY, sys.executable, "-c", "import raysight"], capture_output=True, timeout=60)
    return probe.returncode == 0


@pytest.mark.skipif(not nobody_runs_raysight(), reason="needs root, setpriv, and a checkout user nobody may read")
def test_an_agent_that_may_not_ptrace_says_how_to_allow_it(live: Live) -> None:
    _stop(live.agent)  # the node's own agent gone, an unprivileged one in its place
    state = Path(tempfile.mkdtemp(prefix="rs-nobody-"))  # (where user nobody may write)
    os.chmod(state, 0o777)
    env = {**live.env, "HOME": str(state)}
    more = ("--ray-dir", str(state), "--state-dir", str(state))  # (its own: the files of root's Ray are not its)
    unprivileged = _agent(live.server, env, state / "agent.log", *more, prefix=NOBODY)
    try:
        done = raysight(live, "profile", "stack", "--actor", live.ids["spinner"])
    finally:
        _stop(unprivileged)
        shutil.rmtree(state, ignore_errors=True)
    assert done.returncode == 1, done.stdout
    assert PTRACE_HELP.split("(")[0].format(pid=live.ids["spinner_pid"]) in done.stderr, done.stderr
    assert "CAP_SYS_PTRACE" in done.stderr and "ptrace_scope" in done.stderr
