"""`raysight profile stack|cpu|memory`: an on-demand profile of a live Ray process, which the agent of its node makes
(py-spy, memray) and the server keeps; `raysight profiles`: those asked of a session, and how each went, with the
memray captures Serve's actors made of themselves (whose files memray's own reporters read)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
import orjson

from raysight import flame, units, wire
from raysight.agent.captures import CPU_RATE_HZ
from raysight.cli import render
from raysight.cli.common import admin_token_for, make_client, server_option, session_option, who_asks
from raysight.cli.debug import printable
from raysight.cli.profile import SUFFIXES, emit, profile_cmd, show
from raysight.client import Client
from raysight.settings import default_server

F = TypeVar("F", bound=Callable[..., Any])
POLL_S = 0.25
# How long the CLI follows a request beyond its duration: the server fails one no agent took within 30 s or sent back
# within 180 s more (``server/capture_queue.py``), so this is only a bound on a server that stopped answering
FOLLOW_S = 240.0
MEMRAY_SUFFIXES = (".bin", ".html")  # a Serve capture's memray file, and memray's flame graph report of it


def _target(command: F) -> F:
    """The options that name the process: a running task's worker, a live actor's, or a pid of a node."""
    for option in reversed(
        [
            click.option("--task", metavar="ID", help="The worker running this task now (its latest attempt)."),
            click.option("--actor", metavar="ID", help="This live actor's worker."),
            click.option("--pid", type=click.IntRange(1), help="This process (with --node)."),
            click.option("--node", metavar="ID", help="The node of --pid."),
            click.option("--native", is_flag=True, help="Native (C/C++) frames too."),
            session_option,
            server_option,
        ]
    ):
        command = option(command)
    return command


def _output_options(command: F) -> F:
    for option in reversed(
        [
            click.option(
                "-o",
                "--output",
                type=click.Path(dir_okay=False, writable=True, path_type=Path),
                help="Write it to this file, in the format its name says: .svg a flame graph, .json speedscope's, "
                "else collapsed stacks.",
            ),
            click.option(
                "--format",
                "fmt",
                type=click.Choice(("table", "collapsed", "speedscope", "svg", "json")),
                help="table: the heaviest [default on a terminal]; collapsed: flamegraph.pl's folded stacks; "
                "speedscope: its JSON; svg: a flame graph; json: the answer as the API gives it.",
            ),
            click.option("--limit", type=click.IntRange(1), default=20, show_default=True, help="Rows in the table."),
        ]
    ):
        command = option(command)
    return command


def capture(
    server: str | None,
    kind: str,
    task: str | None,
    actor: str | None,
    pid: int | None,
    node: str | None,
    session: str | None,
    native: bool,
    duration: float | None = None,
    leaks: bool = False,
) -> dict[str, Any]:
    """Ask for a profile, follow it (saying how it goes on stderr) and return it once its agent sent it back; a click
    error saying why where it failed."""
    if sum(v is not None for v in (task, actor, pid)) != 1 or (pid is None) != (node is None):
        raise click.UsageError("name one process: --task ID, --actor ID, or --pid N with --node ID")
    asked: wire.CaptureAsked = {
        "kind": kind,
        "session": session,
        "task_id": task,
        "actor_id": actor,
        "pid": pid,
        "node_id": node,
        "native": native,
    }
    if duration is not None:
        asked["duration_s"] = duration
    if leaks:
        asked["leaks"] = True
    url = server or default_server()
    with Client(url, admin_token=admin_token_for(url)) as client:
        found = client.ask_capture(asked, who_asks())
        capture_id, said = found["capture_id"], "queued"
        click.echo(
            f"raysight: {kind} profile {capture_id} of pid {found['pid']} on node {found['node_id'][:12]}… "
            f"({flame.capture_of(found)}): waiting for the node's agent",
            err=True,
        )
        deadline = time.monotonic() + (duration or 0) + FOLLOW_S
        while found["status"] in ("queued", "running"):
            if time.monotonic() > deadline:
                raise click.ClickException(
                    f"{url} has not finished profile {capture_id}: `raysight profiles` follows it"
                )
            time.sleep(POLL_S)
            found = client.capture(capture_id)
            if found["status"] == "running" and said == "queued":
                said = "running"
                lasting = f" for {found['duration_s']:g}s" if found["duration_s"] else ""
                click.echo(f"raysight: the agent is profiling pid {found['pid']}{lasting}", err=True)
    if found["status"] == "failed":
        raise click.ClickException(f"profile {capture_id} failed: {printable(found['error'])}")
    return found


@profile_cmd.command("stack")
@_target
@click.option("--format", "fmt", type=click.Choice(("text", "collapsed", "json")), default="text", show_default=True)
def stack_cmd(
    task: str | None,
    actor: str | None,
    pid: int | None,
    node: str | None,
    native: bool,
    session: str | None,
    server: str | None,
    fmt: str,
) -> None:
    """Every thread's stack of a live Ray process now (py-spy dump, run by the agent of its node). Needs the server
    to allow profiling (--allow-profiling) and its admin token, on loopback too; the request is recorded."""
    found = capture(server, "stack", task, actor, pid, node, session, native)
    if fmt == "json":
        click.echo(orjson.dumps(found, option=orjson.OPT_INDENT_2).decode())
    elif fmt == "collapsed":
        emit("".join(f"{stack} {weight}\n" for stack, weight in found["stacks"]), None, "", fmt)
    else:
        click.echo(printable(f"{flame.capture_title(found)}\n\n{found['text'].rstrip()}"))


@profile_cmd.command("cpu")
@_target
@click.option("--duration", default="10s", show_default=True, help="How long to sample (at 100 Hz): 10s, 2m.")
@_output_options
def cpu_cmd(
    task: str | None,
    actor: str | None,
    pid: int | None,
    node: str | None,
    native: bool,
    session: str | None,
    server: str | None,
    duration: str,
    output: Path | None,
    fmt: str | None,
    limit: int,
) -> None:
    """Where a live Ray process spends its CPU: py-spy record for --duration, run by the agent of its node (a flame
    graph with -o FILE.svg). Needs the server to allow profiling (--allow-profiling) and its admin token, on loopback
    too; the request is recorded."""
    found = capture(server, "cpu", task, actor, pid, node, session, native, _seconds(duration))
    _show(found, output, fmt, limit, 1 / CPU_RATE_HZ)


@profile_cmd.command("memory")
@_target
@click.option("--duration", default="10s", show_default=True, help="How long to track allocations: 10s, 2m.")
@click.option("--leaks", is_flag=True, help="What is still allocated at the end, not what was held at the peak.")
@_output_options
def memory_cmd(
    task: str | None,
    actor: str | None,
    pid: int | None,
    node: str | None,
    native: bool,
    session: str | None,
    server: str | None,
    duration: str,
    leaks: bool,
    output: Path | None,
    fmt: str | None,
    limit: int,
) -> None:
    """What allocates a live Ray process's memory: memray attach for --duration (through gdb, on the node), run by
    the agent of its node; the lines that held the most at the peak (or, --leaks, still at the end), by bytes.
    Needs the server to allow profiling (--allow-profiling) and its admin token, on loopback too; the request is
    recorded."""
    found = capture(server, "memory", task, actor, pid, node, session, native, _seconds(duration), leaks)
    _show(found, output, fmt, limit, None)


def _seconds(text: str) -> float:
    try:
        return units.duration_s(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--duration") from None


def _memray_file(client: Client, found: dict[str, Any], output: Path) -> None:
    """A Serve capture's memray file as Serve wrote it (``output`` a .bin), or memray's own flame graph report of it
    (an .html)."""
    data = client.capture_file(found["capture_id"])
    if output.suffix.lower() == ".bin":
        output.write_bytes(data)
        made = "memray's capture file"
    else:
        with tempfile.TemporaryDirectory(prefix="raysight-memray-") as folder:
            path = Path(folder) / "capture.bin"
            path.write_bytes(data)
            report = [
                sys.executable,
                "-m",
                "memray",
                "flamegraph",
                "--no-web",
                "--force",
                "--output",
                str(output),
                str(path),
            ]
            done = subprocess.run(report, capture_output=True, text=True)
        if done.returncode != 0:
            raise click.ClickException(f"memray flamegraph failed: {(done.stderr or done.stdout).strip()[-500:]}")
        made = "memray's flame graph"
    click.echo(f"{printable(flame.capture_of(found))} -> {output} ({made})", err=True)


def _show(found: dict[str, Any], output: Path | None, fmt: str | None, limit: int, each: float | None) -> None:
    kind = fmt or (SUFFIXES.get(output.suffix.lower(), "collapsed") if output else "table")
    stacks = [(printable(stack), weight) for stack, weight in found["stacks"]]  # (frames the process named)
    title, unit = printable(flame.capture_title(found)), found["unit"]
    if kind == "json":
        emit(orjson.dumps(found, option=orjson.OPT_INDENT_2).decode() + "\n", output, title, kind)
        return
    if not stacks:
        raise click.ClickException(f"{title}: nothing was found (a process idle throughout shows no CPU samples)")
    show(stacks, kind, title, output, limit, unit, each, lines=unit == "bytes")


@click.command("profiles")
@click.argument("capture_id", required=False)
@click.option("--task", metavar="ID", help="Only those of this task.")
@click.option("--actor", metavar="ID", help="Only those of this actor.")
@_output_options
@session_option
@server_option
def profiles_cmd(
    capture_id: str | None,
    task: str | None,
    actor: str | None,
    output: Path | None,
    fmt: str | None,
    limit: int,
    session: str | None,
    server: str | None,
) -> None:
    """The on-demand profiles asked of a session (`raysight profile stack|cpu|memory`), and the memray captures
    Serve's actors made of themselves (RAY_SERVE_ENABLE_MEMORY_PROFILING=1), newest first: of what, by whom, how each
    ended. With a profile's ID, that profile, as it was shown when it was made (a stack's threads, a table, or -o a
    flame graph), long after its cluster is gone; a Serve capture's memray file with -o FILE.bin, memray's own flame
    graph report of it with -o FILE.html."""
    with make_client(server) as client:
        if capture_id is not None:
            found = client.capture(capture_id)
            if output is not None and fmt is None and output.suffix.lower() in MEMRAY_SUFFIXES:
                _memray_file(client, found, output)
                return
            if found["status"] == "failed":
                raise click.ClickException(f"profile {capture_id} failed: {printable(found['error'])}")
            if found["status"] != "done":
                raise click.ClickException(f"profile {capture_id} is {found['status']}: ask again once it is done")
            if found["kind"] == "stack" and fmt is None and output is None:
                click.echo(printable(f"{flame.capture_title(found)}\n\n{found['text'].rstrip()}"))
            else:
                _show(found, output, fmt, limit, 1 / CPU_RATE_HZ if found["kind"] == "cpu" else None)
            return
        if output is not None or fmt is not None:
            raise click.UsageError("-o and --format show one profile: name it (`raysight profiles ID`)")
        data = client.captures(session=session, task=task, actor=actor)
    click.echo(f"Session: {data['session']}")
    rows = [
        {
            "profile": row["capture_id"],
            "kind": row["kind"],
            "of": flame.capture_of(row),
            "pid": row["pid"],
            "asked_ms": row["requested_ns"] // 1_000_000,
            "by": row["client"],
            "status": row["status"],
            "error": printable(row["error"] or "")[:80],
        }
        for row in data["rows"]
    ]
    render.table(rows, columns=["profile", "kind", "of", "pid", "asked_ms", "by", "status", "error"])
