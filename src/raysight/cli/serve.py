"""`raysight serve`: Ray Serve's state at any moment of a session, in `serve status` and `serve config`'s own YAML,
and its changes over the session — from the samples raysight's poller took of the dashboard while the cluster
lived."""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

import click
import yaml

from raysight.cli import render
from raysight.cli.common import client_options, make_client, parse_time, session_option
from raysight.cli.status import format_ms


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
    own commands printed then, `serve history` each change of its applications, deployments and replicas."""


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
    first saw it (every 5 s)."""
    with make_client(server) as client:
        history = client.serve_history(session=session, app=app)
    if fmt in ("json", "yaml"):
        render.dump(history, fmt)
        return
    rows = [
        {
            "time_ms": t["ts_ms"],
            "kind": t["kind"],
            "name": t["replica"] or "/".join(n for n in (t["application"], t["deployment"]) if n),
            "change": f"{t['from'] or '(new)'} → {t['to'] or '(gone)'}",
            "trigger": t["trigger"],
            "message": t["message"],
        }
        for t in history["transitions"]
    ]
    if not rows:
        raise click.ClickException(f"raysight's poller saw no Serve in session {history['session']}")
    render.table(rows, title=f"Serve in {history['session']}: {len(rows)} changes")
