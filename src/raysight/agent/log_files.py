"""What a Ray log file is, by its name, and how its bytes become records. Pure: no I/O.

Ray 2.60 names its files (``shared/ray/events-logs-metrics.md`` §6): ``worker-<workerId>-<jobId>-<pid>.out|.err``
(``ffffffff`` for the job of a pre-started worker), ``python-core-worker-<workerId>_<pid>.log``,
``job-driver-<submissionId>.log``, ``runtime_env_setup-<jobId>.log``, ``raylet.out``, ``gcs_server.err``, … Rotation
renames to ``NAME.1`` … ``NAME.N`` (an outside logrotate may also copy to ``NAME-<date>``); several nodes sharing a
directory write ``raylet.1.out``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

MAX_RECORD = 64 * 1024  # a longer line is split into records of this size, each after the first flagged
# Ray's in-band markers (ray_constants.LOG_PREFIX_*): which job, task or actor the lines after them belong to
MARKERS = {b":job_id:": "job_id", b":task_name:": "task_name", b":actor_name:": "actor_name"}

_WORKER = re.compile(r"worker-(?P<worker>[0-9a-f]{56})-(?P<job>[0-9a-f]{8})-(?P<pid>\d+)\.(?P<ext>out|err)")
_CORE = re.compile(r"python-core-(?:worker|driver)-(?P<worker>[0-9a-f]{56})_(?P<pid>\d+)\.log")
_RUNTIME_ENV = re.compile(r"runtime_env_setup-(?P<job>[0-9a-f]{8})\.log")
# NAME.1 … NAME.N (Ray's rotation, logrotate's), NAME-20261123 (logrotate's dateext): an older file of NAME
_ROTATED = re.compile(r"(\.\d+|-\d{8}(\d{2})?)$")
_LOG = re.compile(r".+\.(out|err|log)")
NOT_LOGS = ("debug_state",)  # rewritten in place, not appended: a state dump, not a log


@dataclass(frozen=True)
class FileInfo:
    """What a log file's name says: its stream and the entities whose output it holds."""

    name: str  # its name when first seen, rotation suffix removed
    stream: str  # stdout or stderr (of workers and job drivers), or system (Ray's own components)
    worker_id: str | None = None
    job_id: str | None = None
    pid: int | None = None


def rotation_place(name: str) -> tuple[str, int]:
    """(``NAME``, k) for ``NAME.k``, a file that a rename rotation (Ray's, RotatingFileHandler style) moved away k
    times; (``name``, 0) for the live file. The higher k, the older the file."""
    if m := re.fullmatch(r"(.*)\.(\d+)", name):
        return m[1], int(m[2])
    return name, 0


def named_as_copy(name: str, of_now: str, of_then: str) -> bool:
    """Whether ``name`` is how logrotate names a copy of the file named ``of_now`` (``of_then`` when last seen: it may
    have been rotated since): ``NAME.k`` beside ``NAME``, or ``NAME-20261123`` beside ``NAME``. Never the name that
    Ray's rename rotation gives the file it starts: the old name of a file renamed away, or ``NAME.k`` beside a file
    renamed away from ``NAME``."""
    base, place = rotation_place(name)
    if place:
        return base == of_now
    return name != of_then and name.startswith((of_now, of_then))


@functools.lru_cache(maxsize=65536)
def describe(name: str) -> FileInfo | None:
    """What file ``name`` (a path under a session's ``logs/``, e.g. ``old/worker-….out.1``) holds; None for what is
    not a log."""
    base = _ROTATED.sub("", name.rsplit("/", 1)[-1])
    if not _LOG.fullmatch(base) or base.startswith(NOT_LOGS):
        return None
    if m := _WORKER.fullmatch(base):
        job = None if m["job"] == "ffffffff" else m["job"]
        stream = "stdout" if m["ext"] == "out" else "stderr"
        return FileInfo(base, stream, m["worker"], job, int(m["pid"]))
    if m := _CORE.fullmatch(base):
        return FileInfo(base, "system", m["worker"], None, int(m["pid"]))
    if m := _RUNTIME_ENV.fullmatch(base):
        return FileInfo(base, "system", job_id=m["job"])
    if base.startswith("job-driver-"):  # a submitted job's driver: its stdout and stderr together
        return FileInfo(base, "stdout")
    return FileInfo(base, "system")  # Ray's own components (raylet.out, gcs_server.err, dashboard.log, …)


@dataclass(frozen=True)
class Piece:
    """A record of a file: a line (without its newline) or a piece of one, at byte ``offset``."""

    offset: int
    data: bytes
    continued: bool  # continues the record before it (a line over MAX_RECORD)


def split(data: bytes, offset: int, mid_line: bool, final: bool) -> tuple[list[Piece], int, bool]:
    """The records of ``data``, read from byte ``offset`` of a file: (records, bytes consumed, whether the last record
    ends mid-line). ``mid_line``: the record before ``data`` ended mid-line. A trailing piece without its newline is
    left for the next read unless it reaches MAX_RECORD or ``final`` (the file will grow no more)."""
    pieces: list[Piece] = []
    at = 0
    while at < len(data):
        end = data.find(b"\n", at, at + MAX_RECORD + 1)
        if end < 0:
            if len(data) - at < MAX_RECORD and not final:
                break
            end = min(at + MAX_RECORD, len(data))
            pieces.append(Piece(offset + at, data[at:end], mid_line))
            at, mid_line = end, True
            continue
        pieces.append(Piece(offset + at, data[at:end], mid_line))
        at, mid_line = end + 1, False
    return pieces, at, mid_line


def marker(data: bytes) -> tuple[str, str] | None:
    """(``job_id``, ``task_name`` or ``actor_name``; its value) when ``data`` is one of Ray's in-band marker lines."""
    if data.startswith(b":"):
        for prefix, name in MARKERS.items():
            if data.startswith(prefix):
                return name, data[len(prefix) :].decode("utf-8", "replace")
    return None
