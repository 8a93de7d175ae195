"""Run under `raysight run`: the faults `raysight errors` must tell apart — one exception raised by many tasks with
different values in its message, a runtime environment that cannot be set up, and a task whose worker Ray's memory
monitor kills (its threshold lowered to just above what the machine uses now), retried with less memory."""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path

import ray

from tests.ray_programs import wait_until_raysight_sees

BAD_RECORDS = 12
MISSING_PACKAGE = "gcs://_ray_pkg_0123456789abcdef.zip"  # never uploaded: the runtime env agent cannot fetch it
HEADROOM = 3 << 30  # the memory monitor kills once the machine uses this much more than before Ray started


@ray.remote(max_retries=0)
def parse(i: int) -> None:
    print(f"parse: record {i}", flush=True)
    raise ValueError(f"bad record {i} at offset {i * 512}: 'row-{i}'")


@ray.remote(runtime_env={"working_dir": MISSING_PACKAGE})
def needs_package() -> None:
    """Never runs."""


@ray.remote(max_retries=1)
def hog(marker: str) -> int:
    """Takes memory until killed on its first attempt; the retry takes a little."""
    if Path(marker).exists():
        print("hog: retry", flush=True)
        return 1
    Path(marker).touch()
    print("hog: taking memory", flush=True)
    chunks = []
    while len(chunks) < 128:  # 16 GiB: far past the threshold, which stops it first
        chunks.append(bytearray(128 << 20))
        time.sleep(0.05)
    return len(chunks)


def memory_threshold(headroom: int) -> float:
    """The fraction of this machine's memory that is in use now plus ``headroom`` bytes."""
    info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in Path("/proc/meminfo").read_text().splitlines()}
    return (info["MemTotal"] - info["MemAvailable"] + headroom) / info["MemTotal"]


def main() -> None:
    os.environ.update(  # read by the raylet's memory monitor as it starts
        {"RAY_memory_usage_threshold": f"{memory_threshold(HEADROOM):.4f}", "RAY_memory_monitor_refresh_ms": "100"}
    )
    ray.init(num_cpus=2)
    for ref in [parse.remote(i) for i in range(BAD_RECORDS)]:
        with contextlib.suppress(ray.exceptions.RayTaskError):
            ray.get(ref)
    try:
        ray.get(needs_package.remote())
    except ray.exceptions.RuntimeEnvSetupError:
        print("needs_package: its runtime env failed as expected")
    print("hog:", ray.get(hog.remote(os.path.join(tempfile.mkdtemp(), "hogged"))))
    wait_until_raysight_sees("FINISHED", {"hog"}, 60)  # its retry's end, else lost as the cluster shuts down
    ray.shutdown()


if __name__ == "__main__":
    main()
