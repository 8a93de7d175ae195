"""`raysight timeline`: a session's task attempts as Chrome trace JSON, as `ray timeline` writes it."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from raysight.cli.common import make_client, server_option, session_option


@click.command("timeline")
@click.option("--job", metavar="ID", help="Only this job's task attempts.")
@click.option(
    "-o",
    "--output",
    metavar="FILE",
    default="raysight-timeline.json",
    show_default=True,
    help="Where to write the trace; '-' for standard output.",
)
@session_option
@server_option
def timeline_cmd(job: str | None, output: str, session: str | None, server: str | None) -> None:
    """Write a session's task attempts as Chrome trace JSON (`ray timeline`'s format: a lane per worker, a process
    per node), from a live session or one long gone. Open it in https://ui.perfetto.dev or chrome://tracing."""
    with make_client(server) as client:
        trace = client.timeline(session=session, job=job)
    if output == "-":
        sys.stdout.buffer.write(trace)
        return
    Path(output).write_bytes(trace)
    click.echo(f"Trace written to {output}: open it in https://ui.perfetto.dev or chrome://tracing", err=True)
