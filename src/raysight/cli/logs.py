"""`raysight logs`: the lines Ray's workers and components wrote, as `ray logs` and the driver's redirected output
show them (``(task_name pid=N) text``), for live and ended sessions alike."""

from __future__ import annotations

import sys
import time
from datetime import datetime
from typing import Any

import click
import orjson

from raysight.cli.common import make_client, server_option, session_option, time_window
from raysight.signals.log_lines.parse import STREAMS

PAGE = 10_000  # lines per request while printing everything that matches
FOLLOW_POLL_S = 0.25


def prefix(row: dict[str, Any], task: bool = True) -> str:
    """Ray's prefix for a line: ``(task_name pid=N)``, ``(ClassName pid=N)`` for an actor's, ``[file]`` for a
    component's own log; with the task attempt it is of, where known and ``task``: ``(f pid=N, task_id=ID)`` (and
    ``attempt=N`` after the first)."""
    if row["stream"] == "system" or row["pid"] is None:
        return f"[{row['name']}]"
    actor = row.get("actor_name")
    who = actor.split("(", 1)[0] if actor else row.get("task_name") or "worker"
    if not task or row.get("task_id") is None:
        return f"({who} pid={row['pid']})"
    attempt = f", attempt={row['attempt']}" if row.get("attempt") else ""
    return f"({who} pid={row['pid']}, task_id={row['task_id']}{attempt})"


def follows(before: dict[str, Any], row: dict[str, Any]) -> bool:
    """Whether ``row`` is the record of its file right after ``before`` (by its text's length: approximately, for a
    line that is not UTF-8)."""
    newline = 0 if row["continued"] else 1  # a piece that a continuation follows ended without one
    end = before["byte_offset"] + len(before["text"].encode()) + newline
    return row["file_key"] == before["file_key"] and row["byte_offset"] == end


def _echo(row: dict[str, Any], fmt: str, color: bool, task: bool = True) -> None:
    if fmt == "json":
        click.echo(orjson.dumps(row).decode())
        return
    head = prefix(row, task)
    if color:
        head = click.style(head, fg="red" if row["stream"] == "stderr" else "cyan")
    continued = "… " if row["continued"] else ""
    click.echo(f"{head} {continued}{row['text']}", color=color)


class _Printer:
    """Prints lines once each, in order (a page's context lines may reach into the next page's), with grep's ``--``
    between groups of lines apart when ``separate``."""

    def __init__(self, fmt: str, color: bool, separate: bool, task: bool) -> None:
        self.fmt, self.color, self.separate, self.task = fmt, color, separate, task
        self.last: dict[str, Any] | None = None

    def print(self, rows: list[dict[str, Any]]) -> int:
        """Print ``rows`` not printed yet; the lines found among them (not context)."""
        for row in rows:
            if self.last is not None and row["seq"] <= self.last["seq"]:
                continue
            if self.separate and self.fmt == "text" and self.last is not None and not follows(self.last, row):
                click.echo("--")
            _echo(row, self.fmt, self.color, self.task)
            self.last = row
        return sum(1 for row in rows if not row.get("context"))


@click.command("logs")
@click.option("--task", metavar="ID", help="A task's lines (each attempt's, exact where Ray gave its byte ranges).")
@click.option("--attempt", type=int, metavar="N", help="With --task: only this attempt.")
@click.option("--actor", metavar="ID", help="An actor's lines, between its calls too.")
@click.option("--job", metavar="ID", help="A job's lines.")
@click.option("--node", metavar="ID", help="The lines of a node's workers.")
@click.option("--worker", metavar="ID", help="A worker's lines.")
@click.option("--pid", type=int, help="A process's lines.")
@click.option("--file", "file_name", metavar="NAME", help="Files whose name holds NAME (raylet.out, worker-…).")
@click.option("--request-id", metavar="ID", help="A Serve request's lines (X-Request-ID): its proxy's and replicas'.")
@click.option("--app", metavar="NAME", help="A Serve application's lines.")
@click.option("--deployment", metavar="NAME", help="A Serve deployment's lines.")
@click.option("--replica", metavar="ID", help="A Serve replica's lines (its ID, as `serve status` shows it).")
@click.option("--stream", type=click.Choice(STREAMS), help="One stream.")
@click.option("--level", metavar="LEVEL", help="Lines of this level (INFO, WARNING, ERROR, …) where they say it.")
@click.option("--grep", metavar="TEXT", help="Lines that contain TEXT.")
@click.option("--regex", metavar="RE", help="Lines that match the regular expression RE.")
@click.option("--since", metavar="WHEN", help="From WHEN: a time ago (10m, 2h) or an ISO 8601 time.")
@click.option("--until", metavar="WHEN", help="Before WHEN (as --since).")
@click.option("--tail", type=int, metavar="N", help="Only the last N lines.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing lines as they come (Ctrl-C stops), as tail -f.")
@click.option(
    "--context",
    "-C",
    type=click.IntRange(0, 100),
    default=0,
    metavar="N",
    help="N lines of the same file before and after each line found, as grep -C (groups apart are split by --).",
)
@click.option("--markers", is_flag=True, help="Also Ray's in-band lines (:task_name:, :actor_name:, :job_id:).")
@click.option(
    "--include-own",
    is_flag=True,
    help="Also the lines Ray's dashboard logs of raysight's own requests (its poller's: User-Agent raysight/…).",
)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", help="json: one object a line.")
@session_option
@server_option
def logs_cmd(
    task: str | None,
    attempt: int | None,
    actor: str | None,
    job: str | None,
    node: str | None,
    worker: str | None,
    pid: int | None,
    file_name: str | None,
    request_id: str | None,
    app: str | None,
    deployment: str | None,
    replica: str | None,
    stream: str | None,
    level: str | None,
    grep: str | None,
    regex: str | None,
    since: str | None,
    until: str | None,
    tail: int | None,
    follow: bool,
    context: int,
    markers: bool,
    include_own: bool,
    fmt: str,
    session: str | None,
    server: str | None,
) -> None:
    """Print the log lines of Ray's workers, drivers and components, live or long after the cluster ended."""
    if tail is not None and tail < 0:
        raise click.BadParameter("--tail must not be negative")
    query: dict[str, Any] = {
        "session": session,
        "task": task,
        "attempt": attempt,
        "actor": actor,
        "job": job,
        "node": node,
        "worker": worker,
        "pid": pid,
        "file": file_name,
        "request_id": request_id,
        "app": app,
        "deployment": deployment,
        "replica": replica,
        "stream": stream,
        "level": level,
        "grep": grep,
        "regex": regex,
        **time_window(since, until),
        "markers": markers or None,
        "include_own": include_own or None,
        "context": context or None,
    }
    # each line names its task attempt, unless they are one task's
    printer = _Printer(fmt, fmt == "text" and sys.stdout.isatty(), separate=context > 0, task=task is None)
    with make_client(server) as client:
        if tail is not None or follow:
            data = client.logs(**query, limit=10 if tail is None else tail, newest=True, count=False)
        else:
            data = client.logs(**query, limit=PAGE, count=False)
        query["session"] = data["session"]  # the one resolved: a later session must not take over while following
        if dropped := data.get("dropped"):
            when = datetime.fromtimestamp(dropped["through_ms"] / 1000).isoformat(sep=" ", timespec="seconds")
            click.secho(
                f"[{dropped['lines']:,} earlier lines of this session were {dropped['why']}; the last "
                f"of them was read at {when}]",
                err=True,
                fg="yellow",
            )
        found = printer.print(data["rows"])
        last = data["last_seq"]
        more = tail is None and not follow and found == PAGE
        while more or follow:
            data = client.logs(**query, after=last, limit=PAGE, count=False)
            found = printer.print(data["rows"])
            last = data["last_seq"]
            more = found == PAGE
            if follow and not more:
                time.sleep(FOLLOW_POLL_S)
        if task is not None:  # the lines lead to the task's trace (on stderr: the lines stay as they were)
            for trace in client.traces(session=query["session"], task=task, limit=5)["traces"]:
                hint = f"[trace of this task: raysight traces show {trace['trace_id']}  ({trace['root']})]"
                click.echo(hint, err=True)
