"""A POST body's shape, checked before it is journalled: how many events a JSON array holds, or why it is refused."""

from __future__ import annotations

import pytest

from raysight.ingest.batch_shape import NotAnArray, array_length


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
    with pytest.raises(NotAnArray, match=f"is {kind}, not an array"):
        array_length(body)


@pytest.mark.parametrize("body", [b"", b"[", b"[1,]", b'["\\ud800"]', b'["\xff"]', b"[1e999]", b"[" * 10_000, b"[NaN]"])
def test_what_is_not_json_is_refused_and_the_parser_serves_the_next_body(body: bytes) -> None:
    with pytest.raises(ValueError) as refused:
        array_length(body)
    assert not isinstance(refused.value, NotAnArray)
    assert array_length(b"[1, 2]") == 2
