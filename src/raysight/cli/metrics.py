"""`raysight metrics`: the metrics raysight scraped from a session's Ray — their names, their labels, and PromQL
queries over them (through the server's Prometheus query API)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import click

from raysight.cli import render
from raysight.cli.common import client_options, make_client, parse_time, session_option


@click.group("metrics")
def metrics_cmd() -> None:
    """Ray's metrics as raysight scraped them (node stats, Ray's internals, an application's own, Serve's, each Ray
    process's own), for the live session or any ended one: `metrics names`, `metrics labels NAME`, `metrics query
    'EXPR'`, `metrics top`."""


@metrics_cmd.command("names")
@session_option
@client_options
def names_cmd(session: str | None, fmt: str | None, server: str | None) -> None:
    """The name of every metric the session's scrapes held."""
    with make_client(server) as client:
        names = client.prometheus("label/__name__/values", {}, session)
    if fmt in ("json", "yaml"):
        render.dump(names, fmt)
        return
    for name in names:
        click.echo(name)


@metrics_cmd.command("labels")
@click.argument("name")
@session_option
@client_options
def labels_cmd(name: str, session: str | None, fmt: str | None, server: str | None) -> None:
    """The labels of metric NAME's series, each with the values it takes."""
    with make_client(server) as client:
        series = client.prometheus("series", {"match[]": name}, session)
    if not series:
        raise click.ClickException(f"no series of {name!r}; `raysight metrics names` lists the metrics")
    labels: dict[str, set[str]] = {}
    for one in series:
        for label, value in one.items():
            if label != "__name__":
                labels.setdefault(label, set()).add(value)
    rows = [{"label": k, "values": ", ".join(sorted(v))} for k, v in sorted(labels.items())]
    if fmt in ("json", "yaml"):
        render.dump({k: sorted(v) for k, v in sorted(labels.items())}, fmt)
        return
    render.table(rows, title=f"{name}: {len(series)} series")


def _labels(metric: dict[str, str]) -> str:
    name = metric.get("__name__", "")
    inner = ",".join(f'{k}="{v}"' for k, v in metric.items() if k != "__name__")
    return f"{name}{{{inner}}}" if inner or not name else name


@metrics_cmd.command("query")
@click.argument("expr")
@click.option(
    "--at",
    metavar="WHEN",
    help="Evaluate at this moment: a time ago (30s, 10m) or ISO 8601. Default: now, or an ended session's end.",
)
@click.option("--range", "span", metavar="AGO", help="Evaluate over this time up to --at, e.g. 1h (a range query).")
@click.option("--step", default="15s", show_default=True, metavar="DURATION", help="A range query's step.")
@session_option
@client_options
def query_cmd(
    expr: str, at: str | None, span: str | None, step: str, session: str | None, fmt: str | None, server: str | None
) -> None:
    """Evaluate the PromQL expression EXPR, as Prometheus would: at one moment, or over a --range by --step."""
    now = time.time_ns()
    end_s = (now if at is None else parse_time(at, now)) / 1e9
    with make_client(server) as client:
        if span is None:  # (no time: the server answers now, or an ended session's last values)
            data = client.prometheus("query", {"query": expr, **({} if at is None else {"time": end_s})}, session)
        else:
            start_s = parse_time(span, int(end_s * 1e9)) / 1e9
            params = {"query": expr, "start": start_s, "end": end_s, "step": step}
            data = client.prometheus("query_range", params, session)
    if fmt in ("json", "yaml"):
        render.dump(data, fmt)
        return
    kind, result = data["resultType"], data["result"]
    if kind in ("scalar", "string"):
        click.echo(result[1])
        return
    rows = [
        {"series": _labels(series["metric"]), "time_ms": int(t * 1000), "value": value}
        for series in result
        for t, value in ([series["value"]] if kind == "vector" else series["values"])
    ]
    if not rows:
        click.echo("(no data)")
        return
    render.table(rows, columns=["series", "time_ms", "value"])


TOP = {  # each table of `metrics top`: its columns
    "nodes": ["node_id", "processes", "cpu", "rss", "gpu_memory", "gpu_utilization", "node_cpu_percent", "node_mem"],
    "workers": ["worker_id", "node_id", "pid", "component", "worker_type", "job_id", "cpu", "rss", "gpu_memory",
                "gpu_utilization", "running"],
    "actors": ["actor_id", "class_name", "name", "worker_id", "node_id", "pid", "cpu", "rss", "gpu_memory",
               "gpu_utilization"],
}  # fmt: skip


def _shown(row: dict[str, Any]) -> dict[str, Any]:
    """A row of `metrics top` for a table: CPU in cores, bytes in MiB, lists joined."""
    mib = {k.removesuffix("_bytes"): None if v is None else f"{v / 2**20:,.0f} MiB" for k, v in row.items()
           if k.endswith("_bytes") and k != "node_mem_total_bytes"}  # fmt: skip
    if row.get("node_mem_used_bytes") is not None and row.get("node_mem_total_bytes"):
        mib["node_mem"] = f"{row['node_mem_used_bytes'] / 2**20:,.0f} of {row['node_mem_total_bytes'] / 2**20:,.0f} MiB"
    return {
        **row,
        **mib,
        "cpu": None if row.get("cpu") is None else f"{row['cpu']:.2f}",
        "running": ", ".join(row.get("running") or []),
    }


@metrics_cmd.command("top")
@click.argument("what", type=click.Choice(["all", *TOP]), default="all")
@click.option(
    "--at",
    metavar="WHEN",
    help="At this moment: a time ago (30s, 10m) or ISO 8601. Default: now, or an ended session's end.",
)
@click.option("--limit", type=click.IntRange(1, 1000), default=10, show_default=True, help="Rows of each table.")
@session_option
@client_options
def top_cmd(what: str, at: str | None, limit: int, session: str | None, fmt: str | None, server: str | None) -> None:
    """The busiest nodes, workers and actors (WHAT: one of them, or all), by CPU over the minute before the moment,
    with their memory and GPU use: from each Ray process's own stats, joined to what ran in it (a worker's job,
    actor and running tasks)."""
    at_ms = None if at is None else parse_time(at, time.time_ns()) // 1_000_000
    with make_client(server) as client:
        report = client.metrics_top(session, at_ms, limit)
    tables = list(TOP) if what == "all" else [what]
    if fmt in ("json", "yaml"):
        render.dump({k: v for k, v in report.items() if k not in TOP or k in tables}, fmt)
        return
    moment = datetime.fromtimestamp(report["at_ms"] / 1000, tz=UTC).isoformat(timespec="seconds")
    click.echo(f"{report['session']} at {moment}; CPU in cores, over the minute before")
    for table in tables:
        rows = [_shown(row) for row in report[table]]
        if rows:
            render.table(rows, columns=TOP[table], title=f"Busiest {table}")
        else:
            render.heading(f"Busiest {table}: none (no process stats scraped then)")
