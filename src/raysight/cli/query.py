"""`raysight list|get|summary|sessions|doctor|reindex`: thin commands over :class:`raysight.Client`."""

from __future__ import annotations

from typing import Any

import click

from raysight.cli import render
from raysight.cli.common import client_options, make_client, session_option
from raysight.client import RESOURCES

LISTABLE = click.Choice(sorted(RESOURCES), case_sensitive=False)


@click.command("list")
@click.argument("resource", type=LISTABLE)
@click.option(
    "--filter",
    "-f",
    "filters",
    multiple=True,
    metavar="KEY<OP>VALUE",
    help="Keep rows where KEY=, !=, <, >, <= or >= VALUE; times take ISO-8601, epoch ms or -5m. Repeatable.",
)
@click.option("--sort", "-s", multiple=True, metavar="FIELD", help="Sort by FIELD (-FIELD descending). Repeatable.")
@click.option("--limit", default=100, show_default=True, help="Rows to show.")
@click.option("--offset", default=0, show_default=True, help="Rows to skip (paging).")
@click.option("--detail", is_flag=True, help="Every field, not only Ray's base columns.")
@session_option
@client_options
def list_cmd(
    resource: str,
    filters: tuple[str, ...],
    sort: tuple[str, ...],
    limit: int,
    offset: int,
    detail: bool,
    session: str | None,
    fmt: str | None,
    server: str | None,
) -> None:
    """List tasks, actors, nodes, jobs or workers, as `ray list` does (live or long after the cluster)."""
    with make_client(server) as client:
        data = client.list(
            resource.lower(),
            filters=list(filters),
            sort=list(sort),
            limit=limit,
            offset=offset,
            detail=detail,
            session=session,
        )
    fmt = fmt or ("yaml" if detail else "table")
    if fmt != "table":
        render.dump(data["rows"], fmt)
        return
    rows = data["rows"]
    render.heading(f"Session: {data['session'] or '(none yet)'}")
    if not rows:
        click.echo("No resource in the session." if data["total"] == 0 else f"No rows past offset {offset}.")
        return
    render.table(rows)
    shown = f"{offset + 1}-{offset + len(rows)}" if rows else "0"
    click.echo(f"\nTotal: {data['total']} (showing {shown})")


@click.command("get")
@click.argument("resource", type=LISTABLE)
@click.argument("entity_id")
@session_option
@client_options
def get_cmd(resource: str, entity_id: str, session: str | None, fmt: str | None, server: str | None) -> None:
    """Every field of one task (each attempt), actor, node, job or worker, as `ray get` does."""
    with make_client(server) as client:
        data = client.get(resource.lower(), entity_id, session=session)
    rows = data["rows"]
    render.dump(rows[0] if len(rows) == 1 else rows, fmt if fmt in ("json", "yaml") else "yaml")


@click.command("summary")
@click.argument("resource", type=click.Choice(["tasks", "actors"]))
@session_option
@client_options
def summary_cmd(resource: str, session: str | None, fmt: str | None, server: str | None) -> None:
    """Tasks by function (states, duration p50/p95/max, slowest attempts) or actors by class."""
    with make_client(server) as client:
        data = client.summary(resource, session=session)
    if fmt in ("json", "yaml"):
        render.dump(data, fmt)
        return
    render.heading(f"Session: {data['session'] or '(none yet)'}")
    rows: list[dict[str, Any]] = [{**g, "state_counts": _counts(g["state_counts"])} for g in data["summary"]]
    if not rows:
        click.echo("No resource in the session.")
        return
    render.table(rows, title=f"{resource.capitalize()} by {'function' if resource == 'tasks' else 'class'}")
    if data.get("slowest"):
        click.echo()
        render.table(data["slowest"], title="Slowest attempts")


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{state}: {n}" for state, n in counts.items())


@click.group("sessions", invoke_without_command=True)
@client_options
@click.pass_context
def sessions_cmd(ctx: click.Context, fmt: str | None, server: str | None) -> None:
    """Every Ray session raysight has seen, newest first."""
    if ctx.invoked_subcommand:
        return
    with make_client(server) as client:
        rows = client.sessions()
    if fmt in ("json", "yaml"):
        render.dump(rows, fmt)
    elif not rows:
        click.echo("No session yet: point a Ray cluster at this server (`raysight env`, `raysight run`).")
    else:
        render.table(
            rows,
            columns=[
                "session",
                "label",
                "start_time_ms",
                "end_time_ms",
                "nodes",
                "jobs",
                "tasks",
                "failures",
                "events",
                "raw_bytes",
            ],
        )


@sessions_cmd.command("delete")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@client_options
def sessions_delete(name: str, yes: bool, fmt: str | None, server: str | None) -> None:
    """Delete one session (by name or label) and everything recorded of it."""
    if not yes:
        click.confirm(f"Delete session {name} and all it recorded?", abort=True)
    with make_client(server) as client:
        click.echo(f"Deleted {client.delete_session(name)}.")


@click.command("doctor")
@client_options
def doctor_cmd(fmt: str | None, server: str | None) -> None:
    """What raysight knows it is missing (ingest lag, quarantined and unfolded events, inferred states), and what
    Ray's aggregators reported dropping or failing to send."""
    with make_client(server) as client:
        report = client.doctor()
    if fmt in ("json", "yaml"):
        render.dump(report, fmt)
        return
    reported, folding = report.pop("ray_reported"), report.pop("folding", None)  # None from an older server
    render.dump(report, "yaml")
    if folding is not None:
        render.heading("\nFolding acknowledged batches into the store")
        for line in folding_lines(folding):
            click.echo(line)
    render.heading("\nWhat Ray's aggregators reported (scraped by `raysight run` while its driver ran)")
    for line in ray_reported_lines(reported) or ["Nothing scraped yet."]:
        click.echo(line)


def folding_lines(folding: dict[str, Any]) -> list[str]:
    """The doctor's ``folding`` in words: whether acknowledged batches wait (and on what), and what the journal's
    recovery skipped."""
    lines = []
    if folding["state"] == "retrying":
        lines.append(
            f"Folding waits on {folding['error']} ({folding['tries']:,} tries so far); the batches stay in the "
            "journal and fold by themselves once it passes (free disk space, or memory)"
        )
    damage = folding["journal_damage"]
    if damage["corrupt"]:
        lines.append(
            f"The journal held {damage['corrupt']:,} corrupt stretch(es), {damage['corrupt_bytes']:,} bytes: skipped "
            f"(the records after them were folded) and kept in {damage['kept_in']}"
        )
    return lines or ["Folding keeps up; the journal is intact"]


def ray_reported_lines(sessions: list[dict[str, Any]]) -> list[str]:
    """The doctor's ``ray_reported`` in words: per session, its counts, then each kind of loss Ray reported."""
    lines = []
    for s in sessions:
        label = f" ({s['label']})" if s["label"] else ""
        lines.append(
            f"{s['session']}{label}, {s['agents']} node(s): received {s['received']:,}, "
            f"published {s['published']:,}, filtered out {s['filtered']:,}"
        )
        losses = []
        if s["dropped"]:
            counts = ", ".join(f"{n:,} {event_type}" for event_type, n in s["dropped"].items())
            losses.append(f"Ray reported dropping {counts} (buffer full)")
        if s["publish_failures"]:
            losses.append(f"Ray reported {s['publish_failures']:,} events it gave up publishing after retries")
        if s["buffer_add_failures"]:
            losses.append(f"Ray reported {s['buffer_add_failures']:,} events it could not add to its buffer")
        if s["consecutive_publish_failures"]:
            losses.append(f"Ray's last {s['consecutive_publish_failures']:,} publish attempts had failed when scraped")
        lines += [f"  {loss}" for loss in losses or ["Ray reported no drops"]]
    return lines


@click.command("reindex")
@client_options
def reindex_cmd(fmt: str | None, server: str | None) -> None:
    """Rebuild every entity table from the raw events kept in the store."""
    with make_client(server) as client:
        click.echo(f"Refolded {client.reindex()} events.")
