"""`raysight debug`: the tasks paused in a debugger (`breakpoint()` in a task or actor of a job raysight traces), each
pause a session had, and a pdb prompt on a paused frame through the raysight server's one port."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click
import orjson

from raysight import wire
from raysight.cli import render
from raysight.cli.common import admin_token_for, client_options, make_client, server_option, session_option, who_asks
from raysight.settings import ENV_ADMIN_TOKEN, default_server

ANSWER_WAIT_S = 30.0  # how long a client whose input has ended waits for the debugger to answer what it sent


@click.group("debug", invoke_without_command=True)
@session_option
@client_options
@click.pass_context
def debug_cmd(ctx: click.Context, session: str | None, fmt: str | None, server: str | None) -> None:
    """The tasks paused now in a debugger (`breakpoint()`, `ray.util.pdb.set_trace()`), of every session or
    --session's, with who drives each; `debug attach ID` opens a pdb prompt on one, `debug history` lists every pause
    of a session and how it ended, `debug show ID` one pause's stack and locals. Pausing through raysight needs a
    server started with --allow-debug; elsewhere a breakpoint falls back to Ray's own debugger."""
    if ctx.invoked_subcommand is not None:
        return
    with make_client(server) as client:
        pauses = client.pauses(session=session)
    if _listed(pauses, fmt, live=True, nothing="no task is paused"):
        if any(p["pause_id"] for p in pauses):
            click.echo("attach with `raysight debug attach PAUSE_ID`", err=True)
        if any(p["kind"] == "ray" for p in pauses):
            click.echo("Ray's own pauses: attach VS Code's Ray Distributed Debugger to their address", err=True)


def _listed(pauses: list[dict[str, Any]], fmt: str | None, live: bool, nothing: str) -> bool:
    """Pauses in ``fmt`` (a table of :func:`_row`, or ``nothing`` on stderr); whether a table was drawn."""
    if fmt in ("json", "yaml"):
        render.dump(pauses, fmt)
    elif not pauses:
        click.echo(nothing, err=True)
    else:
        render.table([_row(p, live) for p in pauses])
    return fmt not in ("json", "yaml") and bool(pauses)


def _row(pause: dict[str, Any], live: bool) -> dict[str, Any]:
    if pause["kind"] == "ray":  # Ray's own debugger's: at its debugpy port, for Ray's VS Code extension
        where = f"Ray's debugger at {pause['debugger']}"
    else:
        where = f"{pause['function']} {Path(pause['file']).name}:{pause['line']}"
    return {
        "pause_id": pause["pause_id"],
        "kind": pause["kind"],
        "task_id": pause["task_id"],
        "actor_id": pause["actor_id"],
        "pid": pause["pid"],
        "host": pause["host"],
        "where": where,
        "paused_ms": pause["paused_ns"] // 1_000_000,
        **({"held_by": pause.get("holder")} if live else {"ended": pause["ended"], "attaches": pause["attaches"]}),
    }


@debug_cmd.command("history")
@session_option
@client_options
def history_cmd(session: str | None, fmt: str | None, server: str | None) -> None:
    """Every pause of the session, oldest first: where, in which task, and how it ended (continued, quit, timed out,
    worker gone, server stopped; blank while it lasts)."""
    with make_client(server) as client:
        pauses = client.pauses(session=session, every=True)
    _listed(pauses, fmt, live=False, nothing="no pause in this session")


@debug_cmd.command("show")
@click.argument("pause_id")
@client_options
def show_cmd(pause_id: str, fmt: str | None, server: str | None) -> None:
    """One pause: where it paused, its stack innermost first with each frame's locals (as reported when it paused),
    its exception (a post-mortem's) and each client that attached."""
    with make_client(server) as client:
        pause = client.pause(pause_id)
    if fmt in ("json", "yaml"):
        render.dump(pause, fmt)
        return
    click.echo(f"pause {pause['pause_id']} ({pause['kind']}) of task {pause['task_id']} in {pause['session']}")
    for frame in pause["stack"]:
        click.echo(f'  File "{frame["file"]}", line {frame["line"]}, in {frame["function"]}')
        for name, value in frame["locals"].items():
            click.echo(f"    {name} = {printable(value)}")
    if pause.get("locals_hidden"):
        click.echo(f"(the locals need the server's admin token: {ENV_ADMIN_TOKEN})", err=True)
    if pause["traceback"]:
        click.echo(pause["traceback"].rstrip())
    for a in pause["attaches"]:
        click.echo(f"attached: {a['client']} from {a['address']}", err=True)


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # a terminal's controls (escapes): not the debugger's text


def printable(text: str) -> str:
    """The debugger's text as it may reach a terminal: no control character but newlines and tabs (the worker's
    side is whoever holds the ingest key: its text must not drive the terminal)."""
    return _CONTROL.sub("", text)


def attach_url(server: str, pause_id: str) -> str:
    parts = urlsplit(server)
    scheme = "wss" if parts.scheme == "https" else "ws"
    return f"{scheme}://{parts.netloc}{wire.path(wire.DEBUG_ATTACH, pause_id=pause_id)}"


@debug_cmd.command("attach")
@click.argument("pause_id")
@click.option("--dap", is_flag=True, help="Serve the pause to a DAP client (VS Code's Python debugger) on --port.")
@click.option("--port", type=click.IntRange(0, 65535), default=5678, show_default=True, help="--dap's local port.")
@server_option
def attach_cmd(pause_id: str, dap: bool, port: int, server: str | None) -> None:
    """A pdb prompt on the paused frame, through the raysight server: `p x`, `where`, `up`, `down`, `n`, `s`, `c` as
    pdb does them; `c` resumes the task (which then ends as it would have), `q` makes it raise (BdbQuit). Ctrl-D
    detaches, leaving the task paused for the next to attach. Needs the server's admin token (on loopback too):
    $RAYSIGHT_ADMIN_TOKEN, else the data dir's secrets file of a server on this machine. Fed on stdin (a script),
    it waits for the debugger to answer each line it sent before it detaches. With --dap, VS Code (any DAP client)
    attaches to 127.0.0.1:PORT instead, and debugpy in the worker, reached through the server, drives the paused
    frame until the client goes (debugpy then resumes the task)."""
    url = attach_url(server or default_server(), pause_id)
    if not dap:
        with _connected(url) as websocket:
            sys.exit(Session(websocket).run())
    with socket.create_server(("127.0.0.1", port)) as listener:
        local = listener.getsockname()[1]
        click.echo(
            f"raysight: a DAP client may attach to 127.0.0.1:{local} for pause {pause_id} (VS Code's launch.json: "
            f'{{"type": "debugpy", "request": "attach", "connect": {{"host": "127.0.0.1", "port": {local}}}}})',
            err=True,
        )
        client, _ = listener.accept()
    with client, _connected(url + "?dap=true") as websocket:
        sys.exit(Tunnel(websocket, client).run())


@contextlib.contextmanager
def _connected(url: str) -> Iterator[Any]:
    """The attach socket of ``url``, as this user, with the admin token; a refused handshake a click error."""
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    headers = {wire.CLIENT_HEADER: who_asks()}
    if token := admin_token_for(url):
        headers["Authorization"] = f"Bearer {token}"
    try:
        websocket = connect(url, additional_headers=headers, ping_interval=None, max_size=None, proxy=None)
    except InvalidStatus as exc:
        body = exc.response.body or b""
        with contextlib.suppress(ValueError, AttributeError):
            body = orjson.loads(body).get("error", "").encode()
        raise click.ClickException(f"refused ({exc.response.status_code}): {body.decode(errors='replace')}") from None
    except OSError as exc:
        raise click.ClickException(f"no raysight server answers at {url} ({exc})") from None
    with websocket:
        yield websocket


class Session:
    """A client's side of a pause: what the debugger writes to stdout, the lines of stdin to the debugger. Each line
    sent is answered once the debugger waits again (``ready``) or the pause ends; at the end of stdin, the client
    waits for every answer, then detaches."""

    def __init__(self, websocket: Any) -> None:
        self.websocket = websocket
        self.sent = 0
        self.readies = 0
        self.ended: str | None = None
        self.refused: str | None = None
        self.answered = threading.Condition()
        self.reading = True  # stdin is read (the main thread)

    def run(self) -> int:
        """Relay until the pause ends, the server refuses, or stdin ends (then detach); the exit status."""
        reader = threading.Thread(target=self._receive, daemon=True)
        reader.start()
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C detaches; so does the pause's end (_receive)
            for line in sys.stdin:
                with self.answered:
                    if self.ended or self.refused:
                        break
                    self.sent += 1
                try:
                    self.websocket.send(orjson.dumps({wire.INPUT: line}).decode())
                except Exception:  # noqa: BLE001 (the pause ended meanwhile: _receive says how)
                    break
        self.reading = False
        with self.answered:  # each line answered: the debugger waits again (the one wait it had before any line)
            self.answered.wait_for(
                lambda: self.ended or self.refused or self.readies > self.sent, timeout=ANSWER_WAIT_S
            )
        if self.refused:
            click.echo(f"raysight: {self.refused}", err=True)
            return 1
        click.echo(f"\nraysight: the pause ended ({self.ended})" if self.ended else "\nraysight: detached", err=True)
        return 0

    def _receive(self) -> None:
        with contextlib.suppress(Exception):  # (the connection closed)
            for data in self.websocket:
                message = orjson.loads(data)  # (text: no DAP client, no bytes)
                if isinstance(text := message.get(wire.OUTPUT), str):
                    sys.stdout.write(printable(text))
                    sys.stdout.flush()
                with self.answered:
                    self.readies += message.get(wire.READY) is True
                    self.ended = message.get(wire.ENDED) or self.ended
                    self.refused = message.get(wire.REFUSED) or self.refused
                    self.answered.notify_all()
        with self.answered:
            self.ended = self.ended or ("" if self.refused else "connection closed")
            self.answered.notify_all()
        if self.reading:  # a terminal's read of stdin interrupted: nothing more to type
            os.kill(os.getpid(), signal.SIGINT)


class Tunnel:
    """A DAP client's side of a pause: its connection's bytes to the server and the worker's debugpy's messages back,
    until either goes; what the server says (the debugger's text, the pause's end) on stderr. A request from the
    worker's side (a DAP reverse request: runInTerminal runs a command where the client is) is dropped: in an attach
    debugpy sends none, and the worker's side is whoever holds the ingest key."""

    def __init__(self, websocket: Any, client: socket.socket) -> None:
        self.websocket, self.client = websocket, client

    def run(self) -> int:
        outbound = threading.Thread(target=self._to_server, daemon=True)
        outbound.start()
        ended = refused = None
        frames = DapFrames()
        with contextlib.suppress(Exception):  # (the connection closed)
            for data in self.websocket:
                if isinstance(data, bytes):
                    for frame, kind in frames.feed(data):
                        if kind == "request":
                            click.echo("raysight: dropped a request from the worker's side", err=True)
                        else:
                            self.client.sendall(frame)
                    continue
                message = orjson.loads(data)
                if isinstance(text := message.get(wire.OUTPUT), str) and text:
                    click.echo(printable(text), err=True, nl=False)
                ended, refused = message.get(wire.ENDED) or ended, message.get(wire.REFUSED) or refused
        with contextlib.suppress(OSError):
            self.client.shutdown(socket.SHUT_RDWR)
        if refused:
            click.echo(f"raysight: {refused}", err=True)
            return 1
        click.echo(f"raysight: the pause ended ({ended})" if ended else "raysight: detached", err=True)
        return 0

    def _to_server(self) -> None:
        with contextlib.suppress(Exception):  # (either side closed)
            while data := self.client.recv(64 * 1024):
                self.websocket.send(data)
        with contextlib.suppress(Exception):
            self.websocket.close()  # the DAP client went: the server tells debugpy, which resumes the task


class DapFrames:
    """The messages of a DAP byte stream (``Content-Length: N\\r\\n\\r\\n`` then N bytes of JSON), each whole, with
    its ``type`` (None where its body is not a JSON object). Pure."""

    MAX_BODY = 64 * 1024 * 1024

    def __init__(self) -> None:
        self.buffer = b""

    def feed(self, data: bytes) -> Iterator[tuple[bytes, str | None]]:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            headers = dict(line.split(b":", 1) for line in self.buffer[:end].split(b"\r\n") if b":" in line)
            length = int(headers.get(b"Content-Length", b"0").strip() or 0)
            if not 0 <= length <= self.MAX_BODY:
                raise ValueError(f"a DAP message of {length} bytes")
            if len(self.buffer) < end + 4 + length:
                return
            frame, self.buffer = self.buffer[: end + 4 + length], self.buffer[end + 4 + length :]
            try:
                body = orjson.loads(frame[end + 4 :])
            except orjson.JSONDecodeError:
                body = None
            yield frame, body.get("type") if isinstance(body, dict) else None
