"""The `raysight` command as a user runs it, against one real server fed with the recorded Ray session: every query
command in each format, its exit codes and errors, tables in a pipe and on a narrow terminal, `env` and `run`."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import shlex
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from typing import Any

import click
import httpx
import orjson
import pytest
import yaml
from click.testing import CliRunner, Result

from raysight import wire
from raysight.cli import SECTIONS, main
from raysight.cli.run import free_port
from raysight.client import Client
from raysight.settings import ENV_INGEST_KEY, ENV_SERVER, ENV_TOKEN
from tests.conftest import FIXTURES
from tests.ray_scenarios import JSON, ServerProcess

SESSION = "session_2026-11-21_19-46-15_579671_2021"
LABEL = "demo"


def feed(url: str, query: str = f"?cluster={LABEL}", token: str | None = None, timeout_s: float = 30) -> None:
    """POST the recorded Ray session as Ray's aggregator would, then wait until the server has folded it."""
    batches = orjson.loads((FIXTURES / "ray_batches.json").read_bytes())
    with httpx.Client(base_url=url, timeout=10) as http:
        for batch in batches:
            sent = http.post(wire.RAY_EVENTS + query, content=orjson.dumps(batch), headers=JSON)
            assert sent.status_code == 200, sent.text
    with Client(url, token=token) as client:
        deadline = time.monotonic() + timeout_s
        while client.ingest_backlog()["batches"]:
            assert time.monotonic() < deadline, "the server did not fold what it acknowledged"
            time.sleep(0.05)


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with ServerProcess(tmp_path_factory.mktemp("cli") / "data") as server:
        feed(server.url)
        yield server.url


def raysight(url: str, *args: str, input: str | None = None, token: str | None = None) -> Result:
    """`raysight ARGS…` in-process, its output captured as in a pipe."""
    env = {ENV_SERVER: url, ENV_TOKEN: token, "COLUMNS": "60"}  # COLUMNS: a pipe ignores it
    return CliRunner().invoke(main, list(args), env=env, input=input, catch_exceptions=False)


def ok(url: str, *args: str) -> str:
    result = raysight(url, *args)
    assert result.exit_code == 0, result.output
    return result.stdout


def data(url: str, *args: str) -> Any:
    return json.loads(ok(url, *args, "--format", "json"))


def on_one_line(output: str, *values: str) -> bool:
    """Whether some line of ``output`` holds every value whole (as whitespace-separated words)."""
    return any(all(v in line.split() for v in values) for line in output.splitlines())


# Tables


@pytest.mark.parametrize(
    "resource, columns",
    [
        ("tasks", ("task_id", "job_id", "parent_task_id", "node_id", "worker_id")),
        ("actors", ("actor_id", "node_id", "ray_namespace")),
        ("nodes", ("node_id", "node_ip")),
        ("workers", ("worker_id", "node_id")),
        ("jobs", ("job_id",)),
    ],
)
def test_list_tables_in_a_pipe_print_each_row_whole_on_one_line(url: str, resource: str, columns: tuple) -> None:
    rows = data(url, "list", resource)
    table = ok(url, "list", resource)
    assert rows and f"Total: {len(rows)} (showing 1-{len(rows)})" in table
    for row in rows:
        assert on_one_line(table, *(row[c] for c in columns if row[c])), (row, table)


def test_summary_and_sessions_tables_in_a_pipe_keep_ids_and_names_whole(url: str) -> None:
    summary = data(url, "summary", "tasks")
    table = ok(url, "summary", "tasks")
    for group in summary["summary"]:
        assert on_one_line(table, group["func_or_class_name"], group["type"], str(group["attempts"]))
    for slow in summary["slowest"]:
        assert on_one_line(table, slow["task_id"], f"{slow['duration_ms']:.1f}")
    sessions = ok(url, "sessions")
    assert sessions.splitlines()[0].split()[:2] == ["SESSION", "LABEL"]
    assert on_one_line(sessions, SESSION, LABEL, "2026-11-21")
    piped = run_cli("summary", "tasks", "--server", url, env={"COLUMNS": "60"})  # a real pipe, COLUMNS exported
    assert piped.returncode == 0 and piped.stdout == table


def in_terminal(url: str, columns: int, *args: str, timeout_s: float = 30) -> str:
    """`raysight ARGS…` in a subprocess whose output is a terminal ``columns`` wide (a pty), as a user sees it."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "RAYSIGHT_TOKEN")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "raysight", *args, "--server", url], stdout=follower, stderr=follower, env=env
    )
    os.close(follower)
    out, deadline = b"", time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        assert proc.wait(timeout=max(deadline - time.monotonic(), 1)) == 0, out
    finally:
        os.close(leader)
        if proc.poll() is None:
            proc.kill()
    return out.decode().replace("\r\n", "\n")


def test_narrow_terminal_cuts_text_short_and_never_an_id(url: str) -> None:
    tasks = data(url, "list", "tasks")
    narrow = in_terminal(url, 60, "list", "tasks")
    for task in tasks:  # IDs alone are wider than 60 columns: rows run past the edge rather than split an ID
        assert on_one_line(narrow, *(task[c] for c in ("task_id", "parent_task_id", "node_id") if task[c]))
    jobs = in_terminal(url, 120, "list", "jobs")
    lines = [line for line in jobs.splitlines() if line.strip()]
    assert max(len(line) for line in lines) <= 120, jobs
    assert "…" in jobs and on_one_line(jobs, "01000000", "DRIVER", "RUNNING")
    assert "\x1b[1m" in jobs  # the session heading is bold on a terminal (and plain in a pipe)
    assert "\x1b[" not in ok(url, "list", "jobs")


# Formats, options, errors

FAILED_TASK = "16310a0f0a45af5cffffffffffffffffffffffff01000000"  # `fails`, which raised ValueError: boom
RETRIED_TASK = "c2668a65bda616c1ffffffffffffffffffffffff01000000"  # `crash_once`: attempt 0 failed, 1 finished


def api(url: str, path: str) -> Any:
    return httpx.get(url + path).json()


@pytest.mark.parametrize(
    "args, path",
    [
        (("list", "tasks"), "/api/raysight/tasks"),
        (("list", "jobs", "--detail"), "/api/raysight/jobs?detail=true"),
        (("get", "tasks", FAILED_TASK), f"/api/raysight/tasks/{FAILED_TASK}"),
        (("summary", "tasks"), "/api/raysight/summary/tasks"),
        (("summary", "actors"), "/api/raysight/summary/actors"),
        (("sessions",), "/api/raysight/sessions"),
        (("doctor",), "/api/raysight/doctor"),
    ],
)
def test_json_and_yaml_print_what_the_api_answers(url: str, args: tuple[str, ...], path: str) -> None:
    answer = api(url, path)
    expected = {
        "list": lambda: answer["rows"],
        "get": lambda: answer["rows"][0],
        "sessions": lambda: answer["sessions"],
    }.get(args[0], lambda: answer)()
    if args[0] == "doctor":  # its backlog is read at the time of asking; the rest is at rest
        expected["ingest_backlog"] = {"batches": 0, "bytes": 0}
    assert data(url, *args) == expected
    assert yaml.safe_load(ok(url, *args, "--format", "yaml")) == expected


def test_get_as_a_table_shows_each_attempt_field_by_field(url: str) -> None:
    table = ok(url, "get", "tasks", RETRIED_TASK, "--format", "table")
    assert table.splitlines()[0] == f"Session: {SESSION}"
    assert [line for line in table.splitlines() if line.startswith("attempt ")] == ["attempt 0", "attempt 1"]
    everywhere = ok(url, "get", "tasks", RETRIED_TASK, "--format", "table", "--session", "*")
    assert everywhere.startswith("Session: all\n") and f"\n{SESSION}, attempt 1\n" in everywhere
    assert on_one_line(table, "task_id", RETRIED_TASK) and on_one_line(table, "state", "FAILED")
    assert on_one_line(table, "state", "FINISHED") and on_one_line(table, "func_or_class_name", "crash_once")
    assert on_one_line(table, "end_time_ms", "2026-11-21")
    assert not re.search(r"^ *task_id:", table, re.MULTILINE)  # a table, not YAML (a cell may hold a mapping)
    assert yaml.safe_load(ok(url, "get", "tasks", FAILED_TASK))["error_message"].endswith("ValueError: boom")


def test_doctor_as_a_table(url: str) -> None:
    table = ok(url, "doctor")
    assert on_one_line(table, "RECEIVED", "STORED", "QUARANTINED") and on_one_line(table, "89", "89", "0")
    assert "Acknowledged, not yet folded: 0 batches (0 bytes)" in table
    assert on_one_line(table, SESSION)  # its ingest lag
    assert "Quarantined events (malformed; kept with their reason): none" in table
    assert "counters:" not in table and table.rstrip().endswith("Nothing scraped yet.")


def test_list_jobs_shows_the_drivers_exit_code_without_detail(url: str) -> None:
    (job,) = data(url, "list", "jobs")
    assert "driver_exit_code" in job and job["driver_exit_code"] is None  # this recording ran without `raysight run`
    assert "DRIVER_EXIT_CODE" in ok(url, "list", "jobs").split()


def test_list_filters_sorts_pages_and_details(url: str) -> None:
    failed = data(url, "list", "tasks", "-f", "state=FAILED", "--sort", "name")
    assert [t["name"] for t in failed] == ["Fragile.die", "crash_once", "fails"]
    everything = data(url, "list", "tasks", "-s", "-name", "--limit", "100")
    page = ok(url, "list", "tasks", "-s", "-name", "--limit", "2", "--offset", "1")
    assert all(on_one_line(page, t["task_id"]) for t in everything[1:3]) and "Total: 16 (showing 2-3)" in page
    assert not on_one_line(page, everything[0]["task_id"])
    assert "No rows past offset 100." in ok(url, "list", "tasks", "--offset", "100")
    detail = yaml.safe_load(ok(url, "list", "tasks", "--detail", "-f", f"task_id={FAILED_TASK}"))  # YAML, as Ray
    assert detail[0]["error_message"].endswith("ValueError: boom")
    wide = ok(url, "list", "tasks", "--detail", "--format", "table", "-f", "state=FAILED")
    assert {"EVENTS", "ERROR_MESSAGE", "CREATION_TIME_MS"} <= set(wide.split())


@pytest.mark.parametrize(
    "args",
    [("list", "tasks"), ("get", "tasks", FAILED_TASK), ("summary", "tasks"), ("summary", "actors")],
)
def test_query_commands_take_a_session_by_name_or_label(url: str, args: tuple[str, ...]) -> None:
    newest = data(url, *args)
    assert data(url, *args, "--session", SESSION) == newest == data(url, *args, "--session", LABEL)
    missing = raysight(url, *args, "--session", "nope")
    assert missing.exit_code == 1 and "no session named 'nope'; `raysight sessions` lists them" in missing.stderr


def test_all_sessions_at_once(url: str) -> None:
    assert data(url, "list", "tasks", "--session", "*") == data(url, "list", "tasks")  # one session recorded
    assert ok(url, "list", "jobs", "--session", "*").startswith("Session: all\n")


def test_client_errors_say_what_to_do_and_exit_non_zero(url: str) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"
    for args in (("sessions",), ("list", "tasks"), ("doctor",)):
        result = raysight(nobody, *args)
        assert result.exit_code == 1 and f"Error: no raysight server answers at {nobody}" in result.stderr
    unknown = raysight(url, "get", "tasks", "00ff")
    assert unknown.exit_code == 1 and "no task with id 00ff" in unknown.stderr
    for args, message in [
        (("list", "tasks", "-f", "colour=red"), "tasks have no field 'colour'; known fields:"),
        (("list", "tasks", "-s", "colour"), "no field 'colour'"),
        (("list", "tasks", "-f", "state"), "filter"),
        (("list", "tasks", "--format", "xml"), "'xml' is not one of 'table', 'json', 'yaml'"),
        (("list", "secrets"), "'secrets' is not one of"),
        (("summary", "nodes"), "'nodes' is not one of 'tasks', 'actors'"),
        (
            ("agent", "--on-ray", "--once"),
            "--once, --ray-dir and --metrics-keep/--metrics-drop are for an agent run here",
        ),
        (
            ("agent", "--stop-on-ray", "--ray-dir", "/tmp/ray"),
            "--once, --ray-dir and --metrics-keep/--metrics-drop are for an agent run here",
        ),
    ]:
        result = raysight(url, *args)
        assert result.exit_code == 2 and message in result.stderr, (args, result.output)


def test_help_and_version_list_every_command(url: str) -> None:
    commands = [
        "server",
        "env",
        "run",
        "agent",
        "demo",
        "list",
        "get",
        "summary",
        "logs",
        "errors",
        "sessions",
        "doctor",
        "reindex",
    ]
    listed = ok(url, "--help").split("Recording:")[1].split()  # (the commands, by what they are for)
    assert all(c in listed for c in commands)
    assert ok(url, "--version").startswith("raysight, version ")
    assert "--detach" in ok(url, "server", "-h") and "delete" in ok(url, "sessions", "--help")


def test_errors_lists_each_cause_once_as_a_table_or_json(url: str) -> None:
    table = ok(url, "errors")
    assert table.startswith(f"Session: {SESSION}\n") and "4 root failures in 3 groups" in table
    assert on_one_line(table, "1", "task", "TASK_EXECUTION_EXCEPTION", "ValueError:")
    assert on_one_line(table, "2", "worker", "SYSTEM_ERROR")
    (crashes,) = [line for line in table.splitlines() if "SYSTEM_ERROR" in line]  # the cause, and its latest example
    assert "connection error code <n>. End of file." in crashes and "connection error code 2. End of file." in crashes
    found = data(url, "errors", "--type", "ACTOR_DIED")
    assert [(g["kind"], g["affected"]) for g in found["groups"]] == [("actor", ["Counter"])]
    assert data(url, "errors", "--job", "01000000", "--since", "2026-11-21T19:00:00")["groups"]
    assert ok(url, "errors", "--until", "2020-01-01").endswith("No failures.\n")
    bad = raysight(url, "errors", "--since", "yesterday")
    assert bad.exit_code == 2 and "is neither a time ago" in bad.stderr
    unknown = raysight(url, "errors", "--session", "session_nope")
    assert unknown.exit_code == 1 and "no session named 'session_nope'" in unknown.stderr


def test_errors_show_prints_one_failure_whole(url: str) -> None:
    (raised,) = data(url, "errors", "--type", "TASK_EXECUTION_EXCEPTION")["groups"]
    shown = ok(url, "errors", "show", raised["example"]["id"]).splitlines()
    assert f"Task fails (attempt 0): TASK_EXECUTION_EXCEPTION  [group {raised['group_id']}]" in shown
    why = shown.index("Why")
    assert shown[why + 1 : why + 6] == [  # the remote traceback, whole
        "  User exception:",
        "  ray::fails() (pid=2398, ip=192.0.2.2)",  # (colours only on a terminal)
        '    File "/tmp/cap/work.py", line 11, in fails',
        '      raise ValueError("boom")',
        "  ValueError: boom",
    ]
    assert data(url, "errors", "show", raised["group_id"])["failures"][0]["id"] == raised["example"]["id"]
    missing = raysight(url, "errors", "show", "ab" * 24)
    assert missing.exit_code == 1 and "lists what failed" in missing.stderr
    malformed = raysight(url, "errors", "show", "x!")
    assert malformed.exit_code == 2 and "is no ID" in malformed.stderr


def test_errors_show_colours_ray_s_traceback_on_a_terminal_only(url: str) -> None:
    """Ray's colours (``\\x1b[36mray::fails()\\x1b[39m``, as stored) on a terminal; none in JSON or YAML, in a pipe
    or not, nor in a task's own YAML."""
    coloured = "\x1b[36mray::fails()\x1b[39m (pid=2398, ip=192.0.2.2)"
    assert f"  {coloured}" in in_terminal(url, 200, "errors", "show", FAILED_TASK).splitlines()
    assert "\x1b[" not in in_terminal(url, 200, "errors", "show", FAILED_TASK, "--format", "yaml")
    (failed,) = data(url, "errors", "show", FAILED_TASK)["failures"]
    assert "\nray::fails() (pid=2398" in failed["message"] and "\\u001b" not in failed["detail"].lower()
    as_yaml = ok(url, "errors", "show", FAILED_TASK, "--format", "yaml") + ok(url, "get", "tasks", FAILED_TASK)
    assert "\\e[" not in as_yaml and "\x1b" not in as_yaml


def test_errors_show_of_what_did_not_fail_says_so(url: str) -> None:
    (child, *_) = data(url, "list", "tasks", "--filter", "func_or_class_name=child")
    assert ok(url, "errors", "show", child["task_id"]) == f"{child['task_id']} did not fail in {SESSION}.\n"
    assert data(url, "errors", "show", "01000000") == {"session": SESSION, "id": "01000000", "failures": []}


# env and run (without Ray: a trivial program stands in for a Ray driver)


def test_env_prints_the_export_lines_for_ray_start(url: str) -> None:
    lines = ok(url, "env", "--server", "http://head:8271", "--cluster", "prod", "--ingest-key", "K").splitlines()
    assert lines == [
        "export RAY_enable_ray_event='1'",
        "export RAY_enable_core_worker_ray_event_to_aggregator='1'",
        "export RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR='http://head:8271/ingest/ray-events?cluster=prod&key=K'",
        "export RAY_DASHBOARD_AGGREGATOR_AGENT_EXPOSABLE_EVENT_TYPES='ALL'",
        "export RAY_ENABLE_RECORD_ACTOR_TASK_LOGGING='1'",
        "export RAY_RUNTIME_ENV_HOOK='raysight.instrument.runtime_env_hook'",
        "export RAYSIGHT_OTLP_ENDPOINT='http://head:8271/ingest/otlp/K'",
        "export RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH='raysight.instrument.serve_span_processors'",
        "export RAY_SERVE_TRACING_SAMPLING_RATIO='1.0'",
        "export RAYSIGHT_RAY_SYSTEM_CONFIG="
        """'{"enable_ray_event": true, "enable_core_worker_ray_event_to_aggregator": true}'""",
        '# on the head node: ray start --head --system-config="$RAYSIGHT_RAY_SYSTEM_CONFIG" …  '
        "(drivers started elsewhere",
        "# then send their tasks' events too); on the other nodes: ray start --address=… (these exports, no config)",
        "# and on every node, for its logs: raysight agent --server http://head:8271 --ingest-key K &",
    ]
    assert f"'{url}/ingest/ray-events'" in ok(url, "env")  # the server from RAYSIGHT_SERVER


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    unset = (ENV_SERVER, ENV_TOKEN, ENV_INGEST_KEY, "RAY_ADDRESS")
    env = {k: v for k, v in {**os.environ, **(env or {})}.items() if k not in unset}
    return subprocess.run(
        [sys.executable, "-m", "raysight", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def test_run_passes_the_programs_exit_code_through_and_reports_it(url: str) -> None:
    program = "import os, sys; print(os.environ['RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR']); sys.exit(3)"
    done = run_cli("run", "--server", url, "--cluster", "c1", "--", sys.executable, "-c", program)
    assert done.returncode == 3, done.stderr
    assert done.stdout.startswith(f"{url}/ingest/ray-events?cluster=c1&run=") and done.stderr == ""
    missing = run_cli("run", "--server", url, "--", "no-such-program-here")
    assert missing.returncode == 1 and "Error: command not found: no-such-program-here" in missing.stderr
    nobody = f"http://127.0.0.1:{free_port()}"
    unreachable = run_cli("run", "--server", nobody, "--", sys.executable, "-c", "pass")
    assert unreachable.returncode == 1 and f"no raysight server answers at {nobody}" in unreachable.stderr


# logs (the lines themselves come from a node agent: tests/test_logs_ingest.py, tests/test_ray_integration.py)


def test_logs_refuses_bad_arguments_with_what_to_do(url: str) -> None:
    for args, code, message in [
        (("--regex", "(unclosed"), 2, "bad regex '(unclosed'"),
        (("--level", "LOUD"), 2, "level must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL, FATAL"),
        (("--since", "yesterday-ish"), 2, "neither a time ago (30s, 10m, 2h, 1d) nor an ISO 8601 time"),
        (("--stream", "video"), 2, "'video' is not one of 'stdout', 'stderr', 'system'"),
        (("--tail", "-1"), 2, "--tail must not be negative"),
        (("--format", "xml"), 2, "'xml' is not one of 'text', 'json'"),
        (("--session", "nope"), 1, "no session named 'nope'"),
    ]:
        result = raysight(url, "logs", *args)
        assert result.exit_code == code and message in result.stderr, (args, result.output)


def test_logs_of_a_session_without_any_print_nothing_and_succeed(url: str) -> None:
    assert ok(url, "logs") == "" and ok(url, "logs", "--since", "10m", "--until", "2026-11-23T00:00:00") == ""
    assert ok(url, "logs", "--task", FAILED_TASK, "--format", "json") == ""


def test_logs_times_and_ray_s_prefixes() -> None:
    from raysight.cli.common import parse_time
    from raysight.cli.logs import prefix

    now = 2_000_000_000 * 10**9
    assert parse_time("30s", now) == now - 30 * 10**9 and parse_time("1.5h", now) == now - 5400 * 10**9
    assert parse_time("2026-11-23T00:00:00", now) == parse_time("2026-11-23T01:00:00+01:00", now) == 1795392000 * 10**9
    line = {"stream": "stdout", "pid": 7, "task_name": "f", "actor_name": None, "name": "worker-….out"}
    assert prefix(line) == "(f pid=7)"
    assert prefix({**line, "actor_name": "Counter(n=1)"}) == "(Counter pid=7)"
    assert prefix({**line, "stream": "system", "name": "raylet.out"}) == "[raylet.out]"


def test_logs_colour_ray_s_prefix_on_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    from raysight.cli.logs import _echo

    line = {"stream": "stderr", "pid": 7, "task_name": "f", "actor_name": None, "name": "w", "continued": False}
    _echo({**line, "text": "oops"}, "text", color=True)
    _echo({**line, "text": "plain"}, "text", color=False)
    assert capsys.readouterr().out.splitlines() == ["\x1b[31m(f pid=7)\x1b[0m oops", "(f pid=7) plain"]


def test_the_client_reads_answers_orjson_refuses_with_the_stdlib() -> None:
    from raysight.client import _parse

    assert _parse(httpx.Response(200, content=b'{"n": 18446744073709551616}')) == {"n": 2**64}  # past 64 bits
    assert _parse(httpx.Response(200, content=b'{"rows": [1, null]}')) == {"rows": [1, None]}


def test_a_record_follows_the_one_before_only_where_that_one_ends() -> None:
    from raysight.cli.logs import follows

    line = {"file_key": "k", "byte_offset": 10, "text": "héllo", "continued": False}  # 6 bytes and a newline
    assert follows(line, {**line, "byte_offset": 17})
    assert not follows(line, {**line, "byte_offset": 16}) and not follows(line, {**line, "byte_offset": 18})
    assert follows(line, {**line, "byte_offset": 16, "continued": True})  # a piece of the same line: no newline
    assert not follows(line, {**line, "byte_offset": 17, "file_key": "other"})


def test_help_groups_the_commands_and_each_command_s_help_leads_with_an_example_that_parses() -> None:
    """`raysight --help` lists every command once, under what it is for; each command's help opens with one example,
    whose words that command takes."""
    runner = CliRunner()
    listing = runner.invoke(main, ["--help"]).output
    titles = [line for line in listing.splitlines() if line.endswith(":") and not line.startswith(" ")]
    assert (
        titles
        == ["Options:", *(f"{title}:" for title in SECTIONS)]
        == ["Options:", "Recording:", "Querying:", "Debugging:", "Tools:"]
    )
    named = [command.name for commands in SECTIONS.values() for command, _ in commands]
    assert len(named) == len(set(named)) and set(named) == set(main.commands)
    for commands in SECTIONS.values():
        for command, example in commands:
            shown = runner.invoke(main, [str(command.name), "--help"]).output.split("\n\n")
            assert shown[1].strip() == f"Example: {shlex.join(['raysight', *example])}", shown[:2]
            said: click.Command = main  # the words parsed as a user's would be, by the command they name; none run
            words = list(example)
            while isinstance(said, click.Group) and words and words[0] in said.commands:
                said, words = said.commands[words[0]], words[1:]
            said.make_context(str(said.name), words, parent=click.Context(main, info_name="raysight"))
