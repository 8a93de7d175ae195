"""Helpers for tests that run real Ray: a real raysight server in a subprocess, and Ray programs pointed at it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from raysight import wire
from raysight.cli.node import unix_session
from raysight.cli.run import free_port, wait_until_quiet
from raysight.client import Client
from raysight.settings import ENV_SERVER

JSON = {"Content-Type": "application/json"}  # what Ray's aggregator and raysight's own posts send


class ServerProcess:
    """`raysight server` on a loopback port, started and stopped by PID; as a context manager, running within the
    block."""

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        prefix: Sequence[str] = (),
        start_timeout_s: float = 30,
        options: Sequence[str] = (),
        python: str | Path = sys.executable,
    ) -> None:
        """``prefix`` runs the server under another command (``taskset -c 0`` for the benchmarks); ``options`` are
        more `raysight server` options; ``python`` the interpreter (another environment's) that runs it."""
        self.data_dir, self.port, self.python = data_dir, port or free_port(), python
        self.url = f"http://127.0.0.1:{self.port}"
        self.prefix, self.start_timeout_s, self.options = list(prefix), start_timeout_s, list(options)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ServerProcess:
        self.proc = subprocess.Popen(
            [
                *self.prefix,
                str(self.python),
                "-m",
                "raysight",
                "server",
                "--port",
                str(self.port),
                "--data-dir",
                str(self.data_dir),
                *self.options,
            ],
            stdout=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
        )
        with Client(self.url, timeout=2) as client:
            deadline = time.monotonic() + self.start_timeout_s
            while not client.ping():
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise AssertionError("server did not start")
                time.sleep(0.1)
        return self

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            self.proc.wait(timeout=30)

    def client(self) -> Client:
        return Client(self.url)

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A local HTTP server of ``handler`` (a peer a test stands in for: a backend spans go to, Ray's dashboard) on a
    free loopback port, on a thread: its URL, within the block."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def wait_folded(server: str | httpx.Client, timeout_s: float = 30) -> None:
    """Wait until a server (its URL, or an HTTP client of it: a TestClient too) has folded every batch it
    acknowledged, so that reads see it: ingest answers once a batch is journalled, folding follows."""
    with contextlib.ExitStack() as stack:
        http = server
        if isinstance(http, str):
            http = stack.enter_context(httpx.Client(base_url=http, timeout=5, trust_env=False))
        deadline = time.monotonic() + timeout_s
        while http.get(wire.PING).json()["ingest_backlog"]["batches"]:
            assert time.monotonic() < deadline, "the server did not fold what it acknowledged"
            time.sleep(0.05)


def cli(server: ServerProcess, *args: str) -> str:
    """What `raysight ARGS… --server URL` prints, run in-process; it must succeed."""
    from click.testing import CliRunner

    from raysight.cli import main

    result = CliRunner().invoke(main, [*args, "--server", server.url])
    assert result.exit_code == 0, result.output
    return result.output


def raysight_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`raysight ARGS…` as a user runs it in a shell beside the cluster."""
    command = [sys.executable, "-m", "raysight", *args]
    return subprocess.run(command, env=driver_env(), capture_output=True, text=True, timeout=timeout)


def agent_command(server_url: str, ray_dir: Path, state_dir: Path, *options: str) -> list[str]:
    """`raysight agent` for the Ray sessions under ``ray_dir``, its checkpoint in ``state_dir``."""
    return [
        *(sys.executable, "-m", "raysight", "agent", "--server", server_url),
        *("--ray-dir", str(ray_dir), "--state-dir", str(state_dir), *options),
    ]


def peak_rss_mb(pid: int) -> float:
    """A process's peak resident memory so far (VmHWM), in MB."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))) / 1024


def ray_run(
    url: str,
    cluster: str,
    *program: str,
    timeout: float = 240,
    expect_code: int = 0,
    env: dict[str, str] | None = None,
    options: Sequence[str] = (),
) -> None:
    """`raysight run --server URL --cluster NAME -- python …` (exiting with ``expect_code``; ``env`` added to its
    environment), then wait until Ray's last events are in."""
    env = {**{k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", ENV_SERVER)}, **(env or {})}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "raysight",
            "run",
            "--server",
            url,
            "--cluster",
            cluster,
            *options,
            "--",
            sys.executable,
            *program,
        ],
        timeout=timeout,
        env=env,
        cwd=Path(__file__).parent.parent,  # where `-m tests.ray_programs.…` finds its program
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert done.returncode == expect_code, done.stderr.decode(errors="replace")[-3000:]
    with Client(url) as client:
        wait_until_quiet(client)


def without_ray_settings() -> dict[str, str]:
    """This environment without Ray's or raysight's variables: a shell a user opens beside the cluster."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "RAYSIGHT_"))}


@contextlib.contextmanager
def replayed(data_dir: Path, cluster: str, *program: str, expect_code: int = 0) -> Iterator[ServerProcess]:
    """A Ray program run under `raysight run` (as :func:`ray_run`) into a server on ``data_dir``, then a server
    started anew on what that one recorded: what a user reads after the cluster is gone."""
    with ServerProcess(data_dir) as recording:
        ray_run(recording.url, cluster, *program, expect_code=expect_code)
    with ServerProcess(data_dir) as server:
        yield server


def driver_env() -> dict[str, str]:
    """A clean shell's environment, plus what Ray itself asks of a driver joining a `ray start` cluster: `ray start`
    turns token authentication on when a token exists (~/.ray/auth_token), a driver only when told to."""
    token = Path.home() / ".ray" / "auth_token"
    return {**without_ray_settings(), **({"RAY_AUTH_MODE": "token"} if token.exists() else {})}


def session_pids(sid: int) -> list[int]:
    """The processes of session ``sid`` (a process started with ``start_new_session`` and all it started)."""
    return list(unix_session(sid))


class RayStartHead:
    """A head node started as the README says (`eval "$(raysight env …)"`, then `ray start --head
    --system-config="$RAYSIGHT_RAY_SYSTEM_CONFIG"`), in a process session of its own that :meth:`stop` kills whole;
    with no ``server_url``, a plain `ray start --head` that raysight knows nothing of (no CPUs, no dashboard)."""

    def __init__(self, server_url: str | None, cluster: str, temp_dir: Path) -> None:
        self.server_url, self.cluster, self.temp_dir = server_url, cluster, temp_dir
        self.proc: subprocess.Popen[bytes] | None = None

    def _popen(self, ray_start: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        python = sys.executable
        script = f"exec {python} -m ray.scripts.scripts start {ray_start} --disable-usage-stats --block"
        if self.server_url:
            raysight = f"{python} -m raysight env --server {self.server_url} --cluster {self.cluster}"
            script = f'eval "$({raysight})" && {script} --num-cpus=1'
        else:
            script += " --num-cpus=0 --include-dashboard=false"
        return subprocess.Popen(
            ["bash", "-c", script],
            env=env or without_ray_settings(),
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def start(self, timeout_s: float = 90) -> str:
        """Start the head; its address once it is up."""
        return self.launch().address(timeout_s)

    def launch(self) -> RayStartHead:
        """Start the head, without waiting for it to be up (:meth:`address` does)."""
        config = ' --system-config="$RAYSIGHT_RAY_SYSTEM_CONFIG"' if self.server_url else ""
        self.proc = self._popen(f"--head --port=0 --temp-dir={self.temp_dir}{config}")
        return self

    def address(self, timeout_s: float = 90) -> str:
        """The address of the head launched, once it is up."""
        assert self.proc is not None
        address_file = self.temp_dir / "ray_current_cluster"
        deadline = time.monotonic() + timeout_s
        while not (address_file.exists() and address_file.read_text().strip()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"ray start exited or did not come up within {timeout_s} s")
            time.sleep(0.2)
        return address_file.read_text().strip()

    def join(self, address: str) -> RayStartHead:
        """Start, instead of a head, a node that joins the cluster at ``address`` (`ray start --address`); its
        caller waits until it is up."""
        self.proc = self._popen(f"--address={address}", driver_env())
        return self

    def stop(self, timeout_s: float = 30) -> None:
        """Kill every process of the head's session (as `ray stop --force` would, but only these), and check that
        none is left."""
        if self.proc is None:
            return
        deadline = time.monotonic() + timeout_s
        while pids := session_pids(self.proc.pid):
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.proc.poll()  # reap the head's own process
            assert time.monotonic() < deadline, f"Ray processes left after {timeout_s} s: {pids}"
            time.sleep(0.1)
        self.proc.wait(timeout=timeout_s)


def assert_nothing_alive_without_a_reason(data: dict[str, list[dict[str, Any]]]) -> None:
    """Of an ended session, every node, worker and actor reads dead: as Ray reported, or inferred with a reason."""
    for node in data["nodes"]:
        assert node["state"] == "DEAD" and (node["reported_state"] == "DEAD" or node["inferred_reason"]), node
    for worker in data["workers"]:
        assert not worker["is_alive"] and (worker["reported_state"] == "DEAD" or worker["inferred_reason"]), worker
    for actor in data["actors"]:
        assert actor["state"] == "DEAD" and (actor["reported_state"] == "DEAD" or actor["inferred_reason"]), actor
