"""`raysight list|get|summary|sessions|doctor|reindex`: thin commands over :class:`raysight.Client`."""

from __future__ import annotations

from typing import Any

import click

from raysight.cli import render
from raysight.cli.common import client_options, make_client, server_option, session_option
from raysight.client import RESOURCES

LISTABLE = click.Choice(sorted(r.replace("_", "-") for r in RESOURCES), case_sensitive=False)  # as Ray names them


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
    _session_heading(data["session"], session)
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
    """Every field of one task (each attempt), actor, node, job or worker, as `ray get` does (YAML unless --format)."""
    with make_client(server) as client:
        data = client.get(resource.lower(), entity_id, session=session)
    rows = data["rows"]
    if fmt != "table":  # YAML unless asked, as `ray get` prints
        render.dump(rows[0] if len(rows) == 1 else rows, fmt or "yaml")
        return
    _session_heading(data["session"], session)
    for row in rows:
        if len(rows) > 1:
            render.heading("\n" + _which(row, data["session"]))
        render.table([{"field": name, "value": render.cell(name, value)} for name, value in row.items()])


def _session_heading(resolved: str | None, asked: str | None) -> None:
    render.heading(f"Session: {resolved or ('all' if asked == '*' else '(none yet)')}")


def _which(row: dict[str, Any], session: str | None) -> str:
    """What tells a row of `get` from the others: its attempt, and its session when every session is shown."""
    parts = [] if session else [row["session"]]
    if "attempt_number" in row:
        parts.append(f"attempt {row['attempt_number']}")
    return ", ".join(parts)


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
    _session_heading(data["session"], session)
    rows = render.summary_rows(data["summary"])
    if not rows:
        click.echo("No resource in the session.")
        return
    render.table(rows, title=f"{resource.capitalize()} by {'function' if resource == 'tasks' else 'class'}")
    if data.get("slowest"):
        click.echo()
        render.table(data["slowest"], title="Slowest attempts")


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
@server_option
def sessions_delete(name: str, yes: bool, server: str | None) -> None:
    """Delete one session (by name or label) and everything recorded of it."""
    if not yes:
        click.confirm(f"Delete session {name} and all it recorded?", abort=True)
    with make_client(server) as client:
        click.echo(f"Deleted {client.delete_session(name)}.")


DOCTOR_TABLES = {  # the doctor's sections in table format: report key -> title
    "ingest_lag": "Ingest lag (from event time to arrival, over recent ingest)",
    "inferred": "States raysight inferred (Ray never sent them)",
    "quarantine": "Quarantined events (malformed; kept with their reason)",
    "unsupported": "Event types raysight does not read yet (stored, counted)",
    "polls": "What Ray never sends as events, polled from each live cluster's dashboard: the last poll that worked and "
    "the last error, per resource",
    "scrapes": "Metrics scraped from each Prometheus target of a session: scrapes, the last, its samples",
    "metrics_refused": "Metric series refused past the server's series limit a session (--metrics-max-series), and "
    "their samples dropped since",
    "metrics_dropped": "Metric samples the server's metrics retention dropped",
    "log_gaps": "Log bytes no agent could read (a file gone before its end was read)",
    "log_dropped": "Log lines the server's log retention dropped",
}


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
    _section("Events", [report["counters"]] if report["counters"] else [])
    backlog = report["ingest_backlog"]
    click.echo(f"Acknowledged, not yet folded: {backlog['batches']:,} batches ({backlog['bytes']:,} bytes)")
    if "folding" in report:  # an older server does not report it
        for line in folding_lines(report["folding"]):
            click.echo(line)
    if forward := report.get("traces_forward"):
        click.echo(
            f"Spans forwarded to {forward['url']}: {forward['forwarded']:,} exports sent, {forward['queued']:,} "
            f"queued, {forward['refused']:,} refused, {forward['dropped']:,} dropped"
            + (f" (last error: {forward['last_error']})" if forward["last_error"] else "")
        )
    for warning in report.get("drivers_without_task_events", []):
        click.secho(f"Warning ({warning['session']}): {warning['message']}", fg="yellow")
    for key, title in DOCTOR_TABLES.items():
        click.echo()
        _section(title, report.get(key, []))  # (an older server reports fewer)
    render.heading("\nWhat Ray's aggregators reported (scraped by `raysight run` while its driver ran)")
    for line in ray_reported_lines(report["ray_reported"]) or ["Nothing scraped yet."]:
        click.echo(line)


def _section(title: str, rows: list[dict[str, Any]]) -> None:
    if rows:
        render.table(rows, title=title)
    else:
        render.heading(f"{title}: none")


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
@server_option
def reindex_cmd(server: str | None) -> None:
    """Rebuild every entity table from the raw events kept in the store."""
    with make_client(server) as client:
        click.echo(f"Refolded {client.reindex()} events.")
