"""What a POST body is, checked before it is journalled: a JSON array, and of how many events. Pure.

simdjson validates the whole document (structure, UTF-8, escapes, numbers) without building a Python object per
value: ~0.3 µs an event, where ``orjson.loads`` took ~5 µs, on the core that acknowledges Ray's batches.
"""

from __future__ import annotations

import threading

import simdjson

_local = threading.local()  # a parser holds one document at a time: one per thread


_KINDS = {str: "a string", int: "a number", float: "a number", bool: "a boolean", type(None): "null"}


class NotAnArray(ValueError):
    """Valid JSON, but not an array (the message names what it is)."""


def array_length(body: bytes) -> int:
    """The number of elements of the JSON array ``body``; ValueError when it is not JSON, NotAnArray when it is JSON
    of another kind."""
    parser = getattr(_local, "parser", None)
    if parser is None:
        parser = _local.parser = simdjson.Parser()
    document = parser.parse(body)
    try:
        if isinstance(document, simdjson.Array):
            return len(document)
        kind = _KINDS.get(type(document), "an object")
    finally:
        del document  # the parser is reused only once its document is gone
    raise NotAnArray(f"body is {kind}, not an array of Ray events")
