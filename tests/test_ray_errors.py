"""`raysight errors` over a real run of the faults Ray users meet (tests/ray_programs/failures.py): one exception
raised by many tasks with different values, a runtime environment that cannot be set up, a worker killed by Ray's
memory monitor whose task is retried. Recorded once, read after the cluster is gone by a restarted server, through
the CLI as users run it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.ray_programs.failures import BAD_RECORDS
from tests.ray_scenarios import raysight_cli, replayed

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def failures(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The run's groups as `raysight errors --format json` printed them, from a server started after the run."""
    with replayed(tmp_path_factory.mktemp("store"), "failures", "-m", "tests.ray_programs.failures") as server:
        listed = raysight_cli("errors", "--server", server.url, "--format", "json")
        assert listed.returncode == 0, listed.stderr
        groups = json.loads(listed.stdout)["groups"]
        yield {"url": server.url, "groups": {g["kind"] + " " + g["error_type"]: g for g in groups}}


def show(failures: dict[str, Any], failure_id: str, *options: str) -> str:
    """What `raysight errors show ID` prints."""
    shown = raysight_cli("errors", "show", failure_id, "--server", failures["url"], *options)
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


def said(text: str, heading: str) -> list[str]:
    """The indented lines under one of `errors show`'s headings."""
    after = text.splitlines()[text.splitlines().index(heading) + 1 :]
    return after[: next((i for i, line in enumerate(after) if not line.startswith("  ")), len(after))]


def test_each_fault_is_one_group(failures: dict[str, Any]) -> None:
    groups = failures["groups"]
    assert set(groups) == {
        "task TASK_EXECUTION_EXCEPTION",
        "task RUNTIME_ENV_SETUP_FAILED",
        "worker NODE_OUT_OF_MEMORY",
    }
    raised = groups["task TASK_EXECUTION_EXCEPTION"]
    assert (raised["count"], raised["error"], raised["affected"]) == (
        BAD_RECORDS,
        "ValueError: bad record <n> at offset <n>: '<str>'",
        ["parse"],
    )
    env = groups["task RUNTIME_ENV_SETUP_FAILED"]  # the exception inside Ray's message, not the traceback's start
    assert env["exception_type"] == "OSError" and env["affected"] == ["needs_package"]
    assert env["error"].startswith("OSError: Failed to download runtime_env file package <url> from the GCS")
    oom = groups["worker NODE_OUT_OF_MEMORY"]  # the worker's kill is the root; the attempt it ended, its consequence
    assert (oom["count"], oom["consequences"], oom["affected"]) == (1, {"tasks": 1}, ["hog"])
    assert oom["error"].startswith("<n> worker(s) were killed due to the node running low on memory.")


def test_show_a_raised_exception_with_its_remote_traceback_and_lines(failures: dict[str, Any]) -> None:
    text = show(failures, failures["groups"]["task TASK_EXECUTION_EXCEPTION"]["example"]["id"])
    assert "      raise ValueError(f\"bad record {i} at offset {i * 512}: 'row-{i}'\")" in text.splitlines()
    (own,) = said(text, "What it printed")
    assert re.fullmatch(r"  \(parse pid=\d+\) parse: record \d+", own), own


def test_show_an_oom_kill_with_the_raylets_report_and_the_retry(failures: dict[str, Any]) -> None:
    worker = failures["groups"]["worker NODE_OUT_OF_MEMORY"]["example"]["id"]
    text = show(failures, worker)
    assert "  OOM kill reason: Memory usage" in text  # Ray's reason, whole
    assert "(hog pid=" in said(text, "Its worker's last lines before it failed")[-1]
    reported = said(text, "What Ray's components said of it")
    assert any(line.startswith("  [raylet.out] Selected to kill: (Task:") and worker in line for line in reported)
    (hog,) = re.findall(r"^task +([0-9a-f]{48}) +hog ", text, re.MULTILINE)  # beside it: the attempt it ended
    retried = json.loads(show(failures, hog, "--format", "json"))
    assert [(a["state"], a["error_type"]) for a in retried["attempts"]] == [
        ("FAILED", "OUT_OF_MEMORY"),
        ("FINISHED", None),
    ]
    (first,) = retried["failures"]
    assert (first["root_kind"], first["root_id"]) == ("worker", worker)
    assert f"Followed from the failure of worker {worker}" in show(failures, hog)


def test_show_a_runtime_env_that_cannot_be_set_up_with_its_set_up_log(failures: dict[str, Any]) -> None:
    task = failures["groups"]["task RUNTIME_ENV_SETUP_FAILED"]["example"]["id"]
    reported = said(show(failures, task), "What Ray's components said of it")
    setup = [line for line in reported if line.startswith("  [runtime_env_setup-01000000.log]")]
    assert setup and all("Downloading package from gcs://_ray_pkg_0123456789abcdef.zip" in line for line in setup)
    assert any("[runtime_env_agent.log]" in line and "giving up" in line for line in reported)
