"""`raysight agent`: one per node, shipping the logs of the node's Ray sessions to the server."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from types import FrameType

import click

from raysight.agent.node_agent import NodeAgent, default_state_dir
from raysight.agent.scrape import ray_temp_dir
from raysight.cli.common import server_option
from raysight.config import ENV_INGEST_KEY, default_server


@click.command("agent")
@server_option
@click.option(
    "--ray-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Ray's temporary directory, which holds its sessions [default: $RAY_TMPDIR/ray, else /tmp/ray].",
)
@click.option("--ingest-key", envvar=ENV_INGEST_KEY, help="The server's write-only ingest key (beyond loopback).")
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where the agent keeps its checkpoint [default: ~/.local/state/raysight/agent]; one agent a directory.",
)
@click.option("--once", is_flag=True, help="Ship what the files hold now, partial last lines too, then exit.")
def agent_cmd(
    server: str | None, ray_dir: Path | None, ingest_key: str | None, state_dir: Path | None, once: bool
) -> None:
    """Ship every log line of this node's Ray sessions to raysight (worker output, drivers of submitted jobs, Serve,
    Ray's own components), following Ray's rotation and surviving restarts: run one on each node beside `ray start`.
    SIGTERM or Ctrl-C ships what is left, then exits."""
    try:
        agent = NodeAgent(
            server or default_server(),
            ray_dir or ray_temp_dir(os.environ),
            state_dir or default_state_dir(),
            ingest_key,
        )
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from None
    stop = threading.Event()

    def stopping(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, stopping)
    signal.signal(signal.SIGINT, stopping)
    caught_up = True
    try:
        if once:
            caught_up = agent.drain()
        else:
            click.echo(f"raysight agent: shipping the logs under {agent.tailer.ray_dir} to {agent.server}", err=True)
            agent.run(stop)
    finally:
        agent.close()
    click.echo(f"raysight agent: {agent.sent_lines} lines shipped", err=True)
    if not caught_up:
        raise click.ClickException(
            f"{agent.server} took nothing for 30 s; what is left stays in the files: run the agent again to ship it"
        )
