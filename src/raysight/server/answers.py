"""JSON answers rendered off the event loop: whole, or streamed a chunk of rows at a time.

A route's answer is rendered on a worker thread (orjson), never on the loop, so that a big one leaves every other
request answered meanwhile (``/api/raysight/ping`` among them). An answer of many rows (lists, logs) is streamed:
its shape is rendered with :data:`ROWS` where the array of rows goes, and the rows follow chunk by chunk, each
fetched and rendered on a thread as the client takes the one before, so that memory holds a chunk, not the answer.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import duckdb
import orjson
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response, StreamingResponse

from raysight.errors import RaysightError
from raysight.server.app_state import AppState

JSON = "application/json"


class _Rows:
    """Where a streamed answer's rows go in its shape (:data:`ROWS`)."""


ROWS = _Rows()
_MARK = f"raysight-rows-{uuid.uuid4().hex}"  # what ROWS renders as, to split the shape at: no answer holds it


def _mark(value: Any) -> str:
    if value is ROWS:
        return _MARK
    raise TypeError(f"{type(value).__name__} is not JSON")


def render(data: Any) -> bytes:
    """``data`` as JSON (``ROWS`` as a mark); the standard library's for an integer past 64 bits, which orjson
    refuses."""
    try:
        return orjson.dumps(data, default=_mark, option=orjson.OPT_NON_STR_KEYS)
    except orjson.JSONEncodeError:
        return json.dumps(data, default=_mark, ensure_ascii=False, separators=(",", ":")).encode()


def answer(data: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    """A small answer, rendered where it is made."""
    return Response(render(data), status_code=status, headers=headers, media_type=JSON)


def raysight_error(error: RaysightError) -> Response:
    """raysight's error envelope, of its own API, ingest and the dashboard: ``{"ok": false, "error", "status"}``."""
    return answer({"ok": False, "error": str(error), "status": error.status}, error.status, error.headers)


async def rendered(data: Any, status: int = 200) -> Response:
    """An answer rendered on a worker thread."""
    return Response(await run_in_threadpool(render, data), status_code=status, media_type=JSON)


async def read_json(state: AppState, read: Callable[[duckdb.DuckDBPyConnection], Any]) -> Response:
    """What ``read`` reads from the store, rendered on the same worker thread."""
    return Response(await state.read(lambda con: render(read(con))), media_type=JSON)


def pieces(chunks: Iterator[list[Any]]) -> Iterator[bytes]:
    """Chunks of rows rendered as pieces of an array (:func:`streamed`), each as it is taken."""
    return (render(rows)[1:-1] for rows in chunks)


# What makes a streamed answer with a cursor: its shape, holding ROWS, and the pieces of its array of rows
MakeRows = Callable[[duckdb.DuckDBPyConnection], tuple[Any, Iterator[bytes]]]


@dataclass
class _Rest:
    """The pieces of a streamed answer not sent yet, and the cursor they are read with."""

    pieces: Iterator[bytes]
    cursor: duckdb.DuckDBPyConnection

    def take(self, most: int = 1) -> list[bytes]:
        """The next ``most`` pieces that hold rows (fewer at the end)."""
        taken: list[bytes] = []
        for piece in self.pieces:
            if piece:
                taken.append(piece)
                if len(taken) == most:
                    break
        return taken

    def close(self) -> None:
        self.cursor.close()


async def streamed(state: AppState, rows: MakeRows) -> Response:
    """The answer ``rows`` makes with a cursor of its own: its shape (holding :data:`ROWS`) and the pieces of its
    array of rows (rendered rows joined by commas, without brackets), each read and rendered as it is sent.

    The shape and the first two pieces are made before the answer starts, so that what the request got wrong is
    answered with its error (``RaysightError``); an answer of one piece goes whole, with its length. A failure later
    can only cut the answer short.
    """

    def start() -> tuple[bytes, bytes, list[bytes], _Rest]:
        rest = _Rest(iter(()), state.store.reader())
        try:
            shape, rest.pieces = rows(rest.cursor)
            head, tail = render(shape).split(f'"{_MARK}"'.encode(), 1)
            first = rest.take(2)
        except BaseException:
            rest.close()
            raise
        return head, tail, first, rest

    head, tail, first, rest = await run_in_threadpool(start)
    if len(first) < 2:
        rest.close()
        return Response(head + b"[" + b"".join(first) + b"]" + tail, media_type=JSON)
    return StreamingResponse(_joined(head, first, rest, tail), media_type=JSON)


async def _joined(head: bytes, first: list[bytes], rest: _Rest, tail: bytes) -> AsyncIterator[bytes]:
    """The answer's bytes: each further piece read on a worker thread while the loop serves other requests; the
    cursor closed at the end, or when the client leaves."""
    try:
        yield head + b"[" + b",".join(first)
        while piece := await run_in_threadpool(rest.take):
            yield b"," + piece[0]
        yield b"]" + tail
    finally:
        rest.close()
