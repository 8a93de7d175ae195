"""The DAP tunnel of a pause: debugpy in the paused worker joined to a DAP client (VS Code's Python debugger, through
`raysight debug attach --dap`) over the pause's own connection to the raysight server. debugpy's adapter dials a
one-shot listener on loopback, closed once it has come: no port of the node stays open for anyone else to attach
(debugpy's own listen would leave one, open to any local user). The client's bytes come in as the connection's
binary messages and go to the adapter; the adapter's go back out the same way. debugpy takes one client a process.

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
CONNECT_TIMEOUT_S = 30.0
_lock = threading.Lock()
_used = False  # whether debugpy has been started in this process (it starts once)


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


def adapter_socket() -> socket.socket:
    """A connection from debugpy's adapter, started for this pause: it dials a one-shot listener on loopback, which
    is closed once the adapter has come (or CONNECT_TIMEOUT_S has passed: RuntimeError)."""
    global _used
    import debugpy

    with _lock:
        if _used:
            raise RuntimeError("debugpy serves one DAP client a worker process, and this one has had its own")
        _used = True
    with socket.create_server((LOOPBACK, 0)) as one_shot:
        one_shot.settimeout(CONNECT_TIMEOUT_S)
        address = one_shot.getsockname()
        unseen(
            threading.Thread(target=debugpy.connect, args=(address,), name="raysight-dap-start", daemon=True)
        ).start()
        try:
            adapter, _ = one_shot.accept()
        except TimeoutError:
            raise RuntimeError("debugpy's adapter did not come (does the worker's environment have debugpy?)") from None
    adapter.settimeout(None)
    return adapter


class Tunnel:
    """A DAP client's bytes to debugpy's adapter and back: ``feed`` what the client sent (queued until the tunnel is
    open; None: the client went, which closes it), ``send`` where the adapter's bytes go, ``closed`` called once the
    adapter has let go of the client (it resumes what it had stopped), where debugpy had taken the pause over."""

    def __init__(self, send: Callable[[bytes], Any], closed: Callable[[], None]) -> None:
        self.send, self.closed = send, closed
        self.inbound: queue.Queue[bytes | None] = queue.Queue()
        self.socket: socket.socket | None = None
        self.handed = False  # debugpy took the pause over: the adapter letting go of the client ends it

    def feed(self, data: bytes | None) -> None:
        self.inbound.put(data)

    def open(self) -> None:
        """Start debugpy, take its adapter's connection, and start relaying."""
        self.socket = adapter_socket()
        unseen(threading.Thread(target=self._to_adapter, name="raysight-dap-in", daemon=True)).start()
        unseen(threading.Thread(target=self._from_adapter, name="raysight-dap-out", daemon=True)).start()

    def close(self) -> None:
        """Let go of the adapter (a hand-over that failed): its relaying ends."""
        self.inbound.put(None)
        if self.socket is not None:
            with contextlib.suppress(OSError):
                self.socket.shutdown(socket.SHUT_RDWR)

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
        if self.handed:
            self.closed()
