"""What the OS knows of the calling thread: its name and its niceness (Linux; elsewhere the name is left as it is)."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

NAME_BYTES = 15  # the kernel keeps this much of a thread's name


def settle(niceness: int | None = None) -> None:
    """Name the calling OS thread after its Python thread, so that ``top -H``, py-spy and /proc/PID/task/*/comm tell
    raysight's threads apart (threads it starts, DuckDB's workers among them, inherit the name), and set its
    ``niceness`` when given (per thread on Linux)."""
    tid = threading.get_native_id()
    with contextlib.suppress(OSError):  # not Linux, or no /proc
        Path(f"/proc/self/task/{tid}/comm").write_bytes(threading.current_thread().name.encode()[:NAME_BYTES])
    if niceness is not None:
        os.setpriority(os.PRIO_PROCESS, tid, niceness)
