"""`raysight server`: run the server in the foreground, or detached with a pidfile; `raysight server stop`."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

import click

from raysight import units
from raysight.cli.common import Checked
from raysight.cli.detach import child_args, start_detached, stop_detached
from raysight.config import (
    DEFAULT_HOST,
    DEFAULT_MAX_BODY,
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_MAX_EVENTS,
    DEFAULT_MAX_SAMPLES,
    DEFAULT_MEMORY_LIMIT,
    DEFAULT_PORT,
    DEFAULT_TIMEOUT_S,
    ENV_ADMIN_TOKEN,
    ENV_INGEST_KEY,
    ENV_TOKEN,
    Limits,
    QueryLimits,
    default_data_dir,
    is_loopback,
)
from raysight.server.auth import Secrets
from raysight.server.forward import Forwarding
from raysight.store.metric_downsample import Downsampling
from raysight.store.metric_retention import DEFAULT_MAX_SERIES, MetricsBounds
from raysight.store.retention import Retention, parse_duration, parse_size
from raysight.store.trace_sampling import TailSampling

SECONDS = click.FloatRange(min=0, min_open=True)
LOCK_FILE = "server.lock"  # held by the server running on the data dir, and naming it
HOLDER_WAIT_S = 1.0


# A size as DuckDB's memory_limit takes it (512MB, 2GB, 1.5GiB), checked here rather than failing at start
MEMORY_SIZE = Checked(parse_size, "SIZE", "is not a memory size such as 512MB or 2GB")


def serve(
    host: str,
    port: int,
    data_dir: Path,
    *,
    max_body: int,
    max_events: int,
    memory_limit: str,
    given: Secrets,
    allowed_hosts: tuple[str, ...],
    limits: Limits,
    retention: Retention,
    metrics: MetricsBounds,
    forwarding: Forwarding,
    trace_sampling: TailSampling,
    query_limits: QueryLimits,
) -> None:
    """Run the server in this process, once the data dir is this server's alone, saying where it listens once it
    does. ``given``: the secrets given (None where not), used beyond loopback only."""
    from raysight.server.app import create_app
    from raysight.server.auth import load_or_create
    from raysight.server.guard import LOOPBACK_HOSTS, host_name, url_host
    from raysight.server.listen import listen

    if allowed_hosts and not is_loopback(host):
        raise click.UsageError("--allowed-host is for a loopback --host; beyond loopback the tokens decide")
    os.umask(0o077)  # what the server writes (store, journal, secrets) is for its user only
    private_data_dir(data_dir)
    with holding(data_dir):
        secrets = Secrets.loopback()
        if not is_loopback(host):
            try:
                secrets = load_or_create(data_dir, given.token, given.ingest_key, given.admin_token)
            except ValueError as exc:
                raise click.UsageError(str(exc)) from None
        banner = f"raysight listening on http://{url_host(host)}:{port}\ndata in {data_dir}"
        if secrets.token:
            banner += (
                f"\nreads need the token in {data_dir / 'secrets.json'} (RAYSIGHT_TOKEN), deleting and reindexing its "
                "admin_token (RAYSIGHT_ADMIN_TOKEN); ingest URLs need its ingest_key (`raysight env --ingest-key …`)"
            )
        app = create_app(
            data_dir,
            secrets=secrets,
            # a loopback bind serves loopback names, its own address (127.0.0.2, say) and --allowed-host
            allowed_hosts=LOOPBACK_HOSTS | {host_name(h) for h in (url_host(host), *allowed_hosts)}
            if is_loopback(host)
            else None,
            max_body=max_body,
            max_events=max_events,
            memory_limit=memory_limit,
            log_retention=retention,
            metrics_bounds=metrics,
            forwarding=forwarding,
            trace_sampling=trace_sampling,
            query_limits=query_limits,
        )
        listen(app, host, port, limits, banner)


@contextlib.contextmanager
def holding(data_dir: Path) -> Iterator[None]:
    """Hold ``data_dir`` for this process while the block runs: an exclusive lock on its ``server.lock`` (which the
    system lets go however the process ends), the file naming this process. A data dir another server holds is
    refused, naming that server's pid."""
    fd = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise click.ClickException(
                f"a raysight server (pid {_holder(fd)}) already runs on {data_dir}; stop it, or give this one "
                "another --data-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)  # (lets the lock go)


def _holder(fd: int) -> str:
    """The pid a held lock file names: its holder writes it as soon as it has the lock, so a moment may pass first."""
    deadline = time.monotonic() + HOLDER_WAIT_S
    while not (pid := os.pread(fd, 32, 0).decode(errors="replace").strip()) and time.monotonic() < deadline:
        time.sleep(0.01)
    return pid or "unknown"


def private_data_dir(data_dir: Path) -> None:
    """Make the data dir 0700 when it is raysight's (new, or holding a store made by another umask); a directory of
    other things (``--data-dir ~``) keeps its mode, with a warning when others may look in (the files stay 0600)."""
    from raysight.store.store import DB_FILE

    if not data_dir.exists() or (data_dir / DB_FILE).exists() or not any(data_dir.iterdir()):
        data_dir.mkdir(parents=True, exist_ok=True)
        data_dir.chmod(0o700)
    elif data_dir.stat().st_mode & 0o077:
        click.echo(f"warning: {data_dir} holds other files, so its mode is left as it is; others may list it", err=True)


@click.group("server", invoke_without_command=True)
@click.option(
    "--host",
    default=DEFAULT_HOST,
    show_default=True,
    help="Address to bind. Anything but loopback turns on the read token and the ingest key.",
)
@click.option("--port", default=DEFAULT_PORT, show_default=True)
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Where the store lives [env RAYSIGHT_DATA; default ~/.local/share/raysight].",
)
@click.option("--max-body", default=DEFAULT_MAX_BODY, show_default=True, help="Largest ingest body, in bytes.")
@click.option(
    "--max-events",
    default=DEFAULT_MAX_EVENTS,
    show_default=True,
    help="Most events in one ingest body (Ray sends up to RAY_DASHBOARD_AGGREGATOR_AGENT_MAX_EVENT_SEND_BATCH_SIZE, "
    "1,000 by default); more is refused with 413.",
)
@click.option(
    "--memory-limit",
    type=MEMORY_SIZE,
    default=DEFAULT_MEMORY_LIMIT,
    show_default=True,
    help="The store's (DuckDB's) memory limit, e.g. 512MB or 2GB.",
)
@click.option("--token", envvar=ENV_TOKEN, default=None, help="Read token (when bound beyond loopback).")
@click.option("--ingest-key", envvar=ENV_INGEST_KEY, default=None, help="Write-only ingest key (idem).")
@click.option(
    "--admin-token", envvar=ENV_ADMIN_TOKEN, default=None, help="Token for deleting sessions and reindexing (idem)."
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help="On loopback, serve this Host name too (a proxy's), beside localhost, 127.0.0.1 and [::1]. Repeatable.",
)
@click.option(
    "--header-timeout",
    type=SECONDS,
    default=Limits.header_timeout_s,
    show_default=True,
    help="Seconds a client has to send a request's headers.",
)
@click.option(
    "--body-timeout",
    type=SECONDS,
    default=Limits.body_timeout_s,
    show_default=True,
    help="Seconds a client has to send a request's body.",
)
@click.option(
    "--max-connections",
    type=click.IntRange(min=1),
    default=Limits.max_connections,
    show_default=True,
    help="Connections held at once; more are answered 503 and closed.",
)
@click.option(
    "--log-retention",
    type=Checked(parse_duration, "AGE"),
    default=None,
    metavar="AGE",
    help="Drop log lines older than this (30d, 12h, 90m) [default: keep every line]; a marker says what went.",
)
@click.option(
    "--log-max-size",
    type=Checked(parse_size, "SIZE"),
    default=None,
    metavar="SIZE",
    help="Drop the oldest log lines past this much text (500MB, 50GB) [default: keep every line]; idem.",
)
@click.option(
    "--metrics-max-series",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_SERIES,
    show_default=True,
    help="Series a session may hold; a scrape's new series past it are refused, counted by `raysight doctor`.",
)
@click.option(
    "--metrics-retention",
    type=Checked(parse_duration, "AGE"),
    default=None,
    metavar="AGE",
    help="Drop metric samples older than this (15d, 12h) [default: keep every sample]; a marker says what went.",
)
@click.option(
    "--metrics-max-size",
    type=Checked(parse_size, "SIZE"),
    default=None,
    metavar="SIZE",
    help="Drop the oldest metric samples past this much storage (500MB, 20GB) [default: keep every sample]; idem.",
)
@click.option(
    "--metrics-downsample",
    type=Checked(Downsampling.parse, "RAW,MINUTES"),
    default="7d,90d",
    show_default=True,
    metavar="RAW,MINUTES",
    help="Metric samples older than RAW become one a minute, older than MINUTES one each 10 minutes; or off.",
)
@click.option(
    "--query-max-samples",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_SAMPLES,
    show_default=True,
    help="Samples one PromQL query may hold (those loaded, its expressions' points at each step, 128 for each series "
    "found), as Prometheus's --query.max-samples; more is refused (422).",
)
@click.option(
    "--query-timeout",
    type=SECONDS,
    default=DEFAULT_TIMEOUT_S,
    show_default=True,
    help="Seconds one PromQL query may run, as Prometheus's --query.timeout; a longer one stops (503).",
)
@click.option(
    "--query-max-concurrency",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_CONCURRENCY,
    show_default=True,
    help="PromQL queries evaluated at once, as Prometheus's --query.max-concurrency; the others wait their turn "
    "within their --query-timeout. Each may hold up to --query-max-samples.",
)
@click.option(
    "--traces-forward",
    envvar="RAYSIGHT_TRACES_FORWARD",
    metavar="URL",
    help="Send the spans received on to this OTLP/HTTP endpoint too (Jaeger, Tempo, a Collector…; /v1/traces is "
    "appended) [env RAYSIGHT_TRACES_FORWARD].",
)
@click.option(
    "--traces-forward-header",
    multiple=True,
    metavar="NAME=VALUE",
    help="A header for --traces-forward (an API key, say); repeatable.",
)
@click.option(
    "--traces-store/--no-traces-store",
    default=True,
    show_default=True,
    help="Keep the spans received; --no-traces-store with --traces-forward only forwards them.",
)
@click.option(
    "--traces-keep",
    type=click.FloatRange(0, 1),
    default=1.0,
    show_default=True,
    help="Tail sampling: the fraction of complete traces kept whole; traces with a failed span, or as slow as "
    "--traces-keep-slow, are always kept.",
)
@click.option(
    "--traces-keep-slow",
    type=Checked(units.duration_ns, "TIME"),
    default=None,
    metavar="TIME",
    help="With --traces-keep: always keep traces this long or longer (250ms, 1.5s, 2m).",
)
@click.option("--detach", is_flag=True, help="Run in the background; `raysight server stop` ends it.")
@click.pass_context
def server_cmd(
    ctx: click.Context,
    host: str,
    port: int,
    data_dir: Path | None,
    max_body: int,
    max_events: int,
    memory_limit: str,
    token: str | None,
    ingest_key: str | None,
    admin_token: str | None,
    allowed_hosts: tuple[str, ...],
    header_timeout: float,
    body_timeout: float,
    max_connections: int,
    log_retention: str | None,
    log_max_size: str | None,
    metrics_max_series: int,
    metrics_retention: str | None,
    metrics_max_size: str | None,
    metrics_downsample: str,
    query_max_samples: int,
    query_timeout: float,
    query_max_concurrency: int,
    traces_forward: str | None,
    traces_forward_header: tuple[str, ...],
    traces_store: bool,
    traces_keep: float,
    traces_keep_slow: str | None,
    detach: bool,
) -> None:
    """Run the raysight server: Ray event ingest, the history store, raysight's and Ray's APIs."""
    if ctx.invoked_subcommand:
        return
    if not traces_store and not traces_forward:
        raise click.UsageError("--no-traces-store keeps no span: give --traces-forward URL to send them somewhere")
    headers = tuple(map(_header, traces_forward_header))  # (checked before a detached server starts)
    data_dir = data_dir or default_data_dir()
    if detach:
        pid = start_detached(host, port, data_dir, *child_args(ctx.command, ctx.params))
        click.echo(f"raysight server running in the background (pid {pid}) on http://{host}:{port}, data in {data_dir}")
        return
    serve(
        host,
        port,
        data_dir,
        max_body=max_body,
        max_events=max_events,
        memory_limit=memory_limit,
        given=Secrets(token, ingest_key, admin_token),
        allowed_hosts=allowed_hosts,
        limits=Limits(header_timeout, body_timeout, max_connections),
        retention=Retention(log_retention, log_max_size),
        metrics=MetricsBounds(
            metrics_max_series, Retention(metrics_retention, metrics_max_size), Downsampling.parse(metrics_downsample)
        ),
        forwarding=Forwarding(traces_forward, headers, traces_store),
        trace_sampling=TailSampling(traces_keep, units.duration_ns(traces_keep_slow) if traces_keep_slow else None),
        query_limits=QueryLimits(query_max_samples, query_timeout, query_max_concurrency),
    )


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise click.BadParameter(f"{text!r} is not NAME=VALUE", param_hint="--traces-forward-header")
    return name.strip(), value


@server_cmd.command("stop")
@click.option("--data-dir", type=click.Path(path_type=Path), default=None, help="The detached server's data dir.")
def stop_cmd(data_dir: Path | None) -> None:
    """Stop the server started with --detach on this data dir (its pidfile's pid, once checked to be that server)."""
    click.echo(f"stopped raysight server (pid {stop_detached(data_dir or default_data_dir())})")
