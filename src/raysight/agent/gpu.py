"""What each process uses of this host's NVIDIA GPUs: memory, and the share of the GPU's time it kept busy, read from
NVIDIA's management library (NVML, through ``nvidia-ml-py``).

Free of Ray and of the rest of raysight (the standard library and ``pynvml`` alone), so that it runs, and is tested,
on a GPU machine that has neither. A host with no NVIDIA driver or no device has no GPU processes: nothing here raises.
NVML names processes by their pid in the host's pid namespace: an agent in a container sees them only when it shares
the host's (``--pid=host``).
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

try:
    import pynvml
except ImportError:  # the package is a dependency; a host without it just has no GPUs to read
    pynvml = None


@dataclass(frozen=True)
class GpuProcess:
    """A process's use of one GPU: ``memory_bytes`` it holds (None where the driver does not say, as in some
    containers), and ``utilization``, the percent of the GPU's time since the last read that it ran kernels on it (None
    when NVML has no sample of it)."""

    pid: int
    index: int
    uuid: str
    memory_bytes: int | None
    utilization: float | None


class GpuReader:
    """Reads the GPU processes of every device; each read's utilisation covers the time since the one before."""

    def __init__(self) -> None:
        self._handles: list[tuple[int, str, Any]] = []
        self._seen_us: dict[str, int] = {}  # per device, NVML's timestamp of the newest utilisation sample read
        self._open = False
        if pynvml is None:
            return
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError:  # no driver, no library, no device
            return
        self._open = True
        try:
            for index in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                self._handles.append((index, _text(pynvml.nvmlDeviceGetUUID(handle)), handle))
        except pynvml.NVMLError:
            self.close()

    @property
    def devices(self) -> int:
        return len(self._handles)

    def read(self) -> list[GpuProcess]:
        """Every process on every device now; a device that fails to answer is left out of this read."""
        found: list[GpuProcess] = []
        for index, uuid, handle in self._handles:
            try:
                memory = memory_by_pid(
                    [
                        *pynvml.nvmlDeviceGetComputeRunningProcesses(handle),
                        *pynvml.nvmlDeviceGetGraphicsRunningProcesses(handle),
                    ]
                )
                busy = self._utilization_by_pid(uuid, handle)
            except pynvml.NVMLError:
                continue
            found += [
                GpuProcess(pid, index, uuid, memory.get(pid), busy.get(pid)) for pid in sorted(memory.keys() | busy)
            ]
        return found

    def _utilization_by_pid(self, uuid: str, handle: Any) -> dict[int, float]:
        """Each process's SM use since the last read of the device (NVML keeps a short window of samples)."""
        since = self._seen_us.get(uuid, 0)
        try:
            samples = pynvml.nvmlDeviceGetProcessUtilization(handle, since)
        except pynvml.NVMLError:  # NotFound: no process ran a kernel since; NotSupported: some virtual GPUs
            return {}
        busy, self._seen_us[uuid] = utilization_by_pid(samples, since)
        return busy

    def close(self) -> None:
        self._handles = []
        if self._open:
            self._open = False
            with suppress(pynvml.NVMLError):
                pynvml.nvmlShutdown()


def memory_by_pid(processes: Iterable[Any]) -> dict[int, int | None]:
    """The memory each process holds on a device, from NVML's running processes (``pid``, ``usedGpuMemory``): a
    process with compute and graphics contexts is listed twice, summed; None where NVML does not say."""
    memory: dict[int, int | None] = {}
    for proc in processes:
        used = proc.usedGpuMemory  # None: not available (pynvml's reading of NVML_VALUE_NOT_AVAILABLE)
        before = memory.get(proc.pid, 0)
        memory[proc.pid] = None if used is None or before is None else before + used
    return memory


def utilization_by_pid(samples: Iterable[Any], since_us: int) -> tuple[dict[int, float], int]:
    """The mean SM use of each process over NVML's samples (``pid``, ``timeStamp`` in µs, ``smUtil`` in %) newer
    than ``since_us``, and the newest sample's time: where the next read starts."""
    sums: dict[int, tuple[float, int]] = {}
    newest = since_us
    for sample in samples:
        if sample.timeStamp > since_us:
            newest = max(newest, sample.timeStamp)
            total, count = sums.get(sample.pid, (0.0, 0))
            sums[sample.pid] = total + sample.smUtil, count + 1
    return {pid: total / count for pid, (total, count) in sums.items()}, newest


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
