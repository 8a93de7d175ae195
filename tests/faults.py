"""Faults at the file-system boundary, for tests: a disk that refuses writes (in this process, whichever way the code
writes: ``os.write``, ``os.pwrite``, ``os.fsync``, ``os.ftruncate`` or a file from ``open``), crash images of a data
dir, a real small tmpfs."""

from __future__ import annotations

import builtins
import contextlib
import io
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


class FailingDisk:
    """While :attr:`armed`, a write to a file under ``directory`` writes half its bytes and fails with ``error`` (a
    torn write), or (``on="fsync"``) its fsync fails, or (``on="ftruncate"``) cutting it fails, or several of these
    (``on=("write", "ftruncate")``): what a full disk (ENOSPC) or a failing one (EIO) does."""

    def __init__(
        self, monkeypatch: pytest.MonkeyPatch, directory: Path, error: int, on: str | tuple[str, ...] = "write"
    ) -> None:
        self.directory, self.error, self.armed = directory.resolve(), error, False
        self.on = (on,) if isinstance(on, str) else on
        real_write, real_pwrite, real_fsync, real_ftruncate = os.write, os.pwrite, os.fsync, os.ftruncate
        real_open = builtins.open
        disk = self

        def write(fd: int, data: Any) -> int:
            if disk.fails("write", _fd_path(fd)):
                real_write(fd, bytes(data)[: len(data) // 2])
                disk.raise_()
            return real_write(fd, data)

        def pwrite(fd: int, data: Any, offset: int) -> int:
            if disk.fails("write", _fd_path(fd)):
                real_pwrite(fd, bytes(data)[: len(data) // 2], offset)
                disk.raise_()
            return real_pwrite(fd, data, offset)

        def ftruncate(fd: int, length: int) -> None:
            if disk.fails("ftruncate", _fd_path(fd)):
                disk.raise_()
            real_ftruncate(fd, length)

        def fsync(fd: Any) -> None:
            if disk.fails("fsync", _fd_path(fd if isinstance(fd, int) else fd.fileno())):
                disk.raise_()
            real_fsync(fd)

        class TornFileIO(io.FileIO):
            def write(self, data: Any) -> int:
                if disk.fails("write", Path(str(self.name))):
                    super().write(bytes(data)[: len(data) // 2])
                    disk.raise_()
                return super().write(data)

        def open_(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            if isinstance(file, (str, os.PathLike)) and mode in ("ab", "wb") and disk.under(Path(file)):
                return io.BufferedWriter(TornFileIO(file, mode.replace("b", "")))
            return real_open(file, mode, *args, **kwargs)

        monkeypatch.setattr(os, "write", write)
        monkeypatch.setattr(os, "pwrite", pwrite)
        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "ftruncate", ftruncate)
        monkeypatch.setattr(builtins, "open", open_)

    def under(self, path: Path | None) -> bool:
        return path is not None and path.resolve().is_relative_to(self.directory)

    def fails(self, call: str, path: Path | None) -> bool:
        return self.armed and call in self.on and self.under(path)

    def raise_(self) -> None:
        raise OSError(self.error, os.strerror(self.error))


def _fd_path(fd: int) -> Path | None:
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return None


def crash_image(data_dir: Path, to: Path) -> Path:
    """A copy of ``data_dir`` as a crash would leave it (call while the server writes nothing to its store)."""
    shutil.copytree(data_dir, to)
    return to


@contextlib.contextmanager
def small_tmpfs(directory: Path, size: str = "20m") -> Iterator[Path]:
    """A real tmpfs of ``size`` mounted on ``directory`` (skips the test where mounting is not permitted)."""
    directory.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here ({mounted.stderr.strip() or mounted.returncode})")
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=True)


def fill(directory: Path) -> Path:
    """Fill the file system of ``directory`` with one file, up to ENOSPC; returns the file (delete it to free)."""
    filler = directory / "filler"
    with contextlib.suppress(OSError), filler.open("wb", buffering=0) as f:
        while True:
            f.write(b"\0" * 65536)
    return filler
