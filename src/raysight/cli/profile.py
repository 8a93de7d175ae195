"""`raysight profile`: where a task's time went, from the samples raysight took of it while it ran (continuous,
in-process: ``instrument/task_profile.py``), live or long after its cluster is gone; and how stacks are shown, for
these and for the on-demand profiles (``cli/captures.py``)."""

from __future__ import annotations

from pathlib import Path

import click
import orjson

from raysight import flame
from raysight.cli import render
from raysight.cli.common import make_client, server_option, session_option

FORMATS = ("table", "collapsed", "speedscope", "svg", "json")
SUFFIXES = {".svg": "svg", ".json": "speedscope", ".txt": "collapsed", ".folded": "collapsed"}


@click.group("profile", invoke_without_command=True)
@click.option("--task", metavar="ID", help="A task's profile (its attempts merged, unless --attempt).")
@click.option("--attempt", type=click.IntRange(0), help="Only this attempt of the task (0 is the first).")
@click.option("--function", metavar="NAME", help="Every attempt of a function: f, Class.method or module.f.")
@click.option("--actor", metavar="ID", help="Every task an actor ran.")
@click.option("--job", metavar="ID", help="Every task of a job.")
@click.option("--cpu-only", is_flag=True, help="Only the samples taken while the task ran on CPU.")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Write it to this file, in the format its name says: .svg a flame graph, .json speedscope's, else "
    "collapsed stacks.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    help="table: the hottest functions [default on a terminal]; collapsed: flamegraph.pl's folded stacks; "
    "speedscope: its JSON (speedscope.app); svg: a flame graph; json: the answer as the API gives it.",
)
@click.option("--limit", type=click.IntRange(1), default=20, show_default=True, help="Functions in the table.")
@session_option
@server_option
@click.pass_context
def profile_cmd(
    ctx: click.Context,
    task: str | None,
    attempt: int | None,
    function: str | None,
    actor: str | None,
    job: str | None,
    cpu_only: bool,
    output: Path | None,
    fmt: str | None,
    limit: int,
    session: str | None,
    server: str | None,
) -> None:
    """Where a task's time went: the Python stacks raysight sampled of it while it ran (20 times a second in every
    worker of a job it records), each marked on CPU or not (sleeping, waiting on I/O, on ray.get), kept after the
    cluster is gone. Name one task (--task), or merge every attempt of a function, an actor or a job. `stack`, `cpu`
    and `memory` profile a live process on demand instead (py-spy, memray), through its node's agent."""
    if ctx.invoked_subcommand:
        return
    if sum(v is not None for v in (task, function, actor, job)) != 1:
        raise click.UsageError("name one of --task, --function, --actor or --job")
    if attempt is not None and task is None:
        raise click.UsageError("--attempt is a task's: name it with --task")
    with make_client(server) as client:
        data = client.profile(
            session=session,
            task=task,
            attempt=attempt,
            function=function,
            actor=actor,
            job=job,
            cpu_only=True if cpu_only else None,
        )
    named = next(value for value in (task, function, actor, job) if value is not None)
    if cpu_only and data["samples"] and not data["on_cpu"]:
        raise click.ClickException(f"none of the {data['samples']:,} samples of {named} was taken on CPU")
    if not data["samples"]:
        raise click.ClickException(
            f"no samples of {named} in {data['session']}: raysight samples the tasks of a job it records (`raysight "
            "run`, or a cluster `raysight start` or `raysight env` set up) unless told --no-profiling, 20 times a "
            "second: a task of a few milliseconds may have none"
        )
    kind = fmt or (SUFFIXES.get(output.suffix.lower(), "collapsed") if output else "table")
    title = flame.titled(named, data, cpu_only)
    if kind == "json":
        emit(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n", output, title, kind)
        return
    each = data["wall_s"] / data["samples"] if data["samples"] else None
    unit = "samples on CPU" if cpu_only else "samples"
    show(flame.weighed(data, cpu_only), kind, title, output, limit, unit, each, f"Session: {data['session']}")


def show(
    stacks: flame.Stacks,
    kind: str,
    title: str,
    output: Path | None,
    limit: int,
    unit: str = "samples",
    seconds_each: float | None = None,
    header: str = "",
    lines: bool = False,
) -> None:
    """Stacks as ``kind`` (table, collapsed, speedscope, svg) to ``output``, else to stdout: the table of the hottest
    functions (each line apart where ``lines``) on the terminal alone."""
    if kind == "table":
        if output is not None:
            raise click.UsageError("the table is for the terminal: write collapsed, speedscope or svg to a file")
        click.echo(f"{header}\n{title}" if header else title)
        weight = sum(w for _, w in stacks) or 1
        rows = [
            {
                "own": f"{100 * r['own'] / weight:.1f}%",
                "total": f"{100 * r['total'] / weight:.1f}%",
                ("line" if lines else "function"): r["function"],
            }
            for r in flame.top(stacks, lines)[:limit]
        ]
        render.table(rows, columns=["own", "total", "line" if lines else "function"])
        return
    if kind == "svg":
        text = flame.flame_svg(stacks, title, unit)
    elif kind == "speedscope":
        text = orjson.dumps(flame.speedscope(stacks, title, seconds_each)).decode() + "\n"
    else:
        text = flame.collapsed(stacks)
    emit(text, output, title, kind)


def emit(text: str, output: Path | None, title: str, kind: str) -> None:
    """``text`` to ``output`` (saying so on stderr), else to stdout."""
    if output is None:
        click.echo(text, nl=False)
        return
    output.write_text(text)
    click.echo(f"{title} -> {output} ({kind})", err=True)
