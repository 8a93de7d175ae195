"""Tracing with a real Ray and the real OpenTelemetry SDK: one traced workload (`raysight run`, tracing on by
default) whose driver continues a caller's trace, read back through the CLI as users run it and through the API."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

import raysight.instrument
from raysight import wire
from raysight.cli import main
from raysight.client import Client
from raysight.signals.spans.traces_query import critical_path, tree_order
from tests.ray_programs import traced as traced_program
from tests.ray_scenarios import ServerProcess, cli, ray_run

INCOMING_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
INCOMING_SPAN = "00f067aa0ba902b7"


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, list[dict[str, Any]]]]:
    """The workload's server, and the spans of its trace (`raysight traces show --format json`)."""
    tmp = tmp_path_factory.mktemp("traced")
    server = ServerProcess(tmp / "data").start()
    try:
        ray_run(
            server.url,
            "traced",
            "-m",
            "tests.ray_programs.traced",
            str(tmp / "flaky-marker"),
            env={"TRACEPARENT": f"00-{INCOMING_TRACE}-{INCOMING_SPAN}-01"},
        )
        shown = cli(server, "traces", "show", INCOMING_TRACE, "--format", "json")
        yield server, orjson.loads(shown)["spans"]
    finally:
        server.stop()


def one(spans: list[dict[str, Any]], name: str) -> dict[str, Any]:
    found = [s for s in spans if s["name"] == name]
    assert len(found) == 1, f"{len(found)} spans named {name}: {[s['name'] for s in spans]}"
    return found[0]


def test_driver_task_nested_task_actor_and_async_actor_form_one_trace(traced) -> None:
    server, spans = traced
    assert {s["trace_id"] for s in spans} == {INCOMING_TRACE}
    request = one(spans, "request")
    assert request["parent_span_id"] == INCOMING_SPAN  # the driver continued its caller's trace
    edges = {
        "middle": "request",
        "leaf": "middle",
        "user-span": "leaf",
        "Counter.__init__": "middle",
        "Counter.add": "middle",
        "Doubler.__init__": "Counter.__init__",
        "Doubler.work": "Counter.add",
        "count_to": "request",
    }
    for child, parent in edges.items():
        assert one(spans, child)["parent_span_id"] == one(spans, parent)["span_id"], (child, parent)
    assert one(spans, "lonely")["parent_span_id"] == INCOMING_SPAN  # submitted outside any span
    assert one(spans, "leaf")["kind"] == "consumer" and one(spans, "Doubler.work")["attributes"]["ray.task.kind"] == (
        "actor_task"
    )
    waits = [s for s in spans if s["name"] == "ray.get"]
    assert {s["parent_span_id"] for s in waits} >= {request["span_id"], one(spans, "middle")["span_id"]}


def test_spans_carry_the_ray_ids_of_their_task_worker_and_actor(traced) -> None:
    server, spans = traced
    with Client(server.url) as client:
        tasks = {t["task_id"]: t for t in client.list("tasks", limit=1000)["rows"]}
        session = client.sessions()[0]["session"]
    for name in ("middle", "leaf", "Counter.add", "Doubler.work", "count_to"):
        span = one(spans, name)
        task = tasks[span["task_id"]]
        assert task["func_or_class_name"].endswith(name.split(".")[-1]) or task["name"].endswith(name), (name, task)
        assert span["attempt"] == 0 and span["session"] == session and span["job_id"] == task["job_id"]
        assert span["worker_id"] == task["worker_id"] and span["node_id"] == task["node_id"]
    work, add = one(spans, "Doubler.work"), one(spans, "Counter.add")
    assert work["actor_id"] and add["actor_id"] and work["actor_id"] != add["actor_id"]
    assert tasks[work["task_id"]]["actor_id"] == work["actor_id"]
    user, leaf = one(spans, "user-span"), one(spans, "leaf")
    assert user["task_id"] == leaf["task_id"] and user["attributes"]["user.x"] == 1
    # the worker's IDs once, on its provider's resource, not on each of its spans
    assert (user["session"], user["worker_id"], user["pid"]) == (leaf["session"], leaf["worker_id"], leaf["pid"])
    assert not {wire.ATTR_SESSION, wire.ATTR_WORKER_ID, wire.ATTR_PID} & set(user["attributes"]), user["attributes"]


def test_a_retried_task_shows_each_attempt(traced) -> None:
    server, spans = traced
    attempts = sorted((s for s in spans if s["name"] == "flaky"), key=lambda s: s["attempt"])
    assert [s["attempt"] for s in attempts] == [0, 1]
    assert attempts[0]["task_id"] == attempts[1]["task_id"]
    assert attempts[0]["parent_span_id"] == attempts[1]["parent_span_id"] == one(spans, "request")["span_id"]
    assert attempts[0]["status"] == "error" and "on purpose" in attempts[0]["status_message"]
    assert attempts[0]["events"][0]["name"] == "exception"
    assert attempts[1]["status"] == "unset"


def test_traces_lists_and_shows_the_trace_as_a_tree(traced) -> None:
    server, spans = traced
    leaf = one(spans, "leaf")
    listed = orjson.loads(cli(server, "traces", "--task", leaf["task_id"], "--format", "json"))
    assert [t["trace_id"] for t in listed["traces"]] == [INCOMING_TRACE]
    assert listed["traces"][0]["root"] == "request" and listed["traces"][0]["spans"] == len(spans)
    assert listed["traces"][0]["errors"] == 1
    table = cli(server, "traces")
    assert INCOMING_TRACE in table and "request" in table
    assert INCOMING_TRACE in cli(server, "traces", "--errors")
    assert "No traces." in cli(server, "traces", "--min-duration", "1h")
    tree = cli(server, "traces", "show", INCOMING_TRACE).split("\n\n")[0].splitlines()  # (then a hint)
    assert tree[0].startswith(f"Trace {INCOMING_TRACE}") and len(tree) == 1 + len(spans)
    line = {name: next(row for row in tree[1:] if f" {name}" in row) for name in ("request", "middle", "Counter.add")}
    line["Doubler.work"] = next(row for row in tree[1:] if " Doubler.work" in row)
    column = {name: row.index(name) for name, row in line.items()}  # indented two spaces a level
    assert column["Doubler.work"] == column["Counter.add"] + 2 == column["middle"] + 4 == column["request"] + 6
    last = max((s for s in spans if s["depth"] == 0), key=lambda s: s["end_ns"])  # after `request`: lonely's ray.get
    assert last["critical"] and not one(spans, "request")["critical"]
    assert not line["request"].startswith("*") and sum(row.startswith("*") for row in tree[1:]) == sum(
        s["critical"] for s in spans
    )


def test_a_tasks_log_lines_lead_to_its_trace_and_the_trace_to_them(traced) -> None:
    server, spans = traced
    leaf = one(spans, "leaf")
    result = CliRunner().invoke(main, ["logs", "--task", leaf["task_id"], "--server", server.url])
    assert result.exit_code == 0, result.output
    assert f"leaf: task_id={leaf['task_id']}" in result.stdout  # what the task printed, inside its user span
    assert f"[trace of this task: raysight traces show {INCOMING_TRACE}  (request)]" in result.stderr
    logged = cli(server, "logs", "--task", leaf["task_id"], "--grep", "logged inside", "--format", "json")
    (line,) = [orjson.loads(row) for row in logged.splitlines() if row.startswith("{")]  # a JSON line a log line
    assert line["trace_id"] == INCOMING_TRACE and line["span_id"] == one(spans, "user-span")["span_id"]
    shown = cli(server, "traces", "show", INCOMING_TRACE).splitlines()
    (hint,) = [line for line in shown if line.startswith("What a span's task printed: raysight logs --task ")]
    task_id = hint.split("--task ")[1].split()[0]
    assert task_id in {s["task_id"] for s in spans}


def test_attempts_whose_owner_died_end_as_raysights_spans_of_them_say(traced) -> None:
    """`lost_owner` died as soon as its leaves had returned or raised, before it sent Ray their end states: Ray shows
    them RUNNING; raysight's span of each says how it ended, whatever a reindex rebuilds."""
    server, _ = traced

    def leaves() -> dict[str, dict[str, Any]]:
        with Client(server.url) as client:
            rows = client.list("tasks", filters=["name=lost_leaf"], detail=True)["rows"]
        keys = ("state", "reported_state", "state_inferred", "inferred_reason", "error_type", "error_message")
        return {t["task_id"]: {key: t[key] for key in keys} for t in rows}

    before = leaves()
    assert len(before) == traced_program.LOST_LEAVES
    for task in before.values():
        assert task["reported_state"] not in ("FINISHED", "FAILED") and task["state_inferred"], task
        assert task["inferred_reason"].startswith("raysight's span of this attempt (span "), task
    states = sorted(t["state"] for t in before.values())
    assert states == ["FAILED"] + ["FINISHED"] * (traced_program.LOST_LEAVES - 1)
    (failed,) = [t for t in before.values() if t["state"] == "FAILED"]
    assert failed["error_type"] == "TASK_EXECUTION_EXCEPTION"
    assert failed["error_message"].endswith(f"ValueError: leaf {traced_program.RAISES} raises on purpose")
    (finished, *_) = [t for t in before.values() if t["state"] == "FINISHED"]
    assert "it could still have failed storing the returned value" in finished["inferred_reason"]
    with Client(server.url) as client:
        assert client.reindex() > 0
    assert leaves() == before


FRAME = re.compile(r'\s*File "(?P<file>[^"]+)", line \d+, in (?P<function>.+)')


def frames(traceback: str) -> list[str]:
    """A traceback's text after its first line, the workload's own frames whole (where, and the lines shown of them),
    the others by file and function alone."""
    out, shown = [], True  # whether the lines shown under the frame last met are compared
    for line in traceback.splitlines()[1:]:
        if match := FRAME.fullmatch(line):
            shown = match["file"].endswith("ray_programs/traced.py")
            out.append(line if shown else f'File "{match["file"]}", in {match["function"]}')
        elif shown or line.lstrip() == line:  # a line shown of the workload's frame, or the traceback's own
            out.append(line)
    return out


def test_a_failed_tasks_traceback_is_the_one_it_has_untraced(traced) -> None:
    """Each kind of task (plain, streaming, a method of a sync actor, of an async one, an async streaming one) failed
    in the workload twice: in a worker raysight traces, and in one of the same job that skips the job's setup hook,
    which is what puts raysight in a worker (the same code, Ray and driver; a second Ray run without raysight would
    cost seconds more). What Ray gave the driver reads the same, frame for frame and line for line, but for its
    first line (pid, actor) and where Ray's and Python's own frames stopped (a future awaited may be done already, or
    not); `raysight errors show` and the task's span show no frame of raysight's either."""
    server, _ = traced
    own = str(Path(raysight.instrument.__file__).parent)
    failed = orjson.loads((server.data_dir.parent / "tracebacks.json").read_bytes())
    kinds = {"task", "streaming task", "method", "async method", "async streaming method"}
    assert set(failed["traced"]) == set(failed["untraced"]) == kinds
    for kind, untraced in failed["untraced"].items():
        text = untraced["text"].splitlines()
        assert any(line.strip().startswith("raise ValueError(") for line in text), untraced["text"]
        assert frames(failed["traced"][kind]["text"]) == frames(untraced["text"]), kind
    task_id = failed["traced"]["task"]["task_id"]
    shown = cli(server, "errors", "show", task_id)
    assert 'raise ValueError("a task broke")' in shown and own not in shown
    (trace,) = orjson.loads(cli(server, "traces", "--task", task_id, "--format", "json"))["traces"]
    spans = orjson.loads(cli(server, "traces", "show", trace["trace_id"], "--format", "json"))["spans"]
    (event,) = one(spans, "breaks")["events"]
    stack = event["attributes"]["exception.stacktrace"]
    assert 'raise ValueError("a task broke")' in stack and own not in stack


def test_the_critical_path_follows_what_each_span_waited_on_last() -> None:
    def span(name: str, parent: str | None, start: int, end: int) -> dict[str, Any]:
        return {"span_id": name, "parent_span_id": parent, "start_ns": start, "end_ns": end}

    spans = [
        span("root", None, 0, 100),
        span("a", "root", 0, 40),  # ended before b started: waited on next
        span("c", "root", 10, 30),  # overlapped a: hidden behind it
        span("b", "root", 50, 95),  # ended last
        span("b1", "b", 60, 90),
        span("late", "root", 20, 120),  # ended after its parent: not waited on
        span("other-root", None, 0, 10),
    ]
    assert critical_path(tree_order(sorted(spans, key=lambda s: s["start_ns"]))) == {"root", "b", "b1", "a"}


def test_ray_own_hook_is_never_doubled_and_its_span_files_import(tmp_path: Path) -> None:
    """Ray's tracing on (its local hook) under `raysight run`, whose tracing is on too: Ray's wrappers trace, raysight
    adds no span and no second carrier of its own; `raysight traces import` then reads the files Ray's hook wrote."""
    server = ServerProcess(tmp_path / "data").start()
    try:
        pids_file = tmp_path / "pids"
        ray_run(server.url, "ray-hook", "-m", "tests.ray_programs.ray_hook_traced", str(pids_file))
        with Client(server.url) as client:
            session = client.sessions()[0]["session"]
            tasks = client.list("tasks", limit=100)["rows"]
            assert {"outer", "inner", "Keeper.pid"} <= {t["name"] for t in tasks}
            # no task refused an argument it did not take (the driver, which got every result, exited 0 too); an end
            # raysight inferred is Ray's loss of a local cluster's last events (the tasks that ran last), not a refusal
            assert not [t for t in tasks if t["state"] == "FAILED" and not t["state_inferred"]]
        files = [Path(f"/tmp/spans/{pid}.txt") for pid in pids_file.read_text().split()]
        written = sum(f.read_bytes().count(b"\n") for f in files if f.exists())
        assert written >= 6  # a producer span where each call was made, a consumer span where it ran
        output = cli(server, "traces", "import", *(str(f) for f in files if f.exists()))
        assert f"Imported {written:,} spans from" in output and session in output
        inner = orjson.loads(
            cli(
                server,
                "traces",
                "--name",
                "__main__.inner ray.remote_worker",
                "--format",
                "json",
            )
        )
        (trace_id,) = [t["trace_id"] for t in inner["traces"]]
        spans = orjson.loads(cli(server, "traces", "show", trace_id, "--format", "json"))["spans"]
        names = {s["name"] for s in spans}
        assert not any(s["attributes"].get("ray.task.kind") for s in spans)  # none of raysight's own task spans
        ran = one(spans, "__main__.inner ray.remote_worker")
        called = next(s for s in spans if s["span_id"] == ran["parent_span_id"])
        assert called["name"] == "__main__.inner ray.remote" and called["kind"] == "producer"
        assert ran["task_id"] and ran["job_id"] and ran["pid"] in {int(p) for p in pids_file.read_text().split()}
        assert ran["session"] == session and len(names) >= 5
    finally:
        server.stop()
