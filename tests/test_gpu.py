"""Per-process GPU use, read from NVML (agent/gpu.py) and labelled as raysight's process stats: on a host with an
NVIDIA GPU and PyTorch (to run a CUDA program to watch), else skipped. Needs no Ray."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from raysight.agent.gpu import GpuProcess, GpuReader
from raysight.agent.process_stats import RayProcess
from tests.test_process_stats import check_gpu_use_reported

HELD_MIB = 768


@pytest.fixture(scope="module")
def reader() -> Iterator[GpuReader]:
    reader = GpuReader()
    if not reader.devices:
        reader.close()
        pytest.skip("no NVIDIA GPU here (NVML found no device)")
    yield reader
    reader.close()


def hold_gpu(mib: int) -> subprocess.Popen[str]:
    """A CUDA program holding ``mib`` MiB and running kernels, once it is ready; it ends when its stdin closes."""
    pytest.importorskip("torch", reason="PyTorch runs the CUDA program whose GPU use is read")
    program = Path(__file__).parent / "gpu_programs" / "hold_gpu.py"
    proc = subprocess.Popen(
        [sys.executable, str(program), str(mib)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def end(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(30)


@pytest.fixture(scope="module")
def busy_process(reader: GpuReader) -> Iterator[subprocess.Popen[str]]:
    proc = hold_gpu(HELD_MIB)
    yield proc
    end(proc)


def read_until(reader: GpuReader, pid: int, ok: object, deadline_s: float = 30) -> GpuProcess:
    """The first read of ``pid`` that ``ok`` accepts, within the deadline."""
    deadline, last = time.monotonic() + deadline_s, None
    while time.monotonic() < deadline:
        last = next((p for p in reader.read() if p.pid == pid), last)
        if last is not None and ok(last):  # type: ignore[operator]
            return last
        time.sleep(0.5)
    raise AssertionError(f"no read of pid {pid} was as expected within {deadline_s} s; last: {last}")


def test_a_process_memory_and_utilization_are_read(reader: GpuReader, busy_process: subprocess.Popen[str]) -> None:
    seen = read_until(reader, busy_process.pid, lambda p: p.memory_bytes and p.utilization)
    assert seen.memory_bytes is not None and seen.memory_bytes >= HELD_MIB << 20  # its tensor, and its context
    assert seen.utilization is not None and 0 < seen.utilization <= 100
    assert seen.index == 0 and seen.uuid.startswith("GPU-")


def test_a_process_that_ended_is_read_no_more(reader: GpuReader) -> None:
    proc = hold_gpu(64)
    read_until(reader, proc.pid, lambda p: p.memory_bytes)
    end(proc)
    deadline = time.monotonic() + 10
    while any(p.pid == proc.pid for p in reader.read()):
        assert time.monotonic() < deadline, "a process gone is still read as using the GPU"
        time.sleep(0.2)


def test_the_process_stats_page_labels_gpu_use_by_process(
    reader: GpuReader, busy_process: subprocess.Popen[str]
) -> None:
    seen = read_until(reader, busy_process.pid, lambda p: p.memory_bytes and p.utilization)
    check_gpu_use_reported(RayProcess(busy_process.pid, "ab" * 28, "ray::Trainer.fit", "cd" * 28), seen)
