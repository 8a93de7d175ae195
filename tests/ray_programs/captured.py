"""Run under `raysight run`: two live actors for on-demand profiles (tests/test_captures_ray.py), one spinning on CPU
in `spin`, one growing its memory in `grow`; writes their IDs, pids and node to the path given (argv[1]) once both
are busy, then keeps them so until the file argv[2] exists."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import ray

CHUNK = 64 * 1024
KEPT = 2000  # chunks an actor keeps at most: 128 MB


@ray.remote(num_cpus=1)
class Spinner:
    def ready(self) -> tuple[int, str]:
        return _where()

    def spin(self, seconds: float) -> int:
        spun, end = 0, time.monotonic() + seconds
        while time.monotonic() < end:
            spun += 1
        return spun


@ray.remote(num_cpus=1)
class Grower:
    def __init__(self) -> None:
        self.kept: list[bytearray] = []

    def ready(self) -> tuple[int, str]:
        return _where()

    def grow(self, seconds: float) -> int:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.kept.append(bytearray(CHUNK))  # the allocating line
            if len(self.kept) > KEPT:
                self.kept.pop(0)
            time.sleep(0.01)
        return len(self.kept)


def _where() -> tuple[int, str]:
    import os

    return os.getpid(), ray.get_runtime_context().get_node_id()


def main(out: Path, stop: Path) -> None:
    ray.init(num_cpus=2)
    spinner, grower = Spinner.remote(), Grower.remote()  # type: ignore[attr-defined]
    (spinner_pid, node), (grower_pid, _) = ray.get([spinner.ready.remote(), grower.ready.remote()])
    busy = [spinner.spin.remote(600), grower.grow.remote(600)]
    ids = {
        "spinner": spinner._actor_id.hex(),
        "grower": grower._actor_id.hex(),
        "spinner_pid": spinner_pid,
        "grower_pid": grower_pid,
        "node": node,
    }
    out.write_text(json.dumps(ids))
    deadline = time.monotonic() + 600
    while not stop.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    del busy
    ray.shutdown()


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
