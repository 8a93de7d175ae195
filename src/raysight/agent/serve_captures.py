"""Serve's memray captures, shipped. Where Serve's actors track their own allocations
(``RAY_SERVE_ENABLE_MEMORY_PROFILING=1``), each writes ``logs/serve/<component>_memray_<n>.bin`` for as long as it
lives, and nothing reads it once the cluster is gone. The agent ships each one once it has settled after a change (the
same size and time at two looks; one that changes at every look, once it has for :data:`RESHIP_S`), at most every
RESHIP_S a file, and every one that changed as it stops (for up to :data:`FINAL_S`); the server keeps the last shipping
of each, reads it with memray, and lists it with the on-demand profiles.

A file is gzipped as it is read, chunk by chunk (memray's reader reads a capture still being written up to its last
whole record); one that comes to more than the server takes (``--max-body``) is only said to be too large. The node of a
capture is the session's one raylet on this host, where it has one. Serve's ``LoggingConfig(logs_dir=…)`` elsewhere is
not followed."""

from __future__ import annotations

import io
import logging
import os
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import httpx

from raysight import wire
from raysight.agent import node_watch
from raysight.config import OWN_HEADERS
from raysight.signals.profile_captures.memray_read import READ_WITHIN_S
from raysight.signals.profile_captures.parse import MAX_SERVE_CAPTURE, SERVE_CAPTURE

log = logging.getLogger("raysight.agent")

LOOK_S = 2.0
RESHIP_S = 60.0  # a file that keeps changing is shipped at most this often (and as the agent stops)
FINAL_S = 60.0  # the agent's last look ships for at most this long
BUSY_WAIT_S = 1.0  # between sends the server answered busy (reading another capture), in the last look
_CHUNK = 1024 * 1024

Version = tuple[int, int]  # a file's size and modification time


@dataclass
class _Seen:
    version: Version  # at the last look
    shipped: Version | None  # as the server keeps it
    changed_at: float  # (monotonic) when it was first seen other than shipped
    shipped_at: float = 0.0  # (monotonic) when last shipped, or tried


def gzipped(path: Path, into: IO[bytes], most: int) -> int | None:
    """``path`` gzipped into ``into``, read chunk by chunk; the bytes read, or None once the gzipped bytes pass
    ``most`` (``into`` then holds a part: never much more than ``most``)."""
    deflate, read, written = zlib.compressobj(6, zlib.DEFLATED, 31), 0, 0
    with path.open("rb") as file:
        while chunk := file.read(_CHUNK):
            read += len(chunk)
            written += into.write(deflate.compress(chunk))
            if written > most:
                return None
    written += into.write(deflate.flush())
    return read if written <= most else None


def capture_node(session: str, running: dict[node_watch.Key, int]) -> str | None:
    """The node of the session's captures on this host: its one raylet here, else None (several nodes of a session
    share a host's session folder: the server then finds the capture's actor by its pid alone)."""
    mine = {node for (named, process, node) in running if named == session and process == node_watch.RAYLET}
    return mine.pop() if len(mine) == 1 else None


class ServeCaptures:
    """Ships the Serve captures of the sessions under ``ray_dir`` to ``server``."""

    def __init__(self, server: str, key: str | None, ray_dir: Path, http: httpx.Client | None = None) -> None:
        self.server, self.key, self.ray_dir = server.rstrip("/"), key, ray_dir
        self._http = http or httpx.Client(timeout=READ_WITHIN_S + 60, headers=OWN_HEADERS)
        self._files: dict[Path, _Seen] = {}
        self._kept: dict[str, dict[str, Version]] = {}  # by session: what the server keeps, as an agent shipped it
        self._max_bytes = 0
        self._lock = threading.Lock()  # (the following thread's looks, and the final one)
        self.shipped = 0

    def follow(self, sessions: Callable[[], frozenset[str]], stop: threading.Event) -> None:
        """Look every :data:`LOOK_S` until ``stop`` (the agent's drain makes the last look: :meth:`last_look`)."""
        while not stop.wait(LOOK_S):
            try:
                self.look(sessions())
            except httpx.HTTPError as exc:
                log.warning("could not ship Serve's memray captures to %s (%s); retrying", self.server, exc)
            except Exception:  # noqa: BLE001 (never let a capture stop the agent)
                log.exception("shipping Serve's memray captures failed; trying again in %s s", LOOK_S)

    def look(self, sessions: frozenset[str], final: bool = False, until: float | None = None) -> int:
        """Ship what has settled after a change, or has changed for a minute (``final``: whatever changed, until the
        monotonic time ``until``); how many were shipped. Raises httpx.HTTPError where the server could not be
        reached (shipped again at a later look)."""
        with self._lock:
            shipped = 0
            for session in sorted(sessions):
                folder = self.ray_dir / session / "logs" / "serve"
                try:
                    names = sorted(name for name in os.listdir(folder) if SERVE_CAPTURE.fullmatch(name))
                except OSError:
                    continue
                for name in names:
                    shipped += self._consider(session, folder / name, final, until)
            return shipped

    def _consider(self, session: str, path: Path, final: bool, until: float | None) -> bool:
        try:
            st = path.stat()
        except OSError:
            return False
        version, now = (st.st_size, st.st_mtime_ns), time.monotonic()
        seen = self._files.get(path)
        if seen is None:
            seen = self._files[path] = _Seen(version, self._kept_of(session).get(path.name), now)
            settled = False
        else:
            settled, seen.version = seen.version == version, version
        if not version[0] or version == seen.shipped:
            seen.changed_at = now
            return False
        rested = now - seen.shipped_at >= RESHIP_S
        busy = now - seen.changed_at >= RESHIP_S  # (changing at every look: shipped as it is, once a minute)
        if not (final or rested and (settled or busy)) or until is not None and now > until:
            return False
        seen.shipped_at = now  # (tried: one that failed is tried again RESHIP_S later, or as the agent stops)
        seen.shipped = self._ship(session, path, version, until)
        seen.changed_at = now
        return True

    def _kept_of(self, session: str) -> dict[str, Version]:
        if session not in self._kept:
            response = self._http.get(
                f"{self.server}{wire.AGENT_SERVE_CAPTURES}", params={"session": session, **wire.key_params(self.key)}
            )
            response.raise_for_status()
            answer = response.json()
            self._max_bytes = answer["max_bytes"]
            self._kept[session] = {c["file"]: (c["bytes"], c["modified_ns"]) for c in answer["captures"]}
        return self._kept[session]

    def _ship(self, session: str, path: Path, version: Version, until: float | None) -> Version:
        """Ship ``path`` as it is now (while the server is busy reading another, again each second until ``until``);
        the version shipped."""
        params: dict[str, str] = {"session": session, "file": path.name, "modified_ns": str(version[1])}
        if node := capture_node(session, node_watch.running()):
            params["node"] = node
        body = io.BytesIO()
        read = gzipped(path, body, self._max_bytes) if version[0] <= MAX_SERVE_CAPTURE else None
        params["bytes"] = str(version[0] if read is None else read)
        if read is None:
            params["too_large"] = "1"
        while True:
            response = self._http.post(
                f"{self.server}{wire.AGENT_SERVE_CAPTURES}",
                content=b"" if read is None else body.getvalue(),
                params={**params, **wire.key_params(self.key)},
                headers={"Content-Type": wire.GZIP},
            )
            if response.status_code != 503 or until is None or time.monotonic() + BUSY_WAIT_S > until:
                break
            time.sleep(BUSY_WAIT_S)
        if response.status_code == 400:  # (a bug on one side: sending it again cannot help)
            log.error("the server refused Serve's capture %s: %s", path, response.text[:500])
        else:
            response.raise_for_status()
        self.shipped += 1
        return int(params["bytes"]), version[1]

    def last_look(self, sessions: frozenset[str]) -> None:
        """Ship whatever changed, for at most :data:`FINAL_S`, as the agent stops; what cannot be is said in the log
        (the files keep it: an agent started again ships it)."""
        try:
            self.look(sessions, final=True, until=time.monotonic() + FINAL_S)
        except Exception as exc:  # noqa: BLE001 (never in the way of the agent's end)
            log.warning("could not ship Serve's memray captures to %s as the agent stops (%s)", self.server, exc)

    def close(self) -> None:
        self._http.close()
