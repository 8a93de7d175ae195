"""`raysight serve`: Ray Serve's state at any moment of a session, in `serve status` and `serve config`'s own YAML,
and its changes over the session — from the samples raysight's poller took of the dashboard while the cluster
lived."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from typing import Any

import click
import yaml

from raysight import units
from raysight.cli import render
from raysight.cli.common import Checked, client_options, make_client, parse_time, session_option, time_window
from raysight.cli.logs import prefix
from raysight.cli.status import format_ms
from raysight.cli.traces import duration


def _app_option(what: str) -> Any:
    return click.option("-n", "--name", "app", metavar="APP", help=f"The application whose {what} to show.")


def _at_option(fn: Any) -> Any:
    text = "The moment to show: a time ago (30s, 10m, 2h, 1d) or ISO 8601. Default: the last sample."
    return click.option("--at", metavar="WHEN", help=text)(fn)


def _sample(server: str | None, session: str | None, at: str | None) -> dict[str, Any]:
    """Serve's state then, as the dashboard gave it; a line on stderr says when it was polled so."""
    with make_client(server) as client:
        sample = client.serve(session=session, at=None if at is None else parse_time(at, time.time_ns()))
    if sample["details"] is None:
        then = f" by {format_ms(sample['at_ms'])}" if sample["at_ms"] else ""
        raise click.ClickException(f"raysight's poller saw no Serve in session {sample['session']}{then}")
    polled = f"{format_ms(sample['sampled_ms'])} to {format_ms(sample['last_polled_ms'])}"
    click.echo(f"# Serve in {sample['session']}, as polled from {polled}", err=True)
    details: dict[str, Any] = sample["details"]
    return details


@click.group("serve")
def serve_cmd() -> None:
    """Ray Serve at any moment of a session, live or long ended: `serve status` and `serve config` print what Ray's
    own commands printed then, `serve history` each change of its applications, deployments and replicas, `serve
    replicas` each replica it had and how it ended, `serve requests` the requests its proxies and replicas logged,
    `serve request ID` one of them whole, `serve stats` its metrics by application and deployment."""


@serve_cmd.command("status")
@_at_option
@_app_option("status")
@session_option
@client_options
def status_cmd(at: str | None, app: str | None, session: str | None, fmt: str | None, server: str | None) -> None:
    """Serve's proxies, applications and deployments (status, trigger, replicas by state, message) as Ray's `serve
    status` printed them at that moment."""
    from ray.serve.schema import ServeInstanceDetails  # (Ray's own models and YAML: about a second to import)
    from ray.serve.scripts import ServeDeploySchemaDumper, process_dict_for_yaml_dump

    details = ServeInstanceDetails(**_sample(server, session, at))
    status = asdict(details._get_status())
    if app is not None and app not in details.applications:
        raise click.ClickException(f'Application "{app}" does not exist.')
    shown = status if app is None else status["applications"][app]
    if fmt in ("json", "yaml"):
        render.dump(yaml.safe_load(yaml.dump(shown, Dumper=ServeDeploySchemaDumper)), fmt)
        return
    text = yaml.dump(
        process_dict_for_yaml_dump(shown), Dumper=ServeDeploySchemaDumper, default_flow_style=False, sort_keys=False
    )
    click.echo(text, nl=False)


@serve_cmd.command("config")
@_at_option
@_app_option("config")
@session_option
@client_options
def config_cmd(at: str | None, app: str | None, session: str | None, fmt: str | None, server: str | None) -> None:
    """Each application's config as deployed (its fields set), as Ray's `serve config` printed it at that moment; an
    application started by `serve.run` has none."""
    from ray.serve.schema import ServeInstanceDetails  # (Ray's own models and YAML: about a second to import)
    from ray.serve.scripts import ServeDeploySchemaDumper

    applications = ServeInstanceDetails(**_sample(server, session, at)).applications
    configs = {
        name: a.deployed_app_config.model_dump(mode="json" if fmt in ("json", "yaml") else "python", exclude_unset=True)
        for name, a in applications.items()
        if a.deployed_app_config is not None and (app is None or name == app)
    }
    if fmt in ("json", "yaml"):
        render.dump(configs, fmt)
    elif app is not None and not configs:
        click.echo(f'No config has been deployed for application "{app}".')
    elif not configs:
        click.echo("No configuration was found.")
    else:
        shown = [yaml.dump(c, Dumper=ServeDeploySchemaDumper, sort_keys=False) for c in configs.values()]
        click.echo("\n---\n\n".join(shown), nl=False)


@serve_cmd.command("history")
@_app_option("changes")
@session_option
@client_options
def history_cmd(app: str | None, session: str | None, fmt: str | None, server: str | None) -> None:
    """Each change of Serve's applications (DEPLOYING → RUNNING …), deployments (UPDATING → HEALTHY → UNHEALTHY,
    with what triggered it and its message) and replicas (STARTING → RUNNING → STOPPING → gone), when the poller
    first saw it (every 5 s); and each autoscaling decision (1 → 3 replicas, with its policy and reason), when Serve
    made it."""
    with make_client(server) as client:
        history = client.serve_history(session=session, app=app)
    if fmt in ("json", "yaml"):
        render.dump(history, fmt)
        return
    _polled([history_row(t) for t in history["transitions"]], history["session"], "changes")


def history_row(change: dict[str, Any]) -> dict[str, Any]:
    """A row of `serve history`'s table: a change of state (``(new)``, ``(gone)``: appeared, went) or an autoscaling
    decision (from how many replicas to how many)."""
    if change["kind"] == "autoscaling":
        what = f"{change['from']} → {change['to']} replicas"
    else:
        what = f"{change['from'] or '(new)'} → {change['to'] or '(gone)'}"
    return {
        "time_ms": change["ts_ms"],
        "kind": change["kind"],
        "name": change["replica"] or "/".join(n for n in (change["application"], change["deployment"]) if n),
        "change": what,
        "trigger": change["trigger"],
        "message": change["message"],
    }


def _polled(rows: list[dict[str, Any]], session: str | None, what: str) -> None:
    """What the poller saw of Serve in ``session``, ``rows`` of ``what``, as a table; none: an error saying so."""
    if not rows:
        raise click.ClickException(f"raysight's poller saw no Serve in session {session}")
    render.table(rows, title=f"Serve in {session}: {len(rows)} {what}")


def _ended(replica: dict[str, Any]) -> str:
    """How a replica ended, and when: ``crashed 12:00:01.234``; empty while it ran."""
    ended = replica["ended"]
    return "" if ended is None else f"{ended['how']} {render.cell('time_ms', ended['time_ms'])}"


@serve_cmd.command("replicas")
@_app_option("replicas")
@click.option("--deployment", metavar="NAME", help="Only this deployment's replicas.")
@_at_option
@session_option
@client_options
def replicas_cmd(
    app: str | None, deployment: str | None, at: str | None, session: str | None, fmt: str | None, server: str | None
) -> None:
    """Every replica Serve had until that moment, in the order first seen: its states over time (as the poller saw
    them), its actor (`raysight get actors ID`), pid, node and log file (`raysight logs --replica ID`), and how it
    ended: crashed (a failure in `raysight errors`), stopped by Serve, or with its session."""
    with make_client(server) as client:
        data = client.serve_replicas(
            session=session, app=app, deployment=deployment, at=None if at is None else parse_time(at, time.time_ns())
        )
    if fmt in ("json", "yaml"):
        render.dump(data, fmt)
        return
    rows = [
        {
            "replica_id": r["replica_id"],
            "deployment": f"{r['application']}/{r['deployment']}",
            "states": " → ".join([*(s["state"] for s in r["states"]), *(["(gone)"] if r["gone_ms"] else [])]),
            "first_seen_ms": r["first_seen_ms"],
            "ended": _ended(r),
            "actor_id": r["actor_id"],
            "pid": r["pid"],
            "node_id": r["node_id"],
            "log_file_path": r["log_file_path"],
        }
        for r in data["replicas"]
    ]
    _polled(rows, data["session"], "replicas")


def _latency(ms: float | None) -> str:
    return "" if ms is None else f"{ms:g}ms"


def _crossed(request: dict[str, Any]) -> str:
    """Each replica a request crossed, with its status and latency there: ``Cart/ab12 200 1.1ms``."""
    return ", ".join(
        f"{r['deployment']}/{r['replica']} {r['status']} {_latency(r['latency_ms'])}" for r in request["replicas"]
    )


@serve_cmd.command("requests")
@click.option("--app", metavar="APP", help="Only requests through this application's replicas.")
@click.option("--deployment", metavar="NAME", help="Only requests through this deployment's replicas.")
@click.option("--route", metavar="ROUTE", help="Only requests to this route (/shop).")
@click.option(
    "--status", metavar="CODE", help="Only requests answered so somewhere: 503, 5xx, or OK, ERROR, CANCELLED."
)
@click.option(
    "--min-latency", type=Checked(units.duration_ns, "TIME"), help="Only requests this slow somewhere: 250ms, 1.5s."
)
@click.option("--since", metavar="WHEN", help="Only requests from WHEN on: a time ago (30s, 10m, 2h, 1d) or ISO 8601.")
@click.option("--until", metavar="WHEN", help="Only requests before WHEN (as --since).")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True, help="At most this many.")
@click.option(
    "--by",
    type=click.Choice(["route", "deployment"]),
    help="Instead, the latency p50/p95/p99 of the requests by route (at the proxy) or deployment (at its replicas).",
)
@session_option
@client_options
def requests_cmd(
    app: str | None,
    deployment: str | None,
    route: str | None,
    status: str | None,
    min_latency: str | None,
    since: str | None,
    until: str | None,
    limit: int,
    by: str | None,
    session: str | None,
    fmt: str | None,
    server: str | None,
) -> None:
    """Serve's requests, newest first, from its proxies' and replicas' access lines: each with its proxy's status
    and latency, and the replicas it crossed with theirs. A request is shown where one of its access lines matches
    every option given (`--app shop --min-latency 250ms`: 250 ms or more in one of shop's replicas)."""
    with make_client(server) as client:
        data = client.serve_requests(
            session=session,
            app=app,
            deployment=deployment,
            route=route,
            status=status,
            min_latency=None if min_latency is None else units.duration_ns(min_latency),
            **time_window(since, until),
            limit=limit,
            by=by,
        )
    if fmt in ("json", "yaml"):
        render.dump(data, fmt)
        return
    if by is not None:
        render.table(data["latencies"], title=f"Serve's latency by {by} in {data['session']}")
        return
    rows = [
        {
            "request_id": r["request_id"],
            "time_ms": r["time_ms"],
            "method": r["method"],
            "route": r["route"],
            "status": r["status"],
            "latency": _latency(r["latency_ms"]),
            "replicas": _crossed(r),
        }
        for r in data["requests"]
    ]
    if not rows:
        click.echo(f"No Serve requests in session {data['session'] or '(none recorded yet)'}.")
        return
    render.table(rows, title=f"Serve's requests in {data['session']}: {len(rows)} of {data['total']}")


@serve_cmd.command("request")
@click.argument("request_id")
@session_option
@client_options
def request_cmd(request_id: str, session: str | None, fmt: str | None, server: str | None) -> None:
    """One Serve request whole: each component's access line (its proxy's, each replica's) with status and latency,
    its trace (Serve's spans of it, where Serve traced it), then every line of it in every component (`raysight logs
    --request-id`'s)."""
    with make_client(server) as client:
        data = client.serve_request(request_id, session=session)
    if fmt in ("json", "yaml"):
        render.dump(data, fmt)
        return
    request = data["request"]
    if request is None and not data["lines"] and not data["traces"]:
        raise click.ClickException(f"no Serve request {request_id} in session {data['session']}")
    if request is not None:
        head = f"{request['method']} {request['route'] or ''} {request['status']} {_latency(request['latency_ms'])}"
        click.echo(f"Request {request_id}: {head}{' (failed)' if request['error'] else ''}")
        access = [p for p in (request["proxy"],) if p] + request["replicas"]
        columns = ["time_ms", "component", "host", "replica", "application", "deployment", "method", "call"]
        render.table(
            [{**a, "latency": _latency(a["latency_ms"])} for a in access], columns=[*columns, "status", "latency"]
        )
    for traced in data["traces"]:
        click.echo(
            f"Trace {traced['trace_id']}: {duration(traced['duration_ns'])}, {traced['spans']} spans, "
            f"{traced['errors']} failed (raysight traces show {traced['trace_id']})"
        )
    click.echo(f"\n{len(data['lines'])} lines:")
    for row in data["lines"]:
        click.echo(f"{prefix(row)} {row['text']}")


def _quantiles(buckets: str) -> dict[str, str]:
    """The p50, p95 and p99 columns of `serve stats` over a latency histogram's ``buckets`` (see :data:`STATS`)."""
    return {
        f"p{q}_ms": f"histogram_quantile(0.{q}, sum by ({{by}}, le) (rate({buckets}{{sel}}[{{range}}])))"
        for q in (50, 95, 99)
    }


# Each column of `serve stats` and its PromQL over Serve's metrics, by what the rows are of: ``{by}`` the labels that
# key a row, ``{sel}`` a selector's matchers (``--name``), ``{range}`` the rates' window. A counter is read under both
# its names: ``_total`` now, bare in older releases. By deployment, the replicas', handles' and controller's families;
# by route, the HTTP proxies' (their ongoing requests are a proxy's, of no route).
STATS = {
    "deployment": {
        "requests_per_s": "sum by ({by}) (rate(ray_serve_deployment_request_counter{total}{sel}[{range}]))",
        "errors_per_s": "sum by ({by}) (rate(ray_serve_deployment_error_counter{total}{sel}[{range}]))",
        **_quantiles("ray_serve_deployment_processing_latency_ms_bucket"),
        "ongoing": "sum by ({by}) (ray_serve_replica_processing_queries{sel})",
        "queued": "sum by ({by}) (ray_serve_deployment_queued_queries{sel})",
        "healthy_replicas": "sum by ({by}) (ray_serve_deployment_replica_healthy{sel})",
        # (each replica counts its own start once: the replicas seen in the window and not in the one before)
        "replica_starts": "count by ({by}) (max_over_time(ray_serve_deployment_replica_starts{total}{sel}[{range}]) "
        "unless max_over_time(ray_serve_deployment_replica_starts{total}{sel}[{range}] offset {range}))",
    },
    "route": {
        "requests_per_s": "sum by ({by}) (rate(ray_serve_num_http_requests{total}{sel}[{range}]))",
        "errors_per_s": "sum by ({by}) (rate(ray_serve_num_http_error_requests{total}{sel}[{range}]))",
        **_quantiles("ray_serve_http_request_latency_ms_bucket"),
    },
}


def stats_queries(window_ms: int, app: str | None, by: str = "deployment") -> dict[str, str]:
    """The PromQL of each column of `serve stats` ``by`` deployment or route: rates over ``window_ms``, of
    application ``app`` only if given; a counter's query falls back on its older bare name where no ``_total`` series
    answers."""
    sel = "" if app is None else f"{{application={json.dumps(app)}}}"

    def query(template: str, total: str) -> str:
        return template.format(by=f"application, {by}", sel=sel, range=f"{window_ms}ms", total=total)

    return {
        column: query(t, "_total") if "{total}" not in t else f"({query(t, '_total')}) or ({query(t, '')})"
        for column, t in STATS[by].items()
    }


def stats_rows(answers: dict[str, list[dict[str, Any]]], by: str = "deployment") -> list[dict[str, Any]]:
    """One row per application and deployment (or route) from each column's instant vector (Prometheus's
    ``result``): a column no series answered is None, a value not a number (a quantile of no requests) too."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for column, result in answers.items():
        for series in result:
            key = (series["metric"].get("application", ""), series["metric"].get(by, ""))
            row = rows.setdefault(key, {"application": key[0], by: key[1], **dict.fromkeys(STATS[by])})
            value = float(series["value"][1])
            row[column] = None if value != value else value  # (NaN: none)
    return [rows[key] for key in sorted(rows)]


def _shown(value: Any) -> Any:
    return f"{value:.3g}" if isinstance(value, float) else value


@serve_cmd.command("stats")
@click.option(
    "--at",
    metavar="WHEN",
    help="At this moment: a time ago (30s, 10m) or ISO 8601. Default: now, or an ended session's last scrape.",
)
@click.option(
    "--range",
    "window",
    type=Checked(units.duration_ns, "AGO"),
    default="1m",
    show_default=True,
    help="The rates' window before the moment: 30s, 5m, 1h.",
)
@click.option(
    "--by",
    type=click.Choice(list(STATS)),
    default="deployment",
    show_default=True,
    help="Rows of each deployment (its replicas' and handles' metrics) or each route (its HTTP proxies').",
)
@_app_option("metrics")
@session_option
@client_options
def stats_cmd(
    at: str | None, window: str, by: str, app: str | None, session: str | None, fmt: str | None, server: str | None
) -> None:
    """Serve's metrics by application and deployment at that moment, from its replicas', routers' and controller's
    `ray_serve_*` families: requests and errors a second and latency p50/p95/p99 over the --range before, requests
    ongoing at the replicas and queued at the handles, healthy replicas, and replicas started in the --range; or
    (--by route) by application and route, from its HTTP proxies': requests and errors a second and latency
    p50/p95/p99 as clients saw them."""
    window_ms = units.duration_ns(window) // units.MS
    if window_ms < 1:
        raise click.BadParameter(f"{window!r} is shorter than a millisecond", param_hint="--range")
    moment = {} if at is None else {"time": parse_time(at, time.time_ns()) / 1e9}
    with make_client(server) as client:
        answers = {
            column: client.prometheus("query", {"query": query, **moment}, session)["result"]
            for column, query in stats_queries(window_ms, app, by).items()
        }
    rows = stats_rows(answers, by)
    if fmt in ("json", "yaml"):
        render.dump(rows, fmt)
    elif not rows:
        click.echo("No Serve metrics then.")
    else:
        render.table([{k: _shown(v) for k, v in row.items()} for row in rows], title="Serve's metrics")
