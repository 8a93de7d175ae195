"""A server in the background: `raysight server --detach` (and `raysight run`, when none answers) and
`raysight server stop`, through a pidfile and a log in the data dir."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import click
import orjson

from raysight.client import Client
from raysight.errors import RaysightError
from raysight.settings import ENV_TOKEN, SECRETS_FILE

PIDFILE = "server.pid"
LOGFILE = "server.log"
START_TIMEOUT_S = 60  # a store with a large unfolded journal takes a while to open
STOP_TIMEOUT_S = 30
_SET_BY_DETACH = ("host", "port", "data_dir", "detach")  # what start_detached passes itself, or must not


def child_args(command: click.Command, params: Mapping[str, Any]) -> tuple[list[str], dict[str, str]]:
    """The options a detached server is given: those read from an environment variable (the secrets) go in its
    environment, which only its user can read, not on its command line, which `ps` shows to everyone."""
    args: list[str] = []
    env: dict[str, str] = {}
    for param in command.params:
        value = params.get(param.name or "")
        if not isinstance(param, click.Option) or param.name in _SET_BY_DETACH or value in (None, ()):
            continue
        if param.is_flag and param.secondary_opts:  # --x/--no-x
            args.append(param.opts[0] if value else param.secondary_opts[0])
            continue
        if value is False:
            continue
        values = list(value) if param.multiple else [value]
        if isinstance(param.envvar, str):
            env[param.envvar] = " ".join(map(str, values))
        elif param.is_flag:
            args.append(param.opts[0])
        else:
            args += [arg for v in values for arg in (param.opts[0], str(v))]
    return args, env


def start_detached(
    host: str, port: int, data_dir: Path, args: Sequence[str] = (), env: Mapping[str, str] | None = None
) -> int:
    """Start a server in the background and return its pid once it answers (with its token, beyond loopback).

    Refuses when this data dir's server already runs; fails with the server's last words when it exits before
    answering (its port or its store taken). Another server answering on the port does not count as this one.
    """
    data_dir = data_dir.resolve()
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    with _exclusive(data_dir / f"{PIDFILE}.lock"):  # two starts at once: the second sees the first's server
        return _start(host, port, data_dir, args, env)


@contextlib.contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (waiting for another holder) for the block."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _start(host: str, port: int, data_dir: Path, args: Sequence[str], env: Mapping[str, str] | None) -> int:
    pidfile, log_path = data_dir / PIDFILE, data_dir / LOGFILE
    running = read_pid(pidfile)
    if running is not None and is_server_of(running, data_dir):
        raise click.ClickException(
            f"a raysight server (pid {running}) already runs on {data_dir}; "
            f"`raysight server stop --data-dir {data_dir}` ends it"
        )
    command = [sys.executable, "-m", "raysight", "server", "--host", host, "--port", str(port)]
    command += ["--data-dir", str(data_dir), *args]
    child_env = {**os.environ, **(env or {})}
    with open(os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab") as log:
        log_start = log_path.stat().st_size
        proc = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=child_env,
            start_new_session=True,
        )
    _write_pidfile(pidfile, proc.pid, host, port)  # from now on, `stop` can end it (Ctrl-C here leaves it running)
    url = f"http://{_reachable(host)}:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _answers_as(url, child_env.get(ENV_TOKEN) or _saved_token(data_dir), proc.pid):
        if proc.poll() is not None:
            if read_pid(pidfile) == proc.pid:
                pidfile.unlink()
            said = log_path.read_bytes()[log_start:].decode(errors="replace").splitlines()
            last_words = [line for line in said if line.strip()][-3:]
            raise click.ClickException(
                f"the server exited at start (code {proc.returncode}); from {log_path}:\n" + "\n".join(last_words)
            )
        if time.monotonic() > deadline:
            raise click.ClickException(
                f"the server (pid {proc.pid}) still does not answer at {url} after {START_TIMEOUT_S} s; see "
                f"{log_path}; `raysight server stop --data-dir {data_dir}` ends it"
            )
        time.sleep(0.1)
    return proc.pid


def _reachable(host: str) -> str:
    """Where to reach a server bound to ``host`` from this machine."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def _answers_as(url: str, token: str | None, pid: int) -> bool:
    with Client(url, token=token, timeout=2) as client:
        try:
            return bool(client.info().get("pid") == pid)
        except RaysightError:  # not up yet, or another server on the port
            return False


def _saved_token(data_dir: Path) -> str | None:
    """The read token a server beyond loopback saved when none was given (`raysight server` makes one)."""
    try:
        return orjson.loads((data_dir / SECRETS_FILE).read_bytes()).get("token")  # type: ignore[no-any-return]
    except (OSError, orjson.JSONDecodeError):
        return None


def _write_pidfile(pidfile: Path, pid: int, host: str, port: int) -> None:
    fd = os.open(pidfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"{pid}\n{host}\n{port}\n")


def read_pid(pidfile: Path) -> int | None:
    try:
        return int(pidfile.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def is_server_of(pid: int, data_dir: Path) -> bool:
    """Whether process ``pid`` is a `raysight server` on ``data_dir`` as :func:`start_detached` starts them (read from
    /proc: a pid the system has since given to another program is not this server). A zombie is not."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return False
    if args[1:4] != ["-m", "raysight", "server"] or "--data-dir" not in args[:-1]:
        return False
    return args[args.index("--data-dir") + 1] == str(data_dir)


def stop_detached(data_dir: Path) -> int:
    """SIGTERM the server the pidfile names, once /proc shows it is this data dir's, and wait for its end; its pid."""
    data_dir = data_dir.resolve()
    pidfile = data_dir / PIDFILE
    pid = read_pid(pidfile)
    if pid is None:
        raise click.ClickException(f"no detached raysight server on {data_dir}: no pid in {pidfile}")
    if not Path("/proc/self/cmdline").exists():
        raise click.ClickException(f"this system has no /proc to check that pid {pid} is raysight; end it yourself")
    if not is_server_of(pid, data_dir):
        pidfile.unlink()
        raise click.ClickException(
            f"pid {pid} is not a raysight server of {data_dir} (it has ended, or the system gave its pid to another "
            f"program): not signalled; removed the stale {pidfile}"
        )
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while is_server_of(pid, data_dir):
        if time.monotonic() > deadline:
            raise click.ClickException(
                f"the server (pid {pid}) still runs {STOP_TIMEOUT_S} s after SIGTERM (folding what it acknowledged?); "
                f"run `raysight server stop` again later, or `kill -9 {pid}`"
            )
        time.sleep(0.1)
    pidfile.unlink(missing_ok=True)
    return pid
