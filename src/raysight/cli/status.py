"""`raysight status`: what a cluster had and what waited for it, at any moment of a session, as `ray status` shows
it now."""

from __future__ import annotations

import time
from typing import Any

import click

from raysight.cli import render
from raysight.cli.common import client_options, make_client, parse_time, session_option

BYTES = ("memory", "object_store_memory")
RULE = "-" * 63


def format_ms(ms: int) -> str:
    return render.cell("time_ms", ms) + " UTC"


def _amount(name: str, value: float) -> str:
    if name not in BYTES:
        return f"{value:g}"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.2f}{unit}" if unit != "B" else f"{value:.0f}B"
        value /= 1024
    raise AssertionError("unreachable")


def status_lines(status: dict[str, Any]) -> list[str]:
    """`ray status`'s report of one moment (a sample of the session's cluster status), in its words."""
    when = format_ms(status["sampled_ms"]) if status["sampled_ms"] else "no sample"
    asked = f" (asked for {format_ms(status['at_ms'])})" if status["at_ms"] else ""
    lines = [f"======== Cluster status: {when}{asked} ========", f"Session: {status['session']}", "Node status", RULE]
    alive = [f" 1 node_{n['node_id']}" + (" (head)" if n["is_head_node"] else "") for n in status["alive_nodes"]]
    failed = [
        f" node_{n['node_id']}: {n['state_message'] or 'dead'} at {format_ms(n['end_time_ms'])}"
        for n in status["dead_nodes"]
    ]
    lines += ["Active:", *(alive or [" (no active nodes)"]), "Recent failures:", *(failed or [" (no failures)"])]
    if status["sampled_ms"] is None:
        return [*lines, "", "No sample of the cluster's resources: raysight's poller saw none before then."]
    lines += ["", "Resources", RULE, "Total Usage:"]
    lines += [
        f" {_amount(name, u['used'])}/{_amount(name, u['total'])} {name}"
        for name, u in status["usage"].items()
        if not name.startswith("node:")
    ]
    lines += ["", "Total Demands:"]
    demands = [f" {d['shape']}: {d['count']}+ pending tasks/actors" for d in status["demands"]]
    demands += [f" {d}: pending placement group" for d in status["placement_group_demands"]]
    demands += [f" {d}: from request_resources()" for d in status["requested"]]
    return lines + (demands or [" (no resource demands)"])


@click.command("status")
@click.option(
    "--at",
    metavar="WHEN",
    help="The moment to show: a time ago (30s, 10m, 2h, 1d) or ISO 8601. Default: the last sample.",
)
@session_option
@client_options
def status_cmd(at: str | None, session: str | None, fmt: str | None, server: str | None) -> None:
    """What the cluster had and what waited for it — nodes, resources used of total, pending demand by shape, nodes
    that had died — at any moment of a session, live or long ended, as `ray status` shows it now (from the samples
    raysight's poller took every 5 s while the cluster lived)."""
    with make_client(server) as client:
        status = client.status(session=session, at=None if at is None else parse_time(at, time.time_ns()))
    if fmt in ("json", "yaml"):
        render.dump(status, fmt)
        return
    for line in status_lines(status):
        click.echo(line)
