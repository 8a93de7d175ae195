"""A POST body's shape, checked before it is journalled: how many events a JSON array holds, or why it is refused."""

from __future__ import annotations

import threading

import pytest

from raysight.errors import BadIngest
from raysight.signals.ray_events import batch_shape
from raysight.signals.ray_events.batch_shape import array_length


@pytest.mark.parametrize(
    ("body", "length"),
    [(b"[]", 0), (b'[{"a": [1, 2]}, null, 3]', 3), (b" [ {} ] ", 1), (b"[18446744073709551616, 1]", 2)],
)
def test_an_array_is_counted_by_its_top_level_elements(body: bytes, length: int) -> None:
    assert array_length(body) == length


@pytest.mark.parametrize(
    ("body", "kind"), [(b'{"a": 1}', "an object"), (b"7", "a number"), (b'"x"', "a string"), (b"null", "null")]
)
def test_json_of_another_kind_says_what_it_is(body: bytes, kind: str) -> None:
    with pytest.raises(BadIngest, match=f"is {kind}, not an array"):
        array_length(body)


@pytest.mark.parametrize(
    "body", [b"", b"[", b"[1,]", b'["\\ud800"]', b'["\xff"]', b"[1e999]", b"[" * 10_000, b"[NaN]", b"\xef\xbb\xbf[1]"]
)
def test_what_is_not_json_is_refused_and_the_parser_serves_the_next_body(body: bytes) -> None:
    with pytest.raises(ValueError) as refused:
        array_length(body)
    assert not isinstance(refused.value, BadIngest)
    assert array_length(b"[1, 2]") == 2


def test_a_large_body_is_read_by_a_parser_of_its_own_so_none_keeps_its_buffers(monkeypatch: pytest.MonkeyPatch) -> None:
    """A parser keeps the buffers of the largest document it read (a 16 MiB body's: ~200 MB): past REUSED_UP_TO a
    body gets a parser that goes with it, and the thread's parser is kept for the usual sizes."""
    made: list[object] = []

    class Counted(batch_shape.simdjson.Parser):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            made.append(self)

    monkeypatch.setattr(batch_shape.simdjson, "Parser", Counted)
    monkeypatch.setattr(batch_shape, "_local", threading.local())
    small, big = b"[1]", b"[" + b",".join([b"0"] * (batch_shape.REUSED_UP_TO // 2 + 1)) + b"]"
    assert [array_length(small), array_length(small)] == [1, 1] and len(made) == 1
    assert array_length(big) == batch_shape.REUSED_UP_TO // 2 + 1 and len(made) == 2
    assert array_length(small) == 1 and len(made) == 2 and batch_shape._local.parser is made[0]
