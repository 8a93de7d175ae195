"""The DAP tunnel of a pause: debugpy in the paused worker, listening on loopback alone, joined to a DAP client (VS
Code's Python debugger, through `raysight debug attach --dap`) over the pause's own connection to the raysight
server. The client's bytes come in as the connection's binary messages and go to debugpy's adapter; the adapter's go
back out the same way. Nothing of the node listens beyond loopback.

debugpy suspends every thread it traces when it stops: the tunnel's threads (and the connection's) are marked as its
own, which it never traces nor suspends.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

LOOPBACK = "127.0.0.1"
CHUNK = 64 * 1024
_lock = threading.Lock()
_endpoint: tuple[str, int] | None = None  # debugpy's adapter's, once listening (debugpy listens once a process)


def unseen(thread: threading.Thread) -> threading.Thread:
    """``thread`` marked as debugpy's own: never traced, never suspended when debugpy stops the program."""
    thread.pydev_do_not_trace = True  # type: ignore[attr-defined]
    thread.is_pydev_daemon_thread = True  # type: ignore[attr-defined]
    return thread


def suspend(frame: FrameType) -> None:
    """Stop this thread in ``frame`` for debugpy's client, as a breakpoint there would (the stack reported from it
    outwards); returns once the client resumes it (or goes, which resumes it too)."""
    import pydevd
    from _pydevd_bundle.pydevd_comm_constants import CMD_SET_BREAK

    debugger = pydevd.get_global_debugger()
    thread = threading.current_thread()
    info = debugger.set_additional_thread_info(thread)
    info.is_tracing += 1  # (pydevd's own work here is not the program's)
    try:
        debugger.set_suspend(thread, CMD_SET_BREAK)
        debugger.do_wait_suspend(thread, frame, "line", None)
    finally:
        info.is_tracing -= 1


def listening() -> tuple[str, int]:
    """Where debugpy's adapter takes a client: on loopback, started on first use; where Ray's own debugger made it
    listen already (on the node's address: debugpy listens once a process), there."""
    global _endpoint
    import debugpy
    from ray._private.worker import global_worker

    with _lock:
        if _endpoint is None and global_worker.debugger_port:
            _endpoint = (global_worker.node_ip_address, global_worker.debugger_port)
        elif _endpoint is None:
            host, port = debugpy.listen((LOOPBACK, 0))
            _endpoint = (str(host), int(port))
        return _endpoint


class Tunnel:
    """A DAP client's bytes to debugpy's adapter and back: ``feed`` what the client sent (queued until the tunnel is
    open; None: the client went, which closes it), ``send`` where the adapter's bytes go, ``closed`` called once the
    adapter has let go of the client (it resumes what it had stopped)."""

    def __init__(self, send: Callable[[bytes], Any], closed: Callable[[], None]) -> None:
        self.send, self.closed = send, closed
        self.inbound: queue.Queue[bytes | None] = queue.Queue()
        self.socket: socket.socket | None = None

    def feed(self, data: bytes | None) -> None:
        self.inbound.put(data)

    def open(self) -> None:
        """Connect to debugpy's adapter (listening first, once a process), and start relaying."""
        self.socket = socket.create_connection(listening())
        unseen(threading.Thread(target=self._to_adapter, name="raysight-dap-in", daemon=True)).start()
        unseen(threading.Thread(target=self._from_adapter, name="raysight-dap-out", daemon=True)).start()

    def _to_adapter(self) -> None:
        assert self.socket is not None
        with contextlib.suppress(OSError):
            while (data := self.inbound.get()) is not None:
                self.socket.sendall(data)
        with contextlib.suppress(OSError):  # the client went: the adapter, seeing its client go, resumes
            self.socket.shutdown(socket.SHUT_WR)

    def _from_adapter(self) -> None:
        assert self.socket is not None
        with contextlib.suppress(OSError):
            while data := self.socket.recv(CHUNK):
                self.send(data)
        self.socket.close()
        self.closed()
