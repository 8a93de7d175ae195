"""`raysight env`, `raysight run` and `raysight demo`: getting Ray to send its events to raysight."""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from urllib.parse import urlencode

import click

from raysight import units, wire
from raysight.agent.metrics_scrape import Families
from raysight.agent.node_agent import NodeAgent, default_state_dir
from raysight.agent.scrape import ray_temp_dir
from raysight.agent.state_poll import StatePoller
from raysight.cli import render
from raysight.cli.common import metrics_options, server_option
from raysight.cli.detach import start_detached
from raysight.cli.failures import ERRORS_COLUMNS, errors_row
from raysight.client import Client
from raysight.errors import RaysightError
from raysight.instrument.hook_paths import (
    ENV_HOOK,
    RAY_ENV_HOOK,
    RAY_POST_MORTEM,
    RAY_SERVE_EXPORTER,
    RAY_SERVE_SAMPLING,
    SERVE_EXPORTER,
)
from raysight.instrument.task_profile import DEFAULT_HZ
from raysight.settings import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    ENV_CHAINED_ENV_HOOK,
    ENV_INGEST_KEY,
    ENV_OTLP_ENDPOINT,
    ENV_POST_MORTEM_TIMEOUT,
    ENV_PROFILE_HZ,
    ENV_RAY_SYSTEM_CONFIG,
    ENV_SERVER,
    ENV_TRACING,
    POST_MORTEM_TIMEOUT_S,
    default_data_dir,
    default_server,
)


def ray_env(
    server: str, cluster: str | None = None, run_id: str | None = None, key: str | None = None
) -> dict[str, str]:
    """The variables that make Ray (2.60) export its events to ``server``; set them where Ray starts."""
    query = {k: v for k, v in (("cluster", cluster), ("run", run_id)) if v} | wire.key_params(key)
    url = server.rstrip("/") + wire.RAY_EVENTS + (f"?{urlencode(query)}" if query else "")
    return {
        "RAY_enable_ray_event": "1",
        "RAY_enable_core_worker_ray_event_to_aggregator": "1",
        "RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR": url,
        "RAY_DASHBOARD_AGGREGATOR_AGENT_EXPOSABLE_EVENT_TYPES": "ALL",
        "RAY_ENABLE_RECORD_ACTOR_TASK_LOGGING": "1",
    }


def tracing_env(
    server: str,
    key: str | None = None,
    environ: Mapping[str, str] | None = None,
    tracing: bool = True,
    profiling: bool = True,
) -> dict[str, str]:
    """The variables that instrument a Ray program's tasks and actors for ``server`` (``raysight/instrument``): Ray
    calls raysight's runtime-env hook in each driver's ``ray.init``, which chains a hook ``environ`` already names,
    and each worker's setup hook then traces its tasks (``tracing``: spans) and samples them (``profiling``: task
    profiles); and traces Ray Serve's requests, every one (unless ``environ`` sets Serve's sampling), unless
    ``environ`` names an exporter of its own for Serve (:func:`serve_exporter_hint`)."""
    if not (tracing or profiling):
        return {}
    environ = os.environ if environ is None else environ
    endpoint = server.rstrip("/") + (wire.path(wire.OTLP_KEYED, key=key) if key else "")
    env = {RAY_ENV_HOOK: ENV_HOOK, ENV_OTLP_ENDPOINT: endpoint}
    theirs = environ.get(RAY_ENV_HOOK)
    if theirs and theirs != ENV_HOOK:
        env[ENV_CHAINED_ENV_HOOK] = theirs
    if not tracing:
        env[ENV_TRACING] = "0"
    elif serve_exporter_hint(environ) is None:
        env[RAY_SERVE_EXPORTER] = SERVE_EXPORTER
        env[RAY_SERVE_SAMPLING] = environ.get(RAY_SERVE_SAMPLING) or "1.0"
    if not profiling:
        env[ENV_PROFILE_HZ] = "0"
    return env


def left_off(env: dict[str, str], tracing: bool, profiling: bool) -> None:
    """``env`` (with :func:`tracing_env`'s variables) less those of raysight's that an environment a shell `raysight
    env` set up had, and ``tracing`` and ``profiling`` turn off: a user's own runtime-env hook, which raysight chained,
    back where neither is on."""
    if profiling and env.get(ENV_PROFILE_HZ) == "0":  # (a rate of the user's own stays)
        del env[ENV_PROFILE_HZ]
    if tracing:
        env.pop(ENV_TRACING, None)
    elif env.get(RAY_SERVE_EXPORTER) == SERVE_EXPORTER:
        del env[RAY_SERVE_EXPORTER]
    if not (tracing or profiling) and env.get(RAY_ENV_HOOK) == ENV_HOOK:
        del env[RAY_ENV_HOOK]
        if chained := env.pop(ENV_CHAINED_ENV_HOOK, None):
            env[RAY_ENV_HOOK] = chained
        env.pop(ENV_OTLP_ENDPOINT, None)


def serve_exporter_hint(environ: Mapping[str, str]) -> str | None:
    """What to tell a user whose environment names an exporter of their own for Ray Serve's spans, which raysight
    leaves as it is; None when it names none (or raysight's)."""
    theirs = environ.get(RAY_SERVE_EXPORTER)
    if not theirs or theirs == SERVE_EXPORTER:
        return None
    return (
        f"raysight: {RAY_SERVE_EXPORTER} names your own exporter ({theirs}), which raysight leaves as it is: Serve's "
        "spans go to it (and to raysight where raysight traces the process, sampled as raysight samples); unset it "
        "for raysight's"
    )


def uv_run_warning(command: list[str], environ: dict[str, str]) -> str | None:
    """What to tell a user whose program `uv run` starts: Ray calls no runtime-env hook there."""
    uv = bool(command) and Path(command[0]).name == "uv" and "run" in command[1:3]
    if not uv or environ.get("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "1").lower() in ("0", "false"):
        return None
    return (
        "raysight: under `uv run`, Ray ignores RAY_RUNTIME_ENV_HOOK, so the workers are not traced; set "
        "RAY_ENABLE_UV_RUN_RUNTIME_ENV=0 (workers then use the driver's environment as it is), or call "
        "raysight.instrument.init() in the driver before ray.init"
    )


# The two RayConfig entries that turn the stream on, as `ray start --head --system-config` takes them. Ray 2.60 reads
# them in each process from its own environment, or from this config, which the GCS hands to every process that joins
# the cluster: without one of the two, a driver started in another shell sends none of its tasks' events (their
# definitions, failures and end states: the owner's side), and its tasks look as if they had all run fine.
RAY_SYSTEM_CONFIG = {"enable_ray_event": True, "enable_core_worker_ray_event_to_aggregator": True}


def env_exports(
    server: str, cluster: str | None, key: str | None, tracing: bool = True, profiling: bool = True
) -> dict[str, str]:
    """What `raysight env` exports, and `raysight start` sets for `ray start`: Ray's variables (and tracing's) and the
    head's ``--system-config``."""
    return {
        **ray_env(server, cluster, key=key),
        **tracing_env(server, key, tracing=tracing, profiling=profiling),
        ENV_RAY_SYSTEM_CONFIG: json.dumps(RAY_SYSTEM_CONFIG),
    }


def env_lines(
    server: str,
    cluster: str | None,
    key: str | None,
    tracing: bool = True,
    profiling: bool = True,
    more: Mapping[str, str] | None = None,
) -> list[str]:
    """What `raysight env` prints: shell lines that export :func:`env_exports` (and ``more``), and how to use them."""
    exports = {**env_exports(server, cluster, key, tracing, profiling), **(more or {})}
    return [f"export {name}='{value}'" for name, value in exports.items()] + [
        f'# on the head node: ray start --head --system-config="${ENV_RAY_SYSTEM_CONFIG}" …  '
        "(drivers started elsewhere",
        "# then send their tasks' events too); on the other nodes: ray start --address=… (these exports, no config)",
        f"# and on every node, for its logs: raysight agent --server {server}"
        + (f" --ingest-key {key}" if key else "")
        + " &",
    ]


def post_mortem_env(timeout: float | None) -> dict[str, str]:
    """The variables that freeze a task that raises on its failing frame, for `raysight debug attach`, for
    ``timeout`` seconds (None: no freeze): Ray's own switch, which raysight's hook in each worker answers."""
    if timeout is None:
        return {}
    return {RAY_POST_MORTEM: "1", ENV_POST_MORTEM_TIMEOUT: f"{timeout:g}"}


def _post_mortem_timeout(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    try:
        return None if value is None else units.duration_s(value, bare=units.S)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


post_mortem_option = click.option(
    "--post-mortem",
    "post_mortem",
    is_flag=False,
    flag_value=f"{POST_MORTEM_TIMEOUT_S:g}s",
    default=None,
    metavar="[TIMEOUT]",
    callback=_post_mortem_timeout,
    help=f"Freeze a task that raises on its failing frame, for `raysight debug attach` (the server allows debugging: "
    f"--allow-debug), for TIMEOUT (default {POST_MORTEM_TIMEOUT_S / 60:g}m); the task then fails as it would have.",
)
cluster_option = click.option("--cluster", metavar="NAME", help="A label for the sessions this cluster records.")
tracing_option = click.option(
    "--tracing/--no-tracing",
    default=True,
    show_default=True,
    help="Trace the program's tasks and actors (OpenTelemetry spans, sent to raysight).",
)
profiling_option = click.option(
    "--profiling/--no-profiling",
    default=True,
    show_default=True,
    help=f"Sample the Python stacks of every task attempt (`raysight profile`), {DEFAULT_HZ:g} times a second "
    f"[env {ENV_PROFILE_HZ} sets the rate].",
)
key_option = click.option(
    "--ingest-key",
    envvar=ENV_INGEST_KEY,
    default=None,
    help="The server's write-only ingest key, when it is bound beyond loopback.",
)


@click.command("env")
@server_option
@cluster_option
@key_option
@tracing_option
@profiling_option
@post_mortem_option
def env_cmd(
    server: str | None,
    cluster: str | None,
    ingest_key: str | None,
    tracing: bool,
    profiling: bool,
    post_mortem: float | None,
) -> None:
    """Print the `export` lines that point a `ray start` node at raysight: `eval "$(raysight env …)"` on every node,
    then `ray start --head --system-config="$RAYSIGHT_RAY_SYSTEM_CONFIG"` on the head. Drivers started where these
    are set trace their tasks and actors. (`raysight start` does all of it, the agent and poller too, in one
    command.)"""
    more = post_mortem_env(post_mortem)
    for line in env_lines(server or default_server(), cluster, ingest_key, tracing, profiling, more):
        click.echo(line)
    if tracing and (hint := serve_exporter_hint(os.environ)) is not None:
        click.echo(hint, err=True)


def run_program(
    command: list[str],
    server: str,
    cluster: str | None,
    key: str | None,
    families: Families | None = None,
    tracing: bool = True,
    profiling: bool = True,
    more: Mapping[str, str] | None = None,
) -> int:
    """Run a Ray program with the export variables set, polling its dashboard for what Ray never sends as events
    while it runs, shipping its logs and metrics (``families`` of them; its aggregators' counts with them), then tell
    the server how its driver ended. Returns the program's exit code, which a failed report does not
    change."""
    run_id = uuid.uuid4().hex
    env = {**os.environ, **ray_env(server, cluster, run_id, key), **tracing_env(server, key, None, tracing, profiling)}
    env.update(more or {})
    left_off(env, tracing, profiling)  # (not even as a shell `raysight env` set up has it)
    warnings = [uv_run_warning(command, env) if tracing or profiling else None]
    warnings += [serve_exporter_hint(env) if tracing else None]
    for warning in filter(None, warnings):
        click.echo(warning, err=True)
    try:
        proc = subprocess.Popen(command, env=env)
    except FileNotFoundError:
        raise click.ClickException(f"command not found: {command[0]}") from None
    poller = StatePoller(server, key, proc.pid, ray_temp_dir(env)).start()
    shipping = _ship_logs(server, key, ray_temp_dir(env), families)
    try:
        code = proc.wait()
    except KeyboardInterrupt:
        code = proc.wait()
    poller.stop()
    if shipping is not None:
        shipping()
    joined = poller.session.name if poller.session else None  # (a cluster it started, or one it joined)
    try:
        with Client(server) as client:
            client.run_exit(run_id, proc.pid, code, time.time_ns(), key, session=joined)
    except RaysightError as exc:  # the program's exit code stands whatever raysight says
        click.echo(f"raysight: could not report the driver's exit code to {server}: {exc}", err=True)
    return code


def _ship_logs(server: str, key: str | None, ray_dir: Path, families: Families | None) -> Callable[[], None] | None:
    """Start shipping the logs and metrics of the sessions the program starts or joins (a node agent on a thread);
    returns what ships the rest once the program has ended, and stops. None when another agent already ships this
    node's logs (and scrapes its metrics)."""
    try:
        agent = NodeAgent(server, ray_dir, default_state_dir(), key, since=time.time() - 1, families=families)
    except RuntimeError as exc:
        click.echo(f"raysight: not shipping logs: {exc}", err=True)
        return None
    stop = threading.Event()
    thread = threading.Thread(target=agent.run, args=(stop,), name="raysight-logs", daemon=True)
    thread.start()

    def finish() -> None:
        stop.set()  # the agent ships what the files hold, partial last lines too, then returns
        thread.join()
        agent.close()

    return finish


def ensure_server(server: str | None, start: bool = True) -> str:
    """The server to use; when none was named and none answers locally, start a detached one on the default data dir
    (unless not to ``start`` one: then none answering is an error, as it is for a server named)."""
    url = server or default_server()
    with Client(url, timeout=2) as client:
        if client.ping():
            return url
    if not start or server or os.environ.get(ENV_SERVER):
        raise click.ClickException(f"no raysight server answers at {url}")
    data_dir = default_data_dir()
    pid = start_detached(DEFAULT_HOST, DEFAULT_PORT, data_dir)
    click.echo(
        f"raysight: started a server in the background (pid {pid}) at {url}, data in {data_dir}; "
        "`raysight server stop` ends it",
        err=True,
    )
    return url


@click.command("run", context_settings={"ignore_unknown_options": True})
@server_option
@cluster_option
@key_option
@metrics_options
@tracing_option
@profiling_option
@post_mortem_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run_cmd(
    server: str | None,
    cluster: str | None,
    ingest_key: str | None,
    metrics_keep: re.Pattern[str] | None,
    metrics_drop: re.Pattern[str] | None,
    tracing: bool,
    profiling: bool,
    post_mortem: float | None,
    command: tuple[str, ...],
) -> None:
    """Run a Ray program (`raysight run -- python app.py`) with its events, logs, metrics and traces going to
    raysight.

    Starts a background server on the default data dir when none answers. Exits with the program's exit code.
    """
    url = ensure_server(server)
    families = Families(metrics_keep, metrics_drop)
    more = post_mortem_env(post_mortem)
    sys.exit(run_program(list(command), url, cluster, ingest_key, families, tracing, profiling, more))


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until_quiet(client: Client, quiet_s: float = 2.0, timeout_s: float = 30.0) -> None:
    """Wait until the server has received no event for ``quiet_s`` (Ray flushes about every second) and has folded
    everything it acknowledged; TimeoutError when that has not happened within ``timeout_s``."""
    last, since, deadline = -1, time.monotonic(), time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        info = client.info()  # cheap: no query of the store
        received = info["events_received"]
        if received != last or info["ingest_backlog"]["batches"]:
            last, since = received, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return
        time.sleep(0.25)
    raise TimeoutError(
        f"the server was still receiving or folding events after {timeout_s:.0f} s "
        f"(received {last}; `raysight doctor` shows its backlog)"
    )


DEMO_START_TIMEOUT_S = 60


@click.command("demo")
@click.option(
    "--data-dir", type=click.Path(path_type=Path), default=None, help="Keep the store here (default: a temp dir)."
)
@click.option("--port", default=0, help="Port for the demo server (default: a free one).")
@click.option("--exit", "exit_after", is_flag=True, help="Stop after printing instead of serving until Ctrl-C.")
def demo_cmd(data_dir: Path | None, port: int, exit_after: bool) -> None:
    """Start a server, run a sample Ray workload through it, and show what raysight saw."""
    data_dir = data_dir or Path(tempfile.mkdtemp(prefix="raysight-demo-"))
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "raysight", "server", "--port", str(port), "--data-dir", str(data_dir)],
        stdin=subprocess.DEVNULL,
    )
    try:
        with Client(url) as client:
            deadline = time.monotonic() + DEMO_START_TIMEOUT_S
            while not client.ping():
                if server.poll() is not None or time.monotonic() > deadline:
                    raise click.ClickException(f"the demo server did not start on port {port}")
                time.sleep(0.1)
            click.echo(
                "Running the sample workload (nested tasks, actors, a failing task, a retried task, "
                "a crashed and restarted actor, a killed actor)…"
            )
            code = run_program([sys.executable, "-m", "raysight.demo_workload"], url, "demo", None)
            click.echo(f"Workload exited with code {code}; waiting for Ray's last events…")
            try:
                wait_until_quiet(client)
            except TimeoutError as exc:
                click.echo(f"raysight: {exc}; showing what has arrived", err=True)
            show_demo(client)
        tries = [
            f"raysight list tasks --server {url} --filter state=FAILED",
            f"ray list actors --address {url}",
            f"raysight errors --server {url}   (then: raysight errors show ID)",
        ]
        if exit_after:  # its server stops with it: what serves the store again comes first
            click.echo(f"\nServer: stops with the demo (--exit)   data: {data_dir}")
            serve = f"raysight server --data-dir {shlex.quote(str(data_dir))} --port {port}"
            tries.insert(0, f"{serve}   (serves it again; then, in another shell:)")
        else:
            click.echo(f"\nServer: {url}   data: {data_dir}")
        click.echo("Try:  " + "\n      ".join(tries))
        if not exit_after:
            click.echo("Serving until Ctrl-C.")
            server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.terminate()
        server.wait(timeout=30)


def show_demo(client: Client) -> None:
    session = client.sessions()[0]
    render.heading(
        f"Session {session['session']} ({session['label']}): {session['nodes']} node(s), "
        f"{session['jobs']} job(s), {session['tasks']} task attempts, {session['failures']} failed"
    )
    summary = client.summary("tasks")
    render.table(render.summary_rows(summary["summary"]), title="Tasks by function")
    failed = client.list("tasks", filters=["state=FAILED"], detail=True)["rows"]
    render.table(
        failed,
        title="Failed attempts",
        columns=["task_id", "attempt_number", "name", "error_type", "state_inferred", "error_message"],
    )
    actors = client.list("actors", detail=True)["rows"]
    render.table(
        actors, title="Actors", columns=["actor_id", "class_name", "name", "state", "num_restarts", "death_message"]
    )
    inferred = client.list("tasks", filters=["state_inferred=true"], detail=True)["rows"]
    render.table(
        inferred,
        title="States raysight inferred (Ray never sent them)",
        columns=["task_id", "attempt_number", "name", "state", "inferred_reason"],
    )
    groups = client.errors()["groups"]
    render.table([errors_row(g) for g in groups], title="What went wrong, by cause", columns=ERRORS_COLUMNS)
