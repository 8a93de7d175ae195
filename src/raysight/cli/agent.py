"""`raysight agent`: one per node, shipping the logs of the node's Ray sessions to the server."""

from __future__ import annotations

import logging
import os
import re
import signal
import threading
from pathlib import Path
from types import FrameType

import click

from raysight.agent.metrics_scrape import Families
from raysight.agent.node_agent import NodeAgent, default_state_dir
from raysight.agent.scrape import ray_temp_dir
from raysight.cli.common import metrics_options, server_option
from raysight.settings import ENV_INGEST_KEY, default_server


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
@click.option(
    "--on-ray",
    "on_ray",
    flag_value="start",
    help="Run no agent here: start one as a Ray actor on every node of the cluster at --address, and on each node "
    "that joins later; print what each does, and exit.",
)
@click.option("--stop-on-ray", "on_ray", flag_value="stop", help="Stop the agents --on-ray started, once they ship.")
@click.option("--address", help="With --on-ray: the Ray cluster [default: RAY_ADDRESS, else the local one].")
@metrics_options
def agent_cmd(
    server: str | None,
    ray_dir: Path | None,
    ingest_key: str | None,
    state_dir: Path | None,
    once: bool,
    on_ray: str | None,
    address: str | None,
    metrics_keep: re.Pattern[str] | None,
    metrics_drop: re.Pattern[str] | None,
) -> None:
    """Ship every log line of this node's Ray sessions to raysight (worker output, drivers of submitted jobs, Serve,
    Ray's own components), following Ray's rotation and surviving restarts, scrape the node's metrics every 5 s (with
    each Ray process's CPU, memory and GPU use), and report the node's raylets and GCS starting and going: run one
    on each node beside `ray start`, or start them as Ray actors with --on-ray. SIGTERM or Ctrl-C ships what is
    left, then exits."""
    if on_ray:
        if once or ray_dir or metrics_keep or metrics_drop:
            raise click.UsageError(
                "--once, --ray-dir and --metrics-keep/--metrics-drop are for an agent run here, not with "
                "--on-ray/--stop-on-ray"
            )
        _on_ray(on_ray, server or default_server(), ingest_key, state_dir, address)
        return
    try:
        agent = NodeAgent(
            server or default_server(),
            ray_dir or ray_temp_dir(os.environ),
            state_dir or default_state_dir(),
            ingest_key,
            families=Families(metrics_keep, metrics_drop),
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


def _on_ray(what: str, server: str, key: str | None, state_dir: Path | None, address: str | None) -> None:
    import ray  # (only here: the agent itself needs no Ray)

    from raysight.agent import on_ray

    ray.init(address=address or "auto", namespace=on_ray.NAMESPACE, logging_level=logging.WARNING, log_to_driver=False)
    try:
        if what == "start":
            agents = on_ray.deploy(server, key, str(state_dir) if state_dir else None)
        else:
            agents = on_ray.undeploy()
    finally:
        ray.shutdown()
    for agent in agents:
        click.echo(f"{agent['node_id']}  {agent['status']}  ({agent['sent_lines']} lines shipped)")
    if what == "start":
        click.echo(f"raysight agent: an agent on each of {len(agents)} node(s), and on each that joins", err=True)
    else:
        click.echo(f"raysight agent: {len(agents)} agent(s) stopped", err=True)
