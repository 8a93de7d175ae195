"""The documentation kept true: the site builds with `mkdocs build --strict` (and a broken link fails it), the README
fits on a screen and its links resolve, each generated part is what the code makes of it, and every command example
(a ``$ `` line of a ``console`` block, in the README and under docs/) runs against the shared recorded session — or,
where it needs a cluster or runs until stopped, is parsed as the command parses it and run by the live test named."""

from __future__ import annotations

import importlib
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
import httpx
import pytest
from click.testing import CliRunner

from build_support import docs_reference
from raysight.cli import main
from raysight.settings import CLIENT_ENVIRONMENT, DEFAULT_PORT, ENV_SERVER, SERVER
from tests.docs_examples import EXAMPLES, PAGES, PYTHON, README, ROOT, Example
from tests.ray_scenarios import ServerProcess

DOCUMENTED_SERVER = f"http://127.0.0.1:{DEFAULT_PORT}"
README_MAX_LINES = 200

# raysight's commands that read a server (or only print) and end: run in-process against the recorded session
IN_PROCESS = {
    *("sessions", "list", "get", "summary", "errors", "logs", "traces", "timeline", "status", "metrics", "doctor"),
    "env",
}
DETACHED = "tests.test_cli_server.test_detach_keeps_the_given_secrets_waits_for_its_server_and_stop_ends_it"
# Commands that need a cluster or serve until stopped, each with the test that runs a command of its shape (a
# module's function, by its dotted path): their examples are parsed here, not run
LIVE = {
    "raysight demo": "tests.conftest.demo",
    "raysight run": "tests.ray_scenarios.ray_run",
    "raysight server": "tests.ray_scenarios.ServerProcess.start",
    "raysight server --detach": DETACHED,
    "raysight server stop": DETACHED,
    "raysight agent": "tests.ray_scenarios.agent_command",
    "raysight poll": "tests.test_ray_clusters.poll_beside_the_head",
    "raysight start": "tests.test_ray_clusters.test_raysight_start_starts_a_ray_start_head_with_the_users_system_"
    "config_and_raysights_and_refuses_another",
    "raysight stop": "tests.test_ray_clusters.test_raysight_stop_stops_its_ray_start_node_alone_which_ends_dead",
    "raysight debug": "tests.test_debugger.test_breakpoints_in_a_task_an_actor_and_an_async_actor_are_driven_"
    "through_the_server",
    "raysight profile": "tests.test_task_profiles_ray.test_a_function_s_attempts_merge_and_each_format_is_written",
    "raysight profile stack": "tests.test_captures_ray.test_a_busy_actor_s_stack_shows_its_method",
    "raysight profile cpu": "tests.test_captures_ray.test_a_busy_actor_s_cpu_profile_is_a_flame_graph_whose_hottest_"
    "frame_is_its_loop",
    "raysight profile memory": "tests.test_captures_ray.test_a_growing_actor_s_memory_profile_names_the_line_that_"
    "allocates",
    "raysight profiles": "tests.test_captures_ray.test_a_busy_actor_s_cpu_profile_is_a_flame_graph_whose_hottest_"
    "frame_is_its_loop",
    "./dev.sh": ".ci/run",
    "pip install .": "tests.test_ui.test_a_wheel_built_from_a_fresh_clone_serves_the_dashboard_and_says_what_is_"
    "missing_without_its_libraries",
}


def live_test(example: Example) -> str | None:
    """The live test of ``example``'s command (the longest prefix of :data:`LIVE` it starts with), if it needs one."""
    words = example.argv
    prefixes = [prefix for prefix in LIVE if words[: len(prefix.split())] == prefix.split()]
    return LIVE[max(prefixes, key=len)] if prefixes else None


def build_site(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict` of the site whose mkdocs.yml is in ``root``, into ``site``."""
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=root,
        capture_output=True,
        text=True,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )


def test_the_site_builds_strictly_and_a_broken_link_fails_it(tmp_path: Path) -> None:
    built = build_site(ROOT, tmp_path / "site")
    assert built.returncode == 0, built.stderr
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").exists()
    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "docs", copy / "docs")
    shutil.copy(ROOT / "mkdocs.yml", copy)
    page = copy / "docs" / "logs.md"
    for broken in ("[a page that is not there](nowhere.md)", "[no such heading](errors.md#nowhere)"):
        page.write_text(page.read_text() + f"\n{broken}\n")
        failed = build_site(copy, tmp_path / "broken")
        assert failed.returncode == 1 and "nowhere" in failed.stderr, failed.stderr
        page.write_text(page.read_text().replace(f"\n{broken}\n", ""))


def headings(page: Path) -> set[str]:
    """The anchors of ``page``'s headings, as MkDocs and GitHub make them (lower case, punctuation dropped)."""
    titles = re.findall(r"^#+ (.+)$", page.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", title.lower()).strip().replace(" ", "-") for title in titles}


def test_the_readme_fits_on_a_screen_and_every_link_in_it_resolves() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= README_MAX_LINES
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    local = [link for link in links if not re.match(r"https?://", link)]
    assert len(local) >= 10, local
    for link in local:
        path, _, anchor = link.partition("#")
        target = ROOT / path
        assert target.is_file(), f"the README links to {path}, which is not there"
        assert not anchor or anchor in headings(target), f"{path} has no heading #{anchor}"


@pytest.mark.parametrize("page", sorted(docs_reference.pages()), ids=lambda page: page.name)
def test_each_generated_part_is_what_the_code_makes(page: Path) -> None:
    text = page.read_text()
    assert docs_reference.regenerated(text) == text, (
        f"{page.relative_to(ROOT)} differs from the code: run `python build_support/docs_reference.py`"
    )


def test_every_option_and_variable_is_in_the_docs_with_its_help() -> None:
    """What the generated parts promise, checked from the other side: each option of each command, each setting and
    each environment variable appears in the docs with its help as `--help` gives it."""
    text = " ".join(" ".join(page.read_text() for page in PAGES).split()).replace("\\|", "|")

    for command in _commands(main):
        for param in command.params:
            if isinstance(param, click.Option) and param.help:
                assert " ".join(param.help.split()) in text, f"{command.name} {param.opts}: its help is not in the docs"
    for setting in SERVER:
        assert " ".join(setting.help.split()) in text, f"--{setting.name}"
    for variable in CLIENT_ENVIRONMENT:
        assert f"`{variable.name}` | {' '.join(variable.help.split())}" in text, variable.name


def test_every_example_is_run_here_or_by_the_live_test_it_names() -> None:
    assert len(EXAMPLES) >= 40, "the docs' examples were not found"
    for example in EXAMPLES:
        words = example.argv
        if live_test(example) is None:
            assert words[0] in ("raysight", "ray", "curl") and (words[0] != "raysight" or words[1] in IN_PROCESS), (
                f"{example}: neither run against the recorded session nor named in LIVE"
            )
    for prefix, test in LIVE.items():
        assert any(live_test(e) == test for e in EXAMPLES), f"LIVE names {prefix!r}, which no example shows"
        if test.startswith("tests."):
            module, _, name = test.rpartition(".")
            owner: Any = _import_owner(module)
            assert callable(getattr(owner, name, None)), f"{test} is not there"
        else:
            assert (ROOT / test).is_file(), test


def _import_owner(dotted: str) -> Any:
    """The module, or the class in a module, that ``dotted`` names."""
    try:
        return importlib.import_module(dotted)
    except ModuleNotFoundError:
        module, _, cls = dotted.rpartition(".")
        return getattr(importlib.import_module(module), cls)


@pytest.mark.parametrize("example", [e for e in EXAMPLES if live_test(e) and e.argv[0] == "raysight"], ids=str)
def test_a_live_example_parses_as_its_command_parses_it(example: Example, monkeypatch: pytest.MonkeyPatch) -> None:
    """An example that needs a cluster is parsed by its command, whose work is replaced by nothing."""
    ran: list[str] = []

    def nothing(command: click.Command) -> Callable[..., None]:
        return lambda *args, **kwargs: ran.append(command.name or "")

    for command in _commands(main):
        if command.callback is not None:
            monkeypatch.setattr(command, "callback", nothing(command))
    result = CliRunner().invoke(main, example.argv[1:], catch_exceptions=False)
    assert result.exit_code == 0, f"{example}\n{result.output}"
    named: click.Command = main
    for word in example.argv[1:]:
        if not isinstance(named, click.Group) or word not in named.commands:
            break
        named = named.commands[word]
    assert ran and ran[-1] == named.name, f"{example}: ran {ran}"


def _commands(command: click.Command) -> Iterator[click.Command]:
    yield command
    for sub in getattr(command, "commands", {}).values():
        yield from _commands(sub)


@pytest.fixture(scope="module")
def in_a_temp_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("examples")


@pytest.mark.ray
@pytest.mark.parametrize("example", [e for e in EXAMPLES if live_test(e) is None], ids=str)
def test_an_example_runs_against_the_recorded_session(
    example: Example, recorded: ServerProcess, in_a_temp_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = [word.replace(DOCUMENTED_SERVER, recorded.url) for word in example.argv]
    monkeypatch.chdir(in_a_temp_dir)
    if argv[0] == "curl":
        answer = httpx.get(argv[-1], timeout=30)
        assert answer.status_code == 200 and answer.json(), f"{example}: {answer.status_code} {answer.text[:500]}"
        return
    if argv[0] == "ray":
        from ray.scripts.scripts import cli as command
    else:
        command = main
    result = CliRunner().invoke(command, argv[1:], env={ENV_SERVER: recorded.url}, catch_exceptions=False)
    assert result.exit_code == 0, f"{example}\n{result.output}"
    assert result.output.strip() or list(in_a_temp_dir.iterdir()), f"{example}: printed nothing, wrote nothing"
    crashed = re.search(r"^Traceback \(most recent call last\):", result.output, re.MULTILINE)  # not a task's, quoted
    assert not crashed and "Error" not in result.output.split("\n", 1)[0], result.output


@pytest.mark.ray
@pytest.mark.parametrize(("page", "line", "code"), PYTHON, ids=[f"{p.name}:{n}" for p, n, _ in PYTHON])
def test_a_python_example_runs_against_the_recorded_session(
    page: Path, line: int, code: str, recorded: ServerProcess
) -> None:
    names: dict[str, Any] = {}
    exec(compile(code.replace(DOCUMENTED_SERVER, recorded.url), f"{page.name}:{line}", "exec"), names)  # noqa: S102
    assert any(value for name, value in names.items() if not name.startswith("__") and not callable(value)), names
