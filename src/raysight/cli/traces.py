"""`raysight traces`: the traces of a session's tasks and actors, and one trace as a tree with its critical path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from raysight import units
from raysight.cli import render
from raysight.cli.common import (
    Checked,
    client_options,
    make_client,
    server_option,
    session_option,
    time_window,
)
from raysight.cli.run import key_option
from raysight.signals.spans import sdk_json

TRACES_COLUMNS = ["trace_id", "root", "start_ms", "duration", "spans", "errors", "jobs"]


def duration(ns: int) -> str:
    """A span's length as people read it: 850µs, 12.3ms, 4.20s, 3m05s."""
    if ns < 1_000_000:
        return f"{ns / 1000:.0f}µs"
    if ns < 1_000_000_000:
        return f"{ns / 1e6:.1f}ms"
    if ns < 60_000_000_000:
        return f"{ns / 1e9:.2f}s"
    return f"{int(ns // 60e9)}m{int(ns % 60e9 // 1e9):02d}s"


@click.group("traces", invoke_without_command=True)
@click.option("--job", metavar="ID", help="Only traces through this job.")
@click.option("--task", metavar="ID", help="Only the trace(s) of this task (any of its attempts).")
@click.option("--actor", metavar="ID", help="Only traces through this actor.")
@click.option("--request-id", metavar="ID", help="Only the trace of this Serve request.")
@click.option("--name", metavar="NAME", help="Only traces with a span of this name (a task's: f, Actor.method).")
@click.option(
    "--min-duration", type=Checked(units.duration_ns, "TIME"), help="Only traces this long or longer: 250ms, 1.5s, 2m."
)
@click.option("--errors", is_flag=True, help="Only traces with a failed span.")
@click.option("--since", metavar="WHEN", help="Only traces from WHEN on: a time ago (30s, 10m, 2h, 1d) or ISO 8601.")
@click.option("--until", metavar="WHEN", help="Only traces before WHEN (as --since).")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True, help="At most this many.")
@session_option
@client_options
@click.pass_context
def traces_cmd(
    ctx: click.Context,
    job: str | None,
    task: str | None,
    actor: str | None,
    request_id: str | None,
    name: str | None,
    min_duration: str | None,
    errors: bool,
    since: str | None,
    until: str | None,
    limit: int,
    session: str | None,
    fmt: str | None,
    server: str | None,
) -> None:
    """A session's traces, newest first: each with its root span, start, duration, spans and failures.
    `raysight traces show TRACE_ID` draws one as a tree."""
    if ctx.invoked_subcommand:
        return
    with make_client(server) as client:
        data = client.traces(
            session=session,
            job=job,
            task=task,
            actor=actor,
            request=request_id,
            name=name,
            min_duration=None if min_duration is None else units.duration_ns(min_duration),
            error=True if errors else None,
            **time_window(since, until),
            limit=limit,
        )
    if fmt in ("json", "yaml"):
        render.dump(data, fmt)
        return
    click.echo(f"Session: {data['session'] or 'none recorded yet'}")
    if not data["traces"]:
        click.echo("No traces.")
        return
    rows = [
        {
            **t,
            "start_ms": t["start_ns"] // 1_000_000,
            "duration": duration(t["duration_ns"]),
            "jobs": ", ".join(t["jobs"]),
        }
        for t in data["traces"]
    ]
    render.table(rows, columns=TRACES_COLUMNS)


@traces_cmd.command("show")
@click.argument("trace_id")
@client_options
def show_cmd(trace_id: str, fmt: str | None, server: str | None) -> None:
    """One trace as an indented tree: each span's offset from the trace's start, its duration, and where it ran;
    the critical path (what the trace's end waited on) marked `*`. `--format json` gives each span whole."""
    with make_client(server) as client:
        data = client.trace(trace_id)
    if fmt in ("json", "yaml"):
        render.dump(data, fmt)
        return
    click.echo(f"Trace {data['trace_id']}  {duration(data['duration_ns'])}, {len(data['spans'])} spans")
    for span in data["spans"]:
        click.echo(tree_line(span, data["start_ns"]))
    if task := next((s for s in data["spans"] if s["task_id"]), None):
        click.echo(
            f"\nWhat a span's task printed: raysight logs --task {task['task_id']} --attempt {task['attempt'] or 0}"
        )


@traces_cmd.command("import")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--session", metavar="NAME", help="The session the spans belong to [default: the newest recorded].")
@key_option
@server_option
def import_cmd(paths: tuple[Path, ...], session: str | None, ingest_key: str | None, server: str | None) -> None:
    """Import spans the OpenTelemetry SDK wrote as JSON lines: what Ray's own tracing hook
    (`ray.util.tracing.setup_local_tmp_tracing`) leaves in /tmp/spans. PATHS are files, or directories whose *.txt
    and *.json files are read."""
    files = [f for p in paths for f in (sorted(p.glob("*.txt")) + sorted(p.glob("*.json")) if p.is_dir() else [p])]
    stored = refused = 0
    with make_client(server) as client:
        if session is None:
            recorded = client.sessions()
            session = recorded[0]["session"] if recorded else None
        for path in files:
            with path.open("rb") as lines:
                for body, spans, bad in sdk_json.exports(lines, session):
                    rejected = client.export_spans(body, ingest_key) if spans else 0
                    stored, refused = stored + spans - rejected, refused + bad + rejected
    click.echo(
        f"Imported {stored:,} spans from {len(files)} files into {session or 'no session'}"
        + (f"; {refused:,} lines were not spans" if refused else "")
    )


def tree_line(span: dict[str, Any], start_ns: int) -> str:
    """``* +12.3ms   4.1ms  ··leaf  task 1a2b…  pid 123`` (``!`` and the message for a failed span)."""
    mark = "*" if span["critical"] else " "
    where = "  ".join(
        f"{label} {value}"
        for label, value in (
            ("task", span["task_id"] and span["task_id"][:16]),
            ("attempt", span["attempt"] or None),
            ("actor", span["actor_id"] and span["actor_id"][:12]),
            ("pid", span["pid"]),
        )
        if value
    )
    failed = f"  ! {span['status_message'] or 'error'}" if span["status"] == "error" else ""
    offset = duration(span["start_ns"] - start_ns)
    return (
        f"{mark} +{offset:>8} {duration(span['end_ns'] - span['start_ns']):>8}  {'  ' * span['depth']}{span['name']}"
        + (f"  [{where}]" if where else "")
        + failed
    )
