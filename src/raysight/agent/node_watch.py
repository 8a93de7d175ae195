"""What a node agent sees of its node's life: the raylet of each node and the GCS of each Ray session on this host,
running or gone. Evidence for reconciliation (``signals/ray_events/reconcile.py``): a node whose raylet is gone is
dead, and a session whose GCS is gone has ended, even when Ray's last events about them were lost.

A process is known by its command line (Ray's ``raylet --node_id=… --session_dir=…``, ``gcs_server
--session-dir=…``), and the processes a session directory should have by the files their nodes write in it
(``<what>_port_<node_id>``, of which ``gcs_server_port_…`` says the GCS ran here: a GCS is known by its session
alone). A process this agent saw running and no longer sees is gone at once; one it never saw is gone only once
nothing in its session's ``logs/`` has changed for :data:`QUIET_S` (a live raylet rewrites ``debug_state.txt``
every 10 s), so that neither a node still starting nor a raylet in a PID namespace this agent cannot see reads as
dead.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from raysight import wire

QUIET_S = 60.0
RAYLET, GCS = "raylet", "gcs_server"
_PORT_FILE = re.compile(r"(?P<what>[a-z_]+)_port_(?P<node>[0-9a-f]{56})")

# (session, process, node_id): one raylet of a node, or a session's GCS (node_id "")
Key = tuple[str, str, str]


@dataclass(frozen=True)
class Sighting:
    """A change in what the agent sees of one process: running (``alive``) with ``pid``, or gone. ``ns`` is when it
    was seen so; ``last_alive_ns`` (for a process gone) when it was last known to run: the agent's look before, or
    the last change in its session's logs."""

    session: str
    process: str
    node_id: str
    pid: int | None
    alive: bool
    ns: int
    last_alive_ns: int | None = None

    @property
    def key(self) -> Key:
        return self.session, self.process, self.node_id

    def sent(self) -> wire.Sighting:
        """As the agent sends it."""
        return {
            "session": self.session,
            "process": self.process,
            "node_id": self.node_id,
            "pid": self.pid,
            "alive": self.alive,
            "ns": self.ns,
            "last_alive_ns": self.last_alive_ns,
        }


def cmdline_options(args: list[str]) -> dict[str, str]:
    """The ``--name=value`` options of a command line (as Ray gives its processes theirs), by name."""
    return dict(arg[2:].split("=", 1) for arg in args[1:] if arg.startswith("--") and "=" in arg)


def parse_cmdline(args: list[str]) -> Key | None:
    """The key of a raylet's or GCS's command line; None for any other process."""
    if not args:
        return None
    program = os.path.basename(args[0])
    options = cmdline_options(args)
    if program == RAYLET and "node_id" in options and "session_dir" in options:
        return os.path.basename(options["session_dir"].rstrip("/")), RAYLET, options["node_id"]
    if program == GCS and "session-dir" in options:
        return os.path.basename(options["session-dir"].rstrip("/")), GCS, ""
    return None


def running(proc: Path = Path("/proc")) -> dict[Key, int]:
    """The raylets and GCSes running on this host, and their pids."""
    found: dict[Key, int] = {}
    for entry in os.scandir(proc):
        if not entry.name.isdigit():
            continue
        try:
            with open(os.path.join(entry.path, "cmdline"), "rb") as f:
                args = f.read(65536).decode(errors="replace").split("\0")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if (key := parse_cmdline(args)) is not None:
            found[key] = int(entry.name)
    return found


def port_files(session_dir: Path) -> list[tuple[str, str, Path]]:
    """Each ``<what>_port_<node id>`` file the nodes of this host wrote in a session directory (``gcs_server``,
    ``metrics_export``, …): what it is, the node's ID, its path; none where the directory cannot be read."""
    try:
        names = os.listdir(session_dir)
    except OSError:
        return []
    return [(m["what"], m["node"], session_dir / name) for name in names if (m := _PORT_FILE.fullmatch(name))]


def members(session_dir: Path) -> set[tuple[str, str]]:
    """The (process, node_id) a session directory's files say ran on this host."""
    return {(GCS, "") if what == "gcs_server" else (RAYLET, node) for what, node, _ in port_files(session_dir)}


def last_change_ns(session_dir: Path) -> int | None:
    """When a file of the session's ``logs/`` last changed (None: no logs)."""
    try:
        entries = list(os.scandir(session_dir / "logs"))
    except OSError:
        return None
    times = []
    for entry in entries:
        try:
            if entry.is_file():
                times.append(entry.stat().st_mtime_ns)
        except OSError:
            continue
    return max(times, default=None)


class NodeWatch:
    """What changed in the Ray processes of the sessions followed since the last look."""

    def __init__(self, ray_dir: Path) -> None:
        self.ray_dir = ray_dir
        self._known: dict[Key, Sighting] = {}

    def look(self, sessions: Iterable[str], now_ns: int, procs: Mapping[Key, int]) -> list[Sighting]:
        """The sightings that differ from what was seen before, for ``sessions`` given the processes ``procs``
        running now (:func:`running`)."""
        sessions = set(sessions)
        expected = {(session, *member) for session in sessions for member in members(self.ray_dir / session)}
        pids = {key: pid for key, pid in procs.items() if key[0] in sessions}
        expected.update(pids)
        changes = [c for key in sorted(expected) if (c := self._change(key, pids.get(key), now_ns)) is not None]
        self._known.update((c.key, c) for c in changes)
        return changes

    def _change(self, key: Key, pid: int | None, now_ns: int) -> Sighting | None:
        before = self._known.get(key)
        if pid is not None:
            if before is not None and before.alive and before.pid == pid:
                self._known[key] = replace(before, last_alive_ns=now_ns)  # (not news)
                return None
            return Sighting(*key, pid=pid, alive=True, ns=now_ns, last_alive_ns=now_ns)
        if before is not None:
            return None if not before.alive else Sighting(*key, before.pid, False, now_ns, before.last_alive_ns)
        quiet_since = last_change_ns(self.ray_dir / key[0])
        if quiet_since is None or now_ns - quiet_since < QUIET_S * 1e9:
            return None
        return Sighting(*key, pid=None, alive=False, ns=now_ns, last_alive_ns=quiet_since)
