"""`raysight server`: run the server in the foreground, or detached with a pidfile; `raysight server stop`. Its
options are made from the settings table (``raysight/settings.py``'s ``SERVER``)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import click

from raysight.cli.common import Checked
from raysight.cli.detach import child_args, start_detached, stop_detached
from raysight.config import is_loopback
from raysight.settings import (
    DB_FILE,
    ENV_ADMIN_TOKEN,
    ENV_TOKEN,
    LOCK_FILE,
    SECRETS_FILE,
    SERVER,
    Setting,
    Settings,
    default_data_dir,
)

F = TypeVar("F", bound=Callable[..., Any])
HOLDER_WAIT_S = 1.0


def serve(settings: Settings) -> None:
    """Run the server in this process, once the data dir is this server's alone, saying where it listens once it
    does; the secrets given are used beyond loopback only, the Host names given on loopback only."""
    from raysight.server.app import create_app
    from raysight.server.auth import Secrets, load_or_create
    from raysight.server.guard import LOOPBACK_HOSTS, host_name, url_host
    from raysight.server.listen import listen

    host, data_dir, given = settings.host, settings.data_dir, settings.secrets
    if settings.allowed_hosts and not is_loopback(host):
        raise click.UsageError("--allowed-host is for a loopback --host; beyond loopback the tokens decide")
    os.umask(0o077)  # what the server writes (store, journal, secrets) is for its user only
    private_data_dir(data_dir)
    with holding(data_dir):
        secrets, saved = Secrets.loopback(), None
        reaching = settings.reaches.debug or settings.reaches.profiling  # (the admin token's, on loopback too)
        if reaching or not is_loopback(host):
            try:
                saved = load_or_create(data_dir, given.token, given.ingest_key, given.admin_token)
            except ValueError as exc:
                raise click.UsageError(str(exc)) from None
            if not is_loopback(host):
                secrets = saved
        banner = f"raysight listening on http://{url_host(host)}:{settings.port}\ndata in {data_dir}"
        if secrets.token:
            banner += (
                f"\nreads need the token in {data_dir / SECRETS_FILE} ({ENV_TOKEN}), deleting and reindexing its "
                f"admin_token ({ENV_ADMIN_TOKEN}); ingest URLs need its ingest_key (`raysight env --ingest-key …`)"
            )
        if saved is not None and reaching:
            allowed = " and ".join(
                what
                for what, on in (("debugging", settings.reaches.debug), ("profiling", settings.reaches.profiling))
                if on
            )
            banner += (
                f"\n{allowed} allowed: `raysight debug attach` and `raysight profile stack|cpu|memory` need the "
                f"admin_token in {data_dir / SECRETS_FILE} ({ENV_ADMIN_TOKEN}), which the CLI reads from there on this "
                "machine"
            )
        # a loopback bind serves loopback names, its own address (127.0.0.2, say) and --allowed-host
        names = (url_host(host), *(settings.allowed_hosts or ()))
        served = LOOPBACK_HOSTS | {host_name(name) for name in names} if is_loopback(host) else None
        token = saved.admin_token if saved is not None and reaching else None
        app = create_app(
            settings.replace(
                secrets=secrets, allowed_hosts=served, reaches=replace(settings.reaches, reach_token=token)
            )
        )
        listen(app, host, settings.port, settings.http, banner)


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
    if not data_dir.exists() or (data_dir / DB_FILE).exists() or not any(data_dir.iterdir()):
        data_dir.mkdir(parents=True, exist_ok=True)
        data_dir.chmod(0o700)
    elif data_dir.stat().st_mode & 0o077:
        click.echo(f"warning: {data_dir} holds other files, so its mode is left as it is; others may list it", err=True)


def _option(setting: Setting) -> Callable[[F], F]:
    """The click option of one setting: its help, its default shown, its environment variable shown."""
    if setting.kind is bool:
        flags = f"--{setting.name}/--no-{setting.name}"
        return click.option(flags, default=setting.default, show_default=True, help=setting.help)
    kind: click.ParamType
    if setting.parse is not None:
        kind = Checked(setting.parse, setting.metavar or "TEXT")
    elif setting.kind is int:
        kind = click.IntRange(*setting.bounds)
    elif setting.kind is float:
        kind = click.FloatRange(*setting.bounds)
    elif setting.kind is Path:
        kind = click.Path(path_type=Path)
    else:
        kind = click.STRING
    return click.option(
        f"--{setting.name}",
        type=kind,
        default=setting.default,
        show_default=setting.shown or setting.default is not None,
        envvar=setting.env,
        show_envvar=setting.env is not None,
        metavar=setting.metavar,
        multiple=setting.repeat,
        help=setting.help,
    )


def setting_options(fn: F) -> F:
    """One option for each setting of ``SERVER``, in its order."""
    for setting in reversed(SERVER):
        fn = _option(setting)(fn)
    return fn


@click.group("server", invoke_without_command=True)
@setting_options
@click.option("--detach", is_flag=True, help="Run in the background; `raysight server stop` ends it.")
@click.pass_context
def server_cmd(ctx: click.Context, detach: bool, **options: Any) -> None:
    """Run the raysight server: Ray event ingest, the history store, raysight's and Ray's APIs."""
    if ctx.invoked_subcommand:
        return
    settings = Settings.from_options(options)
    if not settings.forwarding.store and not settings.forwarding.url:
        raise click.UsageError("--no-traces-store keeps no span: give --traces-forward URL to send them somewhere")
    if detach:
        pid = start_detached(settings.host, settings.port, settings.data_dir, *child_args(ctx.command, ctx.params))
        click.echo(
            f"raysight server running in the background (pid {pid}) on http://{settings.host}:{settings.port}, "
            f"data in {settings.data_dir}"
        )
        return
    serve(settings)


@server_cmd.command("stop")
@click.option("--data-dir", type=click.Path(path_type=Path), default=None, help="The detached server's data dir.")
def stop_cmd(data_dir: Path | None) -> None:
    """Stop the server started with --detach on this data dir (its pidfile's pid, once checked to be that server)."""
    click.echo(f"stopped raysight server (pid {stop_detached(data_dir or default_data_dir())})")
