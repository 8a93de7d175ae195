"""Run under `raysight run`: a two-node `ray.cluster_utils.Cluster` with Ray's log rotation on (small files, renamed
away: RAY_ROTATION_*); a task printing numbered lines on the second node, running when that node is removed; a driver
started without raysight's variables (tests/ray_programs/plain_driver.py); then this driver fails (exit code 3)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import ray
from ray.cluster_utils import Cluster

from raysight.cli.run import ray_env
from raysight.client import Client

PLAIN_DRIVER = Path(__file__).with_name("plain_driver.py")
DOOMED_LINES = 300  # about 20 KB: its worker's file is rotated four times
ROTATION = {"RAY_ROTATION_MAX_BYTES": "4096", "RAY_ROTATION_BACKUP_COUNT": "1000"}  # none deleted: every line kept


@ray.remote(resources={"doomed": 1}, max_retries=0)
def on_doomed_node(marker: str) -> None:
    for i in range(DOOMED_LINES):
        print(f"doomed line {i:04d} of {DOOMED_LINES}, padded to rotate Ray's files sooner ..........", flush=True)
    Path(marker).touch()
    time.sleep(120)


def wait_for(path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout_s} s")
        time.sleep(0.1)


def wait_until_raysight_sees_running(task: str, timeout_s: float) -> None:
    """Poll the server `raysight run` pointed Ray at until ``task`` reads RUNNING there: its executor's event (sent
    within a second) has left the node, whose aggregator goes with it when the node is removed."""
    server = os.environ["RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR"].split("/ingest/")[0]
    deadline = time.monotonic() + timeout_s
    with Client(server) as client:
        while {t["state"] for t in client.list("tasks", filters=[f"name={task}"])["rows"]} != {"RUNNING"}:
            if time.monotonic() > deadline:
                raise TimeoutError(f"raysight did not see {task} RUNNING within {timeout_s} s")
            time.sleep(0.2)


def main(marker: Path) -> None:
    os.environ.update(ROTATION)  # read by the nodes' processes as they start
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        doomed = cluster.add_node(num_cpus=1, resources={"doomed": 1})
        cluster.wait_for_nodes()
        ray.init(address=cluster.address)
        ref = on_doomed_node.remote(str(marker))
        wait_for(marker, 60)
        wait_until_raysight_sees_running("on_doomed_node", 60)
        cluster.remove_node(doomed)
        try:
            ray.get(ref, timeout=60)
        except ray.exceptions.RayError as exc:
            print("on_doomed_node: lost with its node:", type(exc).__name__)
        plain = {k: v for k, v in os.environ.items() if k not in ray_env("http://unused")}
        subprocess.run([sys.executable, str(PLAIN_DRIVER), cluster.address], env=plain, check=True, timeout=120)
    finally:
        ray.shutdown()
        cluster.shutdown()
    sys.exit(3)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
