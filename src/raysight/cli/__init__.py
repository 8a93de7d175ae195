"""The `raysight` command."""

from __future__ import annotations

from typing import Any

import click

from raysight import __version__
from raysight.cli.agent import agent_cmd
from raysight.cli.failures import errors_cmd
from raysight.cli.logs import logs_cmd
from raysight.cli.metrics import metrics_cmd
from raysight.cli.poll import poll_cmd
from raysight.cli.query import doctor_cmd, get_cmd, list_cmd, reindex_cmd, sessions_cmd, summary_cmd
from raysight.cli.run import demo_cmd, env_cmd, run_cmd
from raysight.cli.server import server_cmd
from raysight.cli.status import status_cmd
from raysight.cli.timeline import timeline_cmd
from raysight.cli.traces import traces_cmd
from raysight.errors import BadQuery, RaysightError


class RaysightGroup(click.Group):
    """Turns raysight's errors into one-line CLI errors at this one boundary: a query the user must fix (a bad
    filter or sort) exits 2 like any usage error; anything else (unreachable, unauthorised, not found) exits 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BadQuery as exc:
            raise click.UsageError(str(exc)) from None
        except RaysightError as exc:
            raise click.ClickException(str(exc)) from None


@click.group(cls=RaysightGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="raysight")
def main() -> None:
    """raysight: Ray's monitoring toolbox, with history that outlives the cluster.

    Start a server (`raysight server`), point Ray at it (`raysight run -- python app.py`, or `raysight env` for
    `ray start`), then ask as you would ask Ray: `raysight list actors`, `raysight summary tasks`.
    """


for command in (
    server_cmd,
    env_cmd,
    run_cmd,
    agent_cmd,
    poll_cmd,
    demo_cmd,
    list_cmd,
    get_cmd,
    summary_cmd,
    logs_cmd,
    errors_cmd,
    timeline_cmd,
    traces_cmd,
    status_cmd,
    metrics_cmd,
    sessions_cmd,
    doctor_cmd,
    reindex_cmd,
):
    main.add_command(command)
