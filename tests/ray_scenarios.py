"""Helpers for tests that run real Ray: a real raysight server in a subprocess, and Ray programs pointed at it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from raysight.cli.run import free_port, wait_until_quiet
from raysight.client import Client


class ServerProcess:
    """`raysight server` on a loopback port, started and stopped by PID."""

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        prefix: Sequence[str] = (),
        start_timeout_s: float = 30,
        options: Sequence[str] = (),
    ) -> None:
        """``prefix`` runs the server under another command (``taskset -c 0`` for the benchmarks); ``options`` are
        more `raysight server` options."""
        self.data_dir, self.port = data_dir, port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.prefix, self.start_timeout_s, self.options = list(prefix), start_timeout_s, list(options)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ServerProcess:
        self.proc = subprocess.Popen(
            [
                *self.prefix,
                sys.executable,
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


def ray_run(url: str, cluster: str, *program: str, timeout: float = 240) -> None:
    """`raysight run --server URL --cluster NAME -- python …`, then wait until Ray's last events are in."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAYSIGHT_SERVER")}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "raysight",
            "run",
            "--server",
            url,
            "--cluster",
            cluster,
            "--",
            sys.executable,
            *program,
        ],
        check=True,
        timeout=timeout,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    with Client(url) as client:
        wait_until_quiet(client)
