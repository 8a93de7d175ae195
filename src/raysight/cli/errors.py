"""`raysight errors`: a session's failures grouped by cause, each root with what followed from it."""

from __future__ import annotations

import time
from typing import Any

import click

from raysight.cli import render
from raysight.cli.common import client_options, make_client, session_option
from raysight.cli.logs import parse_time

COLUMNS = ["group_id", "count", "kind", "error_type", "error", "affected", "consequences", "first_ms", "last_ms"]


@click.command("errors")
@click.option("--job", metavar="ID", help="Only the failures of this job.")
@click.option("--since", metavar="WHEN", help="Only failures from WHEN on: a time ago (30s, 10m, 2h, 1d) or ISO 8601.")
@click.option("--until", metavar="WHEN", help="Only failures before WHEN (as --since).")
@click.option("--type", "error_type", metavar="TYPE", help="Only this error type (Ray's: WORKER_DIED, ACTOR_DIED, …).")
@session_option
@client_options
def errors_cmd(
    job: str | None,
    since: str | None,
    until: str | None,
    error_type: str | None,
    session: str | None,
    fmt: str | None,
    server: str | None,
) -> None:
    """What went wrong in a session: failed task attempts, actors that crashed or were killed, workers and nodes that
    died, failed drivers — grouped by cause, each root cause once with what followed from it counted under it."""
    now = time.time_ns()
    with make_client(server) as client:
        data = client.errors(
            session=session,
            job=job,
            since=None if since is None else parse_time(since, now),
            until=None if until is None else parse_time(until, now),
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
    render.table([_row(g) for g in groups], columns=COLUMNS)
    click.echo(
        f"\n{sum(g['count'] for g in groups)} root failures in {len(groups)} groups; `--format yaml` shows a "
        "traceback of each"
    )


def _row(group: dict[str, Any]) -> dict[str, Any]:
    consequences = ", ".join(f"{n} {kind}" for kind, n in group["consequences"].items())
    return {**group, "affected": ", ".join(group["affected"]), "consequences": consequences}
