"""Serve's memray captures (``RAY_SERVE_ENABLE_MEMORY_PROFILING=1``: each Serve actor tracks its own allocations into
``logs/serve/<component>_memray_<n>.bin``), shipped by the agent of their node (``AGENT_SERVE_CAPTURES``, the ingest
key's), each time one settles after a change: kept whole (within ``--max-body`` gzipped), read by memray in a child
process, one at a time (another shipped meanwhile gets 503: its agent sends it again), and listed with the on-demand
profiles (``signals/profile_captures/``), long after the cluster is gone. Shipping them reaches into no process: no
``--allow-profiling`` is needed, as none is for logs."""

from __future__ import annotations

import tempfile
import zlib
from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from raysight import wire
from raysight.errors import BadQuery, Unavailable
from raysight.server.answers import raysight_error
from raysight.server.app_state import app_state
from raysight.server.ingest_routes import held_body
from raysight.server.routing import Access, route
from raysight.signals.profile_captures import apply, captures_query
from raysight.signals.profile_captures.memray_read import read_in_child
from raysight.signals.profile_captures.parse import ServeShipped, parse_serve_shipped

_CHUNK = 1024 * 1024


def _inflated(gz: bytes, into: Path, size: int) -> None:
    """``gz`` inflated into ``into``, which must come to the ``size`` its agent gave (never more is written);
    ValueError where it does not."""
    inflate, written, data = zlib.decompressobj(wbits=31), 0, gz
    with into.open("wb") as out:
        while not inflate.eof:
            piece = inflate.decompress(data, _CHUNK)
            if not piece and not inflate.unconsumed_tail and data == inflate.unconsumed_tail:
                break  # (no progress: the stream is cut short)
            written += len(piece)
            if written > size:
                raise ValueError(f"it inflates past the {size} bytes its agent gave")
            out.write(piece)
            data = inflate.unconsumed_tail
    if not inflate.eof or written != size:
        raise ValueError(f"it inflates to {written} bytes, not the {size} its agent gave")


def _read(shipped: ServeShipped) -> tuple[dict[str, Any] | None, str | None, bool]:
    """What memray reads of a shipped capture, or why nothing; and whether its file is kept (one that inflates to
    the size its agent gave, whatever memray makes of it)."""
    if shipped.gz is None:
        return (
            None,
            (
                f"{shipped.file} was {shipped.file_bytes:,} bytes, too large to ship: memray's reporters read it on "
                "its node (memray flamegraph --no-web logs/serve/FILE), or raise the server's --max-body"
            ),
            False,
        )
    with tempfile.TemporaryDirectory(prefix="raysight-serve-capture-") as folder:
        path = Path(folder) / "capture.bin"
        try:
            _inflated(shipped.gz, path, shipped.file_bytes)
        except (ValueError, zlib.error) as exc:
            return None, f"the capture could not be read: {exc}", False
        try:
            return read_in_child(str(path)), None, True
        except ValueError as exc:
            return None, f"the capture could not be read: {exc}", True


async def shipped(request: Request) -> Response:
    """POST /ingest/agent/serve-captures?session=&node=&file=&bytes=&modified_ns=[&too_large=1]: one of Serve's
    memray captures as it is now (``wire.ServeCaptureShipped``), gzipped; kept in place of its earlier shipping."""
    state = app_state(request)
    if state.memray_reads.locked():  # (before the body is read: one waiting would hold the ingest budget)
        raise Unavailable("busy reading another Serve capture: send it again in a few seconds")
    async with state.memray_reads, held_body(request, state.max_body) as body:
        capture = parse_serve_shipped(request.query_params, body)
        read, error, keep = await run_in_threadpool(_read, capture)
        address = f"{request.client.host}:{request.client.port}" if request.client else "unknown"
        await state.write(lambda tx: apply.serve_shipped(tx, capture, read, error, keep, address))
    return JSONResponse({"ok": True, "capture_id": capture.capture_id, "error": error})


async def kept(request: Request) -> Response:
    """GET /ingest/agent/serve-captures?session=NAME: the Serve captures of a session the server keeps, each as last
    shipped (``file``, ``bytes``, ``modified_ns``), and the most it takes gzipped (``max_bytes``): an agent started
    again ships only what changed."""
    state = app_state(request)
    session = request.query_params.get("session")
    if not session:
        raise BadQuery("name the session: session=NAME")
    captures = await state.read(lambda con: captures_query.serve_kept(con, session))
    return JSONResponse({"captures": captures, "max_bytes": state.max_body})


async def capture_file(request: Request) -> Response:
    """GET /api/raysight/profiles/{capture_id}/file: a Serve capture's file as Serve wrote it (gzipped on the way),
    for memray's own reporters (`memray flamegraph FILE`)."""
    state = app_state(request)
    capture_id = request.path_params["capture_id"]
    file, gz = await state.read(lambda con: captures_query.capture_file(con, capture_id))
    return Response(
        gz,
        media_type="application/octet-stream",
        headers={"Content-Encoding": "gzip", "Content-Disposition": f'attachment; filename="{file}"'},
    )


routes = [
    route(
        wire.AGENT_SERVE_CAPTURES,
        shipped,
        access=Access.INGEST,
        envelope=raysight_error,
        methods=["POST"],
        bodies=(wire.GZIP,),
    ),
    route(wire.AGENT_SERVE_CAPTURES, kept, access=Access.INGEST, envelope=raysight_error, methods=["GET"]),
    route(wire.CAPTURE_FILE, capture_file, access=Access.READ, envelope=raysight_error, methods=["GET"], params=()),
]
