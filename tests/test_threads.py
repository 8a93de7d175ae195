"""The server's threads as the OS sees them: each named for what it does, and folding niced so that Ray's work on the
same machine comes first while acknowledging keeps its normal priority (Linux /proc)."""

from __future__ import annotations

import os
from pathlib import Path

from raysight.store.writer import FOLD_NICENESS
from tests.ray_scenarios import ServerProcess


def _threads(pid: int) -> dict[str, list[int]]:
    """Each thread name of process ``pid``: the niceness of every thread of that name."""
    named: dict[str, list[int]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        name = (task / "comm").read_text().strip()
        nice = int((task / "stat").read_text().rsplit(")", 1)[1].split()[16])
        named.setdefault(name, []).append(nice)
    return named


def test_folding_threads_are_named_and_niced_and_acknowledging_is_not(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data").start()
    assert server.proc is not None
    try:
        named = _threads(server.proc.pid)
    finally:
        server.stop()
    assert named["raysight-journl"] == [0]  # acknowledgements wait on it: never behind Ray
    assert named["raysight-gather"] == [FOLD_NICENESS]
    assert named["raysight-fold"] == [FOLD_NICENESS]
    main = [nice for name, nices in named.items() if not name.startswith("raysight-") for nice in nices]
    assert 0 in main  # the event loop, which answers Ray's POSTs
    if len(os.sched_getaffinity(0)) > 1:  # DuckDB's workers, which do most of a fold's work with several cores
        assert named["raysight-duckdb"] and set(named["raysight-duckdb"]) == {FOLD_NICENESS}
