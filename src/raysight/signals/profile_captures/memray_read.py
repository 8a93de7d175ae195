"""memray's capture files read with memray's own reader: the stacks that held the most memory at the peak (or still at
the end), weighed in bytes, and what the file says of its process. The agent reads the captures of ``memray attach``
so; the server reads Serve's (``RAY_SERVE_ENABLE_MEMORY_PROFILING``), which an agent uploaded, in a child process
(``python -m raysight.signals.profile_captures.memray_read FILE``, :func:`read_in_child`): a file that memray's
reader chokes on costs a child, not the server."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import orjson

from raysight.signals.profile_captures.parse import MAX_STACK, MAX_STACKS

READ_WITHIN_S = 120.0
MEMRAY_HOOK = "_memray_attach_hook.py"  # the frame memray attach injects: not the process's own


def frame_name(function: str, filename: str, line: int) -> str:
    """A frame as py-spy names it in collapsed stacks: ``function (file:line)``."""
    return f"{function} ({filename}:{line})"


def memray_stacks(records: Any, native: bool = False) -> list[tuple[str, int]]:
    """memray's allocation records (each with ``size`` and ``stack_trace()``, innermost first; ``native``: their
    ``hybrid_stack_trace()``, C frames too) as stacks weighed in bytes; memray's own injected hook left out."""
    weights: dict[str, int] = {}
    for record in records:
        trace = record.hybrid_stack_trace() if native else record.stack_trace()
        if trace and trace[-1][1].endswith(MEMRAY_HOOK):
            continue
        stack = ";".join(frame_name(*frame) for frame in reversed(trace)) or "[no Python stack]"
        weights[stack] = weights.get(stack, 0) + record.size
    return [(stack, weight) for stack, weight in weights.items() if weight > 0]


def bounded(stacks: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """The heaviest stacks the server keeps (:data:`MAX_STACKS`), each within :data:`MAX_STACK` characters (a deep
    one cut at its root end, marked ``…``)."""
    kept = sorted(stacks, key=lambda entry: -entry[1])[:MAX_STACKS]
    return [(stack if len(stack) <= MAX_STACK else "…;" + stack[-(MAX_STACK - 2) :], weight) for stack, weight in kept]


def read_capture(path: str, leaks: bool = False) -> dict[str, Any]:
    """A capture file's process (pid, command line, when it was tracked, its peak) and its heaviest stacks at the peak
    (``leaks``: still allocated at the end), of Python frames (memray's own reporters show a file's native ones)."""
    from memray import FileReader

    reader = FileReader(path)
    meta = reader.metadata
    records = (
        reader.get_leaked_allocation_records(merge_threads=True)
        if leaks
        else reader.get_high_watermark_allocation_records(merge_threads=True)
    )
    return {
        "pid": meta.pid,
        "command_line": meta.command_line,
        "start_ns": int(meta.start_time.timestamp() * 1e9),
        "end_ns": int(meta.end_time.timestamp() * 1e9),
        "peak_bytes": meta.peak_memory,
        "allocations": meta.total_allocations,
        "stacks": bounded(memray_stacks(records)),
    }


def read_in_child(path: str) -> dict[str, Any]:
    """:func:`read_capture` of ``path`` in a child process (in the file's folder, which Python leaves off its import
    path: ``-P``), killed past :data:`READ_WITHIN_S`; ValueError says why memray could not read it."""
    try:
        done = subprocess.run(
            [sys.executable, "-P", "-m", __name__, path],
            capture_output=True,
            timeout=READ_WITHIN_S,
            cwd=os.path.dirname(path) or None,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )
    except subprocess.TimeoutExpired:
        raise ValueError(f"memray did not read it within {READ_WITHIN_S:g} s") from None
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise ValueError(f"memray could not read it: {said[-1] if said else f'its reader exited {done.returncode}'}")
    read: dict[str, Any] = orjson.loads(done.stdout)
    return read


if __name__ == "__main__":
    sys.stdout.buffer.write(orjson.dumps(read_capture(sys.argv[1])))
