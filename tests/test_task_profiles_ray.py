"""Continuous task profiles of a real Ray run (tests/ray_programs/profiled.py), read after its cluster is gone, as
users run `raysight profile`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from raysight.cli import main
from raysight.flame import top
from tests import test_ui
from tests.ray_scenarios import ServerProcess, cli, ray_run

pytestmark = pytest.mark.ray
browser, watched = test_ui.browser, test_ui.watched  # (the dashboard's fixtures, for its test here)


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, dict[str, str]]]:
    """The server the workload was recorded into, untraced (profiles need no span), its cluster gone; and each
    task's ID."""
    tmp = tmp_path_factory.mktemp("profiled")
    server = ServerProcess(tmp / "data").start()
    try:
        program = ("-m", "tests.ray_programs.profiled", str(tmp / "ids.json"))
        ray_run(server.url, "profiled", *program, options=["--no-tracing"])
        yield server, json.loads((tmp / "ids.json").read_text())
    finally:
        server.stop()


def profile(server: ServerProcess, task: str, *more: str) -> dict[str, Any]:
    return orjson.loads(cli(server, "profile", "--task", task, "--format", "json", *more))  # type: ignore[no-any-return]


def hottest(data: dict[str, Any], cpu: bool = False) -> str:
    """The function the most samples (on CPU) end in."""
    return top([(stack, on_cpu if cpu else samples) for stack, samples, on_cpu in data["stacks"]])[0]["function"]


def functions(data: dict[str, Any]) -> set[str]:
    return {frame.split(" (")[0] for stack, *_ in data["stacks"] for frame in stack.split(";")}


def test_a_burning_task_s_hottest_frame_is_burn_on_cpu_and_a_sleeping_task_sleeps_off_it(
    profiled: tuple[ServerProcess, dict[str, str]],
) -> None:
    server, ids = profiled
    burning = profile(server, ids["burning"])
    assert hottest(burning, cpu=True).startswith("burn (tests/ray_programs/profiled.py)"), burning
    assert burning["cpu_s"] >= 1.0 and burning["on_cpu"] >= burning["samples"] // 2, burning
    # each stack starts at the task's own function, not in Ray's worker
    assert all(stack.startswith("burning (tests/ray_programs/profiled.py:") for stack, *_ in burning["stacks"])
    sleeping = profile(server, ids["sleeping"])
    assert sleeping["samples"] >= 10 and sleeping["on_cpu"] == 0, sleeping
    assert hottest(sleeping).startswith("sleeping ("), sleeping  # (time.sleep is C: the task's frame is the leaf)
    result = CliRunner().invoke(main, ["profile", "--task", ids["sleeping"], "--cpu-only", "--server", server.url])
    assert result.exit_code == 1 and "none of the" in result.output and "was taken on CPU" in result.output


def test_profiles_are_taken_without_tracing(profiled: tuple[ServerProcess, dict[str, str]]) -> None:
    server, _ = profiled
    counters = orjson.loads(cli(server, "doctor", "--format", "json"))["counters"]
    assert counters.get("spans", 0) == 0 and counters["profile_samples"] > 50, counters


def test_two_tasks_run_one_after_the_other_on_one_worker_keep_their_own_samples(
    profiled: tuple[ServerProcess, dict[str, str]],
) -> None:
    server, ids = profiled
    hot, idle = profile(server, ids["hot"]), profile(server, ids["idle"])
    assert "burn" in functions(hot) and "Worker.idle" not in functions(hot), hot
    # an actor's stacks start at its method, not in Ray's executor of it (nor its tracing wrappers)
    assert all(stack.startswith("Worker.hot (tests/ray_programs/profiled.py:") for stack, *_ in hot["stacks"]), hot
    assert "burn" not in functions(idle) and idle["on_cpu"] == 0, idle


def test_an_async_actor_s_overlapping_calls_each_have_their_own_samples(
    profiled: tuple[ServerProcess, dict[str, str]],
) -> None:
    server, ids = profiled
    computing, blocking = profile(server, ids["computing"]), profile(server, ids["blocking"])
    assert "crunch" in functions(computing) and "doze" not in functions(computing), computing
    assert "doze" in functions(blocking) and "crunch" not in functions(blocking), blocking
    assert all(stack.startswith("Loop.computing (") for stack, *_ in computing["stacks"]), computing
    assert computing["on_cpu"] > 0 and blocking["on_cpu"] <= blocking["samples"] // 5, blocking


def test_an_actor_s_calls_merge_into_its_profile(profiled: tuple[ServerProcess, dict[str, str]]) -> None:
    server, ids = profiled
    worker = orjson.loads(cli(server, "profile", "--actor", ids["hot"][16:], "--format", "json"))
    assert worker["attempts"] >= 2 and {"burn", "Worker.hot", "Worker.idle"} <= functions(worker), worker


def test_a_function_s_attempts_merge_and_each_format_is_written(
    profiled: tuple[ServerProcess, dict[str, str]], tmp_path: Path
) -> None:
    server, ids = profiled
    merged = orjson.loads(cli(server, "profile", "--function", "Worker.hot", "--format", "json"))
    assert merged["attempts"] == 1 and "burn" in functions(merged)
    table = cli(server, "profile", "--task", ids["burning"], "--cpu-only")
    assert table.splitlines()[2].split()[:2] == ["OWN", "TOTAL"], table
    assert "burn (tests/ray_programs/profiled.py)" in table.splitlines()[3], table
    cli(server, "profile", "--task", ids["burning"], "-o", str(tmp_path / "burning.svg"))
    svg = (tmp_path / "burning.svg").read_text()
    assert svg.startswith("<svg") and "burn (tests/ray_programs/profiled.py:" in svg
    cli(server, "profile", "--task", ids["burning"], "-o", str(tmp_path / "burning.json"))
    speedscope = json.loads((tmp_path / "burning.json").read_text())
    names = {frame["name"] for frame in speedscope["shared"]["frames"]}
    assert {"burning", "burn"} <= names and speedscope["profiles"][0]["unit"] == "seconds"
    folded = cli(server, "profile", "--task", ids["burning"], "--format", "collapsed")
    assert all(line.rsplit(" ", 1)[1].isdigit() for line in folded.splitlines())


def test_a_task_s_and_an_actor_s_page_draw_their_flame_graph_wall_clock_or_on_cpu(
    profiled: tuple[ServerProcess, dict[str, str]], watched: Any
) -> None:
    server, ids = profiled
    w = watched(server.url)
    page = w.open(f"/ui/sessions/profiled/tasks/{ids['burning']}")
    graph = page.locator("#task-profile .flame svg")
    assert "burn (tests/ray_programs/profiled.py:" in graph.inner_html()
    assert "raysight profile --task" in page.locator("#task-profile .hint").inner_text()
    page = w.open(f"/ui/sessions/profiled/tasks/{ids['sleeping']}")
    frames = page.locator("#task-profile .flame svg g")
    assert frames.count() >= 2  # (the root, and the task's function)
    page.locator("#task-profile input[type=radio]").nth(1).check()  # on CPU: it never was
    page.wait_for_function("document.querySelectorAll('#task-profile .flame svg g').length === 0", timeout=15_000)
    w.shot()
    # an actor's page: the calls it ran, merged (its ID ends each of its calls' task IDs)
    page = w.open(f"/ui/sessions/profiled/actors/{ids['computing'][16:]}")
    merged = page.locator("#actors-profile .flame svg").inner_html()
    assert "crunch (tests/ray_programs/profiled.py:" in merged and "doze (tests/ray_programs/profiled.py:" in merged
