"""Run under `raysight run`: a two-node `ray.cluster_utils.Cluster` with Ray's log rotation on (small files, renamed
away: RAY_ROTATION_*); on the second node, a task printing numbered lines, another task and an actor's call, all
running when that node is removed; a driver started without raysight's variables (tests/ray_programs/plain_driver.py);
then this driver fails (exit code 3)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import ray
from ray.cluster_utils import Cluster

from raysight.cli.run import ray_env
from tests.ray_programs import wait_until_raysight_sees

PLAIN_DRIVER = Path(__file__).with_name("plain_driver.py")
DOOMED_LINES = 300  # about 20 KB: its worker's file is rotated four times
ROTATION = {"RAY_ROTATION_MAX_BYTES": "4096", "RAY_ROTATION_BACKUP_COUNT": "1000"}  # none deleted: every line kept


@ray.remote(resources={"doomed": 1}, max_retries=0)
def on_doomed_node(marker: str) -> None:
    """Prints its lines, then waits for its node's end."""
    for i in range(DOOMED_LINES):
        print(f"doomed line {i:04d} of {DOOMED_LINES}, padded to rotate Ray's files sooner ..........", flush=True)
    Path(marker).touch()
    time.sleep(120)


@ray.remote(num_cpus=0, resources={"doomed": 1}, max_retries=0)
def beside_it() -> None:
    time.sleep(120)


@ray.remote(num_cpus=0, resources={"doomed": 1}, max_restarts=0)
class Keeper:
    def hold(self) -> None:
        time.sleep(120)


def wait_for(path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout_s} s")
        time.sleep(0.1)


def main(marker: Path) -> None:
    os.environ.update(ROTATION)  # read by the nodes' processes as they start
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        doomed = cluster.add_node(num_cpus=1, resources={"doomed": 3})
        cluster.wait_for_nodes()
        ray.init(address=cluster.address)
        keeper = Keeper.remote()  # type: ignore[attr-defined]
        refs = [on_doomed_node.remote(str(marker)), beside_it.remote(), keeper.hold.remote()]
        wait_for(marker, 60)
        wait_until_raysight_sees("RUNNING", {"on_doomed_node", "beside_it", "Keeper.hold"}, 60)
        cluster.remove_node(doomed)
        for ref in refs:
            try:
                ray.get(ref, timeout=60)
            except ray.exceptions.RayError as exc:
                print("lost with its node:", type(exc).__name__)
        plain = {k: v for k, v in os.environ.items() if k not in ray_env("http://unused")}
        subprocess.run([sys.executable, str(PLAIN_DRIVER), cluster.address], env=plain, check=True, timeout=120)
    finally:
        ray.shutdown()
        cluster.shutdown()
    sys.exit(3)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
