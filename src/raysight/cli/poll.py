"""`raysight poll`: the poller of what Ray never sends as events, for a cluster `raysight run` did not start."""

from __future__ import annotations

import os
import time

import click
import httpx

from raysight.agent.state_poll import POLL_EVERY_S, dashboard_client, poll_dashboard
from raysight.cli.common import make_client, server_option
from raysight.cli.run import key_option
from raysight.client import Client
from raysight.errors import RaysightError


@click.command("poll")
@click.option("--dashboard", required=True, metavar="URL", help="The cluster's dashboard: http://HEAD:8265.")
@click.option(
    "--every",
    type=click.FloatRange(min=1),
    default=POLL_EVERY_S,
    show_default=True,
    metavar="SECONDS",
    help="Seconds between polls.",
)
@click.option("--once", is_flag=True, help="Poll once and say what was found, then exit.")
@server_option
@key_option
def poll_cmd(dashboard: str, every: float, once: bool, server: str | None, ingest_key: str | None) -> None:
    """Record what a `ray start` cluster never sends as events — placement groups, objects, runtime envs, cluster
    events, submitted jobs, its usage and pending demand — by polling its dashboard every few seconds, one request per
    resource, until stopped (Ctrl-C). `raysight run` does this by itself for the cluster its driver starts. The
    cluster's token, when it uses token auth, is read as Ray's own processes read it (RAY_AUTH_TOKEN, or
    ~/.ray/auth_token), and read again whenever the dashboard refuses it."""
    dashboard = dashboard.rstrip("/")
    with make_client(server) as client, dashboard_client(os.environ, trust_env=True) as http:
        try:
            count = 0
            while not _poll_once(client, ingest_key, dashboard, http, once, count):
                time.sleep(every)
                count += 1
        except KeyboardInterrupt:
            return


def _poll_once(client: Client, key: str | None, dashboard: str, http: httpx.Client, once: bool, count: int) -> bool:
    """Poll number ``count``; whether to stop (``once``: after saying what was found, or failing with why)."""
    try:
        polled = poll_dashboard(client, key, dashboard, http, count)
    except (httpx.HTTPError, ValueError, RaysightError) as exc:
        if once:
            raise click.ClickException(f"could not poll {dashboard}: {exc}") from None
        click.echo(f"raysight poll: {exc} (trying again)", err=True)
        return False
    if once:
        found = ", ".join(f"{len(rows)} {name}" for name, rows in polled["resources"].items())
        click.echo(f"Polled {polled['session']}: {found}")
        for name, error in polled["errors"].items():
            click.echo(f"  could not poll {name}: {error}", err=True)
    return once
