"""Breakpoints in Ray's workers, driven through the raysight server: ``breakpoint()`` (and ``ray.util.pdb.set_trace()``)
in a task or actor of a job raysight traces dials out to the server the job exports to, reports where it paused
(its task, actor, worker, node, stack and locals), and runs pdb on that connection until it is told to continue.
The server relays a client (`raysight debug attach`) to it; nothing listens on the worker's node.

Where the server does not allow debugging (``--allow-debug``), or cannot be reached, the pause falls back to Ray's own
debugger, as if raysight were not there.
"""

from __future__ import annotations

import bdb
import builtins
import contextlib
import logging
import os
import pdb
import queue
import reprlib
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from types import FrameType
from typing import IO, Any, cast
from urllib.parse import urlsplit

import orjson

from raysight import wire
from raysight.instrument.dap_tunnel import Tunnel, suspend, unseen
from raysight.instrument.ray_tracing import core_worker
from raysight.settings import ENV_OTLP_ENDPOINT, ENV_POST_MORTEM_TIMEOUT, POST_MORTEM_TIMEOUT_S, default_server

log = logging.getLogger("raysight.instrument")
HAND_OVER = "\x00raysight-dap"  # the line that tells pdb a DAP client attached (never typed: it comes from the server)
CONNECT_TIMEOUT_S = 10.0
MAX_FRAMES = 64  # of a report's stack (the server takes no more)
MAX_LOCALS = 100  # of a frame's
_repr = reprlib.Repr()
_repr.maxstring, _repr.maxother, _repr.maxlevel = 500, 500, 3
_INSTRUMENT = os.path.dirname(__file__) + os.sep  # raysight's instrumentation's frames: not the user's
_rays: dict[str, Any] = {}  # Ray's own functions of ``ray.util.rpdb`` that raysight's replace: a pause's fallback


def install() -> None:
    """Make ``breakpoint()`` and ``ray.util.pdb.set_trace()`` in this worker pause through raysight, and the
    post-mortem freeze Ray makes of a task that raises (``RAY_DEBUG_POST_MORTEM=1``) too."""
    from ray.util import rpdb

    for name, ours in (("set_trace", set_trace), ("_post_mortem", post_mortem)):  # (Ray's PYTHONBREAKPOINT names
        if getattr(rpdb, name) is not ours:  # the first: breakpoint() finds raysight's there)
            _rays[name] = getattr(rpdb, name)
            setattr(rpdb, name, ours)


def set_trace(*args: Any, **kwargs: Any) -> None:
    """Pause the caller's frame in pdb, driven through the raysight server."""
    frame = sys._getframe(1)
    if (debugger := _paused("breakpoint", frame, None)) is None:
        _rays_own("set_trace", *args, **kwargs)
    else:
        debugger.set_trace(frame)


def _rays_own(name: str, *args: Any) -> None:
    """Ray's own debugger's ``ray.util.rpdb`` function ``name``, in the stead of a pause raysight could not make; the
    breakpoint hooks it sets for itself (debugpy's) put back after, so that the next pause is raysight's again."""
    hooks = (sys.breakpointhook, sys.__breakpointhook__, builtins.breakpoint)
    try:
        if (rays := _rays.get(name)) is not None:
            rays(*args)
    except Exception:  # noqa: BLE001 (Ray's own could not pause either: the task goes on)
        log.warning("raysight: Ray's debugger could not pause this task either", exc_info=True)
    finally:
        sys.breakpointhook, sys.__breakpointhook__, builtins.breakpoint = hooks


def post_mortem() -> None:
    """``ray.util.pdb._post_mortem``, which Ray calls where a task raised (while it handles the exception), when
    ``RAY_DEBUG_POST_MORTEM=1``: freeze on the failing frame, driven through the raysight server, until continued or
    quit, or until ``RAYSIGHT_POST_MORTEM_TIMEOUT`` has passed; the task then fails as it would have."""
    _, exception, tb = sys.exc_info()
    if tb is None:
        return
    while tb.tb_next is not None:
        tb = tb.tb_next
    if (debugger := _paused("post_mortem", tb.tb_frame, exception, timeout_s=post_mortem_timeout_s())) is None:
        _rays_own("_post_mortem")
        return
    debugger.reset()
    debugger.interaction(None, tb)


def post_mortem_timeout_s() -> float:
    try:
        return float(os.environ.get(ENV_POST_MORTEM_TIMEOUT) or POST_MORTEM_TIMEOUT_S)
    except ValueError:
        return POST_MORTEM_TIMEOUT_S


def _paused(
    kind: str, frame: FrameType, exception: BaseException | None, timeout_s: float | None = None
) -> RemotePdb | None:
    """A debugger on the pause at ``frame``, reported to the raysight server; None where the server cannot be reached
    or refuses it (Ray's own debugger then pauses instead)."""
    try:
        connection = _connect()
    except Exception as exc:  # noqa: BLE001 (Ray's own debugger, rather than no pause)
        log.warning("raysight: cannot pause through the raysight server (%s); using Ray's debugger", exc)
        return None
    try:
        pause_id = connection.open(report(kind, frame, exception))
    except Exception as exc:  # noqa: BLE001
        log.warning("raysight: the raysight server refused this pause (%s); using Ray's debugger", exc)
        connection.close()
        return None
    where = f"{frame.f_code.co_filename}:{frame.f_lineno}"
    print(f"raysight: paused at {where}: `raysight debug attach {pause_id}`", file=sys.stderr, flush=True)
    return RemotePdb(connection, timeout_s, post_mortem=exception is not None)


def debug_url(endpoint: str) -> str:
    """The WebSocket URL of ``DEBUG_PAUSED`` on the server whose OTLP endpoint is ``endpoint`` (with the ingest key
    that endpoint carries)."""
    parts = urlsplit(endpoint)
    scheme = "wss" if parts.scheme == "https" else "ws"
    prefix = wire.OTLP_KEYED.split("{")[0]
    key = parts.path[len(prefix) :].split("/")[0] if parts.path.startswith(prefix) else ""
    query = f"?{wire.INGEST_KEY_PARAM}={key}" if key else ""
    return f"{scheme}://{parts.netloc}{wire.DEBUG_PAUSED}{query}"


def _connect() -> Connection:
    from websockets.sync.client import connect

    url = debug_url(os.environ.get(ENV_OTLP_ENDPOINT) or default_server())
    return Connection(connect(url, open_timeout=CONNECT_TIMEOUT_S, ping_interval=None, max_size=None))


def report(kind: str, frame: FrameType | None, exception: BaseException | None = None) -> wire.Pause:
    """What the server is told of a pause at ``frame``: where, in which of Ray's entities, the stack out to Ray's own
    frames with each frame's locals (their reprs, bounded)."""
    import traceback

    import ray
    from ray._private.worker import global_worker

    context = ray.get_runtime_context()
    task_id = context.get_task_id()
    return {
        "kind": kind,
        "session": global_worker.node.session_name,
        "job_id": context.get_job_id(),
        "task_id": task_id,
        "attempt": core_worker().get_current_task_attempt_number() if task_id else None,
        "actor_id": context.get_actor_id(),
        "worker_id": context.get_worker_id(),
        "node_id": context.get_node_id(),
        "host": ray.util.get_node_ip_address(),
        "pid": os.getpid(),
        "paused_ns": time.time_ns(),
        "stack": stack(frame),
        "exception": "".join(traceback.format_exception_only(exception)).strip() if exception else None,
        "traceback": "".join(traceback.format_exception(exception)) if exception else None,
    }


def stack(innermost: FrameType | None) -> list[wire.PausedFrame]:
    """The frames from ``innermost`` outwards, up to the first of Ray's worker (what runs the task), innermost first;
    none of raysight's instrumentation."""
    frames: list[wire.PausedFrame] = []
    for frame in _outwards(innermost):
        file = frame.f_code.co_filename
        if f"{os.sep}ray{os.sep}_private{os.sep}" in file or "_raylet" in file or len(frames) == MAX_FRAMES:
            break
        if file.startswith(_INSTRUMENT):
            continue
        names = list(frame.f_locals.items())[:MAX_LOCALS]
        frames.append(
            {"file": file, "line": frame.f_lineno, "function": frame.f_code.co_name, "locals": dict(map(_local, names))}
        )
    return frames


def _outwards(frame: FrameType | None) -> Iterator[FrameType]:
    while frame is not None:
        yield frame
        frame = frame.f_back


def _local(item: tuple[str, Any]) -> tuple[str, str]:
    name, value = item
    try:
        return str(name)[:256], _repr.repr(value)[:1000]
    except Exception as exc:  # noqa: BLE001 (a repr that raises)
        return str(name)[:256], f"<repr failed: {type(exc).__name__}>"


class Connection:
    """A pause's connection to the server: its report sent, then what pdb writes out and what the client types in
    (lines, queued by a reader thread), and at last how the pause ended."""

    def __init__(self, websocket: Any) -> None:
        self.websocket = websocket
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.pause_id: str | None = None
        self.tunnel: Tunnel | None = None  # to debugpy, once a DAP client attached (``dap_tunnel.py``)
        unseen(websocket.recv_events_thread)  # (debugpy, driving the pause, must not suspend the connection)

    def open(self, pause: wire.Pause) -> str:
        """Report the pause; its ID, as the server named it (RuntimeError where it refused it)."""
        self.send(pause)
        answer = orjson.loads(self.websocket.recv(timeout=CONNECT_TIMEOUT_S))
        if not isinstance(pause_id := answer.get(wire.PAUSE_ID), str):
            raise RuntimeError(answer.get(wire.REFUSED) or "no pause ID")
        self.pause_id = pause_id
        unseen(threading.Thread(target=self._read, name="raysight-debug", daemon=True)).start()
        return pause_id

    def _read(self) -> None:
        """The server's messages: lines the client typed, a DAP client come (or gone), its bytes (binary)."""
        try:
            for message in self.websocket:
                if isinstance(message, bytes):
                    if self.tunnel is not None:
                        self.tunnel.feed(message)
                    continue
                control = orjson.loads(message)
                if isinstance(text := control.get(wire.INPUT), str):
                    for line in text.splitlines():
                        self.lines.put(line + "\n")
                elif control.get(wire.DAP) == wire.DAP_OPEN and self.tunnel is None:
                    self.tunnel = Tunnel(self.send_bytes, lambda: self.close("continued"))
                    self.lines.put(HAND_OVER)
                elif control.get(wire.DAP) == wire.DAP_CLOSED and self.tunnel is not None:
                    self.tunnel.feed(None)
        except Exception:  # noqa: BLE001 (the connection lost: the pause cannot be driven any more)
            pass
        self.lines.put(None)

    def send(self, message: Mapping[str, Any]) -> bool:
        try:
            self.websocket.send(orjson.dumps(message).decode())
            return True
        except Exception:  # noqa: BLE001
            return False

    def send_bytes(self, data: bytes) -> bool:
        try:
            self.websocket.send(data)
            return True
        except Exception:  # noqa: BLE001
            return False

    def close(self, how: str | None = None) -> None:
        if how is not None:
            self.send({wire.ENDED: how})
        with contextlib.suppress(Exception):
            self.websocket.close()


class Console:
    """pdb's stdin and stdout over a :class:`Connection`: what it writes goes out at each flush, and a line is read
    once the client has typed one, the server told that pdb waits for it. The connection lost (no one can drive the
    pause any more), or the pause's time up, pdb is told to continue, and ``resumed`` says why."""

    def __init__(self, connection: Connection, timeout_s: float | None = None) -> None:
        self.connection = connection
        self.pending: list[str] = []
        self.deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self.resumed: str | None = None

    def write(self, text: str) -> int:
        self.pending.append(text)
        return len(text)

    def flush(self) -> None:
        if self.pending:
            text, self.pending = "".join(self.pending), []
            self.connection.send({wire.OUTPUT: text})

    def readline(self, size: int | None = -1) -> str:
        self.flush()
        self.connection.send({wire.READY: True})
        try:
            line = self.connection.lines.get(
                timeout=None if self.deadline is None else self.deadline - time.monotonic()
            )
        except (queue.Empty, ValueError):  # (ValueError: the deadline passed already)
            line, self.resumed = "continue\n", "timed out"
        if line is None:
            line, self.resumed = "continue\n", "worker gone"
        return line


class RemotePdb(pdb.Pdb):
    """pdb on a :class:`Console`: continuing (with no breakpoint left) or quitting ends the pause, telling the
    server how."""

    def __init__(self, connection: Connection, timeout_s: float | None = None, post_mortem: bool = False) -> None:
        self.console = Console(connection, timeout_s)
        self.post_mortem = post_mortem
        io = cast(IO[str], self.console)  # (as much of a text file as pdb uses)
        super().__init__(stdin=io, stdout=io, nosigint=True)
        self.use_rawinput = False
        self.prompt = "(Pdb) "
        self._over = self._handed = False

    def onecmd(self, line: str) -> bool:
        if line == HAND_OVER:
            return self._hand_over()
        return bool(super().onecmd(line))

    def _hand_over(self) -> bool:
        """A DAP client attached (`raysight debug attach --dap`): pdb lets go of the frame and debugpy stops in it,
        driven through the tunnel until its client resumes the task; the pause lasts until the client goes."""
        connection = self.console.connection
        if (tunnel := connection.tunnel) is None:
            return False
        try:
            if self.post_mortem:
                raise RuntimeError("a post-mortem pause is driven from a terminal (raysight debug attach)")
            import debugpy

            tunnel.open()
            deadline = time.monotonic() + CONNECT_TIMEOUT_S * 6
            while not debugpy.is_client_connected():  # (its attach and configurationDone, through the tunnel)
                if time.monotonic() > deadline:
                    raise TimeoutError("the DAP client did not attach")
                time.sleep(0.05)
        except Exception as exc:  # noqa: BLE001 (pdb stays; the next DAP client gets a tunnel of its own)
            tunnel.close()
            connection.tunnel = None
            self.message(f"*** raysight: debugpy could not take the pause over: {exc}")
            return False
        tunnel.handed = True
        frame = self.curframe
        self._over = self._handed = True  # the tunnel ends the pause, once its client goes
        bdb.Bdb.set_continue(self)  # pdb lets go (its own continue, which would end the pause)
        import pydevd

        # debugpy's tracer on this thread (and, by dispatch_line, kept on the frame): its client's steps go on from it
        pydevd.settrace(suspend=False, trace_only_current_thread=True, patch_multiprocessing=False)
        if frame is not None:
            suspend(frame)
        return True

    def dispatch_line(self, frame: FrameType) -> Any:
        """Bdb's; once debugpy has the pause, the frame keeps debugpy's tracer (for its client's steps)."""
        traced = super().dispatch_line(frame)
        return frame.f_trace if self._handed else traced

    def set_continue(self) -> None:
        super().set_continue()
        if not self.breaks:
            self._end(self.console.resumed or "continued")

    def set_quit(self) -> None:
        super().set_quit()
        self._end("quit")

    def _end(self, how: str) -> None:
        if not self._over:
            self._over = True
            self.console.flush()
            self.console.connection.close(how)
