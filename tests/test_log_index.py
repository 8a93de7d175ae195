"""The log lines' text index: the literals a regex requires, the seq ranges a search reads, and searches through the
index finding exactly what a scan of every line finds."""

from __future__ import annotations

import random
import re
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raysight.agent.log_agent import batch_body
from raysight.agent.tailer import Tailer
from raysight.store import log_index
from raysight.store.logs_query import LogQuery, log_lines
from raysight.store.store import Store

_ATOMS = st.sampled_from(["a", "b", "c", "-", "\\.", ".", "[ab]", "\\d", "x", "yz"])


@st.composite
def _patterns(draw: st.DrawFn, depth: int = 2) -> str:
    parts = []
    for _ in range(draw(st.integers(1, 5))):
        atom = draw(_ATOMS)
        if depth and draw(st.booleans()):
            inner = [draw(_patterns(depth=depth - 1)) for _ in range(draw(st.integers(1, 2)))]
            atom = f"({draw(st.sampled_from(['', '?:']))}{'|'.join(inner)})"
        parts.append(atom + draw(st.sampled_from(["", "", "?", "*", "+", "{0,2}", "{1,2}", "{2}", "+?"])))
    return "".join(parts)


@given(st.data())
@settings(max_examples=300, deadline=None)
def test_every_match_of_a_regex_holds_the_literals_it_requires(data: st.DataObject) -> None:
    pattern = data.draw(_patterns())
    text = data.draw(st.from_regex(pattern))
    assert re.search(pattern, text)
    for literal in log_index.required_literals(pattern):
        assert literal in text, (pattern, text, literal)


@pytest.mark.parametrize(
    ("pattern", "literals"),
    [
        ("loss=0\\.1[0-9]5 ", ["loss=0.1", "5 "]),
        ("(?:Traceback) \\(most", ["Traceback (most"]),
        ("(foo)?bar", ["bar"]),
        ("a(bcd)+e", ["a", "bcd", "e"]),
        ("OOM|killed", []),  # either may be absent
        ("(?i)error", []),  # any case
        ("[", []),  # not a regex
    ],
)
def test_the_literals_of_common_regexes(pattern: str, literals: list[str]) -> None:
    assert log_index.required_literals(pattern) == literals


def test_a_search_reads_every_block_not_excluded_in_few_ranges() -> None:
    b = log_index.BLOCK_LINES
    assert log_index.seq_ranges([], 10 * b) is None
    assert log_index.seq_ranges([0, 1, 5], 10 * b) == [(2 * b, 5 * b - 1), (6 * b, 10 * b)]
    assert log_index.seq_ranges([0, 1, 2], 3 * b - 1) == []
    excluded = list(range(0, 1000, 2))  # every other block: 500 ranges, merged into MAX_RANGES
    ranges = log_index.seq_ranges(excluded, 1000 * b)
    assert ranges is not None and len(ranges) == log_index.MAX_RANGES
    read = {s // b for lo, hi in ranges for s in range(lo, hi + 1, b)}
    assert read >= set(range(1, 1000, 2))  # nothing that might match is skipped
    assert len(read) < 1000  # and some is


def _store_lines(tmp_path: Path, store: Store, batches: list[list[str]]) -> None:
    """Each batch written to a worker file and stored as an agent would send it."""
    logs = tmp_path / "ray" / "session_2026-11-23_01-02-03_000000_9" / "logs"
    logs.mkdir(parents=True)
    tailer = Tailer(logs.parent.parent, tmp_path / "checkpoint.json")
    with (logs / ("worker-" + "ab" * 28 + "-01000000-42.out")).open("a") as out:
        for lines in batches:
            out.write("".join(line + "\n" for line in lines))
            out.flush()
            tailer.scan()
            chunks = tailer.read(1 << 24)
            store.apply_logs([batch_body("node-1", chunks, [])])
            tailer.commit(chunks, [])


def test_searches_through_the_index_find_what_a_scan_of_every_line_finds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(log_index, "BLOCK_LINES", 16)  # many blocks, several lines of a batch in each, and batches
    rng = random.Random(7)
    words = ["alpha", "beta", "gamma", "delta", "OOM", "Traceback", "shard-00042", "ümlaut", "x"]
    lines = [" ".join(rng.choice(words) + str(rng.randrange(50)) for _ in range(3)) for _ in range(900)]
    lines[437] = "Traceback (most recent call last): the needle"  # in one block only
    store = Store(tmp_path / "data")
    try:
        _store_lines(tmp_path, store, [lines[:5], lines[5:400], lines[400:401], lines[401:]])  # blocks filled twice
        con = store.reader()
        assert con.execute("SELECT count(*) FROM log_blocks").fetchall()[0][0] == 900 // 16 + 1
        searches = [
            {"grep": "the needle"},
            {"grep": "OOM1"},
            {"grep": "ümlaut3"},
            {"grep": "gamma49 x"},
            {"grep": "absent"},
            {"grep": "al"},  # too short to be indexed
            {"regex": "Trace(back)? \\(most"},
            {"regex": "delta[0-9]+ OOM4"},
            {"regex": "beta|gamma7"},
        ]
        for search in searches:
            text, regex = search.get("grep"), search.get("regex")
            expected = [
                line for line in lines if (text is None or text in line) and (regex is None or re.search(regex, line))
            ]
            result = log_lines(con, LogQuery(grep=text, regex=regex, limit=10_000))
            found = [row["text"] for row in orjson.loads(result.rows)]
            assert found == expected and result.total == len(expected), search
        has_needle = " AND ".join(f"get_bit(grams, {b}) = 1" for b in log_index.needle_grams(["the needle"]))
        (maybe,) = con.execute(f"SELECT count(*) FROM log_blocks WHERE {has_needle}").fetchall()[0]
        assert maybe == 1  # the needle's block is all a search for it reads
    finally:
        store.close()
