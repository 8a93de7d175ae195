"""A server in the background: `raysight server --detach` (and `raysight run`, when none answers) and
`raysight server stop`, through a pidfile and a log in the data dir; and what starting and stopping any of raysight's
own processes in the background takes (`raysight start` and `raysight stop` use it too)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
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
    with exclusive(data_dir / f"{PIDFILE}.lock"):  # two starts at once: the second sees the first's server
        return _start(host, port, data_dir, args, env)


@contextlib.contextmanager
def exclusive(path: Path) -> Iterator[None]:
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
    proc, log_start = spawn(command, log_path, child_env)
    _write_pidfile(pidfile, proc.pid, host, port)  # from now on, `stop` can end it (Ctrl-C here leaves it running)
    url = f"http://{_reachable(host)}:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _answers_as(url, child_env.get(ENV_TOKEN) or _saved_token(data_dir), proc.pid):
        if proc.poll() is not None:
            if read_pid(pidfile) == proc.pid:
                pidfile.unlink()
            raise click.ClickException(
                f"the server exited at start (code {proc.returncode}); from {log_path}:\n"
                + "\n".join(last_words(log_path, log_start))
            )
        if time.monotonic() > deadline:
            raise click.ClickException(
                f"the server (pid {proc.pid}) still does not answer at {url} after {START_TIMEOUT_S} s; see "
                f"{log_path}; `raysight server stop --data-dir {data_dir}` ends it"
            )
        time.sleep(0.1)
    return proc.pid


def spawn(command: Sequence[str], log_path: Path, env: Mapping[str, str]) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``command`` in the background: in a session of its own (no terminal, so no Ctrl-C or hang-up reaches it),
    its output appended to ``log_path`` (for its user only). The process, and where its output starts in the log."""
    with open(os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab") as log:
        log_start = log_path.stat().st_size
        proc = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True
        )
    return proc, log_start


def last_words(log_path: Path, start: int, lines: int = 3) -> list[str]:
    """The last non-blank ``lines`` a process wrote to ``log_path`` from offset ``start`` on."""
    said = log_path.read_bytes()[start:].decode(errors="replace").splitlines()
    return [line for line in said if line.strip()][-lines:]


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


def command_line(pid: int) -> list[str] | None:
    """Process ``pid``'s command line, read from /proc; None once it has ended (a zombie's is empty) or where it
    cannot be read."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return None
    return args.removesuffix("\0").split("\0") if args else None


def raysight_args(pid: int) -> list[str] | None:
    """What follows `python -m raysight` in process ``pid``'s command line; None when it runs no raysight command
    (read from /proc: a pid the system has since given to another program is not raysight's)."""
    args = command_line(pid)
    return args[3:] if args is not None and args[1:3] == ["-m", "raysight"] else None


def is_server_of(pid: int, data_dir: Path) -> bool:
    """Whether process ``pid`` is a `raysight server` on ``data_dir`` as :func:`start_detached` starts them. A zombie
    is not."""
    args = raysight_args(pid)
    if not args or args[0] != "server" or "--data-dir" not in args[:-1]:
        return False
    return args[args.index("--data-dir") + 1] == str(data_dir)


def signal_and_wait(pids: Iterable[int], alive: Callable[[int], bool], timeout_s: float, sig: int) -> list[int]:
    """Send ``sig`` to each of ``pids`` that is still ``alive`` (the process the caller means: checked first, so that
    a pid the system gave to another program is left alone), then wait until none is; those alive after
    ``timeout_s``."""
    waiting = [pid for pid in pids if alive(pid)]
    for pid in waiting:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    deadline = time.monotonic() + timeout_s
    while (waiting := [pid for pid in waiting if alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return waiting


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
    if signal_and_wait([pid], lambda p: is_server_of(p, data_dir), STOP_TIMEOUT_S, signal.SIGTERM):
        raise click.ClickException(
            f"the server (pid {pid}) still runs {STOP_TIMEOUT_S} s after SIGTERM (folding what it acknowledged?); "
            f"run `raysight server stop` again later, or `kill -9 {pid}`"
        )
    pidfile.unlink(missing_ok=True)
    return pid
