"""`raysight errors`: a session's failures grouped by cause, each root with what followed from it."""

from __future__ import annotations

from typing import Any

import click

from raysight.cli import render
from raysight.cli.common import client_options, make_client, session_option, time_window
from raysight.cli.logs import prefix

ERRORS_COLUMNS = [
    "group_id",
    "count",
    "kind",
    "error_type",
    "error",
    "example",
    "affected",
    "consequences",
    "first_ms",
    "last_ms",
]


@click.group("errors", invoke_without_command=True)
@click.option("--job", metavar="ID", help="Only the failures of this job.")
@click.option("--since", metavar="WHEN", help="Only failures from WHEN on: a time ago (30s, 10m, 2h, 1d) or ISO 8601.")
@click.option("--until", metavar="WHEN", help="Only failures before WHEN (as --since).")
@click.option("--type", "error_type", metavar="TYPE", help="Only this error type (Ray's: WORKER_DIED, ACTOR_DIED, …).")
@session_option
@client_options
@click.pass_context
def errors_cmd(
    ctx: click.Context,
    job: str | None,
    since: str | None,
    until: str | None,
    error_type: str | None,
    session: str | None,
    fmt: str | None,
    server: str | None,
) -> None:
    """What went wrong in a session: failed task attempts, actors that crashed or were killed, workers and nodes that
    died, failed drivers — grouped by cause, each root cause once with its latest failure's own message and what
    followed from it counted under it. `raysight errors show ID` gives one whole."""
    if ctx.invoked_subcommand:
        return
    with make_client(server) as client:
        data = client.errors(
            session=session,
            job=job,
            **time_window(since, until),
            type=error_type,
        )
    if fmt in ("json", "yaml"):
        render.dump(data, fmt)
        return
    click.echo(f"Session: {data['session'] or 'none recorded yet'}")
    groups = data["groups"]
    if not groups:
        click.echo("No failures.")
        return
    render.table([errors_row(g) for g in groups], columns=ERRORS_COLUMNS)
    click.echo(
        f"\n{sum(g['count'] for g in groups)} root failures in {len(groups)} groups; `--format yaml` shows a "
        "traceback of each"
    )


def errors_row(group: dict[str, Any]) -> dict[str, Any]:
    """A group as a table row: its latest failure's own cause (the pattern's values filled in; a Serve replica's
    with what replaced it), what it affected and its consequences, each in one cell."""
    consequences = ", ".join(f"{n} {kind}" for kind, n in group["consequences"].items())
    example = group["example"] or {}
    shown = example.get("error")
    if replaced := _replaced(example):
        shown = f"{shown} ({replaced})"
    return {**group, "example": shown, "affected": ", ".join(group["affected"]), "consequences": consequences}


def _replaced(one: dict[str, Any]) -> str | None:
    """A crashed Serve replica's ID and what replaced it, in words; None for another failure."""
    if "replica_id" not in one:
        return None
    replacement = one["replacement"]
    then = f"replaced by replica {replacement['replica_id']}" if replacement else "not replaced"
    return f"replica {one['replica_id']}, {then}"


@errors_cmd.command("show")
@click.argument("failure_id", metavar="ID")
@session_option
@client_options
def show_cmd(failure_id: str, session: str | None, fmt: str | None, server: str | None) -> None:
    """One failure whole — a task, actor, worker, node or job ID: what failed and where, why (the full traceback),
    what it followed from, its attempts, the log lines before it and what failed beside it — or a group's failures
    (its ID, from `raysight errors`). Ray's colours are shown on a terminal only."""
    with make_client(server) as client:  # colours for the text (click.echo leaves them out in a pipe)
        data = client.error(failure_id, session=session, colours=fmt not in ("json", "yaml"))
    if fmt in ("json", "yaml"):
        render.dump(data, fmt)
        return
    if not data["failures"]:
        click.echo(f"{failure_id} did not fail in {data['session']}.")
        return
    if "group_id" in data:
        render.table(
            data["failures"],
            title=f"Failures of group {data['group_id']} in {data['session']}",
            columns=["kind", "id", "attempt", "name", "time_ms", "error"],
        )
        return
    if "attempts" in data:
        render.table(data["attempts"], title=f"Attempts of task {failure_id}")
    for one in data["failures"]:
        _show(one)


def _show(one: dict[str, Any]) -> None:
    attempt = "" if one["attempt"] is None else f" (attempt {one['attempt']})"
    click.echo()
    render.heading(f"{one['kind'].capitalize()} {one['name']}{attempt}: {one['error_type']}  [group {one['group_id']}]")
    where = {
        "time": render.cell("time_ms", one["time_ms"]),
        "job": one["job_id"],
        "node": one["node_id"],
        "worker": one["worker_id"],
        "id": one["id"],
    }
    click.echo("  " + "  ".join(f"{k} {v}" for k, v in where.items() if v))
    if replaced := _replaced(one):
        replacement = one["replacement"]
        actor = f" (actor {replacement['actor_id']}: `raysight get actors ID`)" if replacement else ""
        click.echo(f"  Serve {replaced}{actor}")
        if one["failed_requests"]:
            failed = ", ".join(one["failed_requests"])
            click.echo(f"  Requests that failed with it: {failed} (`raysight serve request ID`)")
    if one["root_kind"]:
        click.secho(
            f"  Followed from the failure of {one['root_kind']} {one['root_id']}: `raysight errors show "
            f"{one['root_id']}`",
            fg="yellow",
        )
    render.heading("Why")
    for line in (one["message"] or one["error"] or "(Ray gave no message)").splitlines():
        click.echo(f"  {line}")
    for key, title in (
        ("own", "What it printed"),
        ("worker", "Its worker's last lines before it failed"),
        ("system", "What Ray's components said of it"),
    ):
        if lines := one["logs"].get(key):
            render.heading(title)
            for row in lines:
                click.echo(f"  {prefix(row, task=False)} {row['text']}")
    if one["beside"]:
        render.table(
            one["beside"],
            title="What failed beside it (same node or worker, within 5 s)",
            columns=["kind", "id", "name", "time_ms", "error_type", "error"],
        )
