"""The log lines' text index: the literals a regex requires, the seq ranges a search reads, and searches through the
index finding exactly what a scan of every line finds."""

from __future__ import annotations

import random
import re
from pathlib import Path

import duckdb
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raysight.agent.node_agent import batch_body
from raysight.agent.tailer import Tailer
from raysight.signals.log_lines import log_index
from raysight.signals.log_lines.apply import apply_logs
from raysight.signals.log_lines.logs_query import LogQuery, log_lines
from raysight.store.sessions_query import latest_session
from raysight.store.store import Store

_ATOMS = st.sampled_from(["a", "b", "c", "-", "\\.", ".", "[ab]", "\\d", "x", "yz"])


@st.composite
def _patterns(draw: st.DrawFn, depth: int = 2) -> str:
    parts = []
    for _ in range(draw(st.integers(1, 5))):
        if depth and draw(st.booleans()):
            inner = [draw(_patterns(depth=depth - 1)) for _ in range(draw(st.integers(1, 2)))]
            group = f"({draw(st.sampled_from(['', '?:']))}{'|'.join(inner)})"
            # a group repeats boundedly: nested unbounded repeats make Python's re backtrack for ever
            parts.append(group + draw(st.sampled_from(["", "?", "{0,2}", "{1,2}", "{2}"])))
        else:
            parts.append(draw(_ATOMS) + draw(st.sampled_from(["", "", "?", "*", "+", "{0,2}", "{1,2}", "{2}", "+?"])))
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


def test_a_query_reads_its_blocks_and_what_no_index_covers_in_few_ranges() -> None:
    b = log_index.BLOCK_LINES
    assert log_index.seq_ranges([], 10 * b) == []
    assert log_index.seq_ranges([2, 3, 4, 6, 20], 10 * b) == [(2 * b, 5 * b - 1), (6 * b, 7 * b - 1)]
    assert log_index.seq_ranges([9], 9 * b + 5) == [(9 * b, 9 * b + 5)]  # no further than what was stored
    assert log_index.seq_ranges([1, 5], 10 * b, indexed_from=b + 7) == [(0, 2 * b - 1), (5 * b, 6 * b - 1)]
    ranges = log_index.seq_ranges(list(range(0, 1000, 2)), 1000 * b)  # every other block: merged into MAX_RANGES
    assert len(ranges) == log_index.MAX_RANGES
    read = {s // b for lo, hi in ranges for s in range(lo, hi + 1, b)}
    assert read >= set(range(0, 1000, 2))  # nothing that might match is skipped
    assert len(read) < 1000  # and some is


PIDS = (42, 43)


def test_windows_cover_the_ranges_once_in_order_each_wider(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log_index, "FIRST_WINDOW", 8)
    ranges = [(0, 9), (20, 29), (100, 399)]
    for newest in (False, True):
        windows = list(log_index.windows(ranges, newest))
        seqs = [s for window in windows for lo, hi in window for s in range(lo, hi + 1)]
        covered = [s for lo, hi in ranges for s in range(lo, hi + 1)]
        assert sorted(seqs) == covered and len(set(seqs)) == len(seqs)
        assert [min(w)[0] for w in windows] == sorted((min(w)[0] for w in windows), reverse=newest)
        spans = [max(w)[1] - min(w)[0] for w in windows]
        assert spans[0] < 8 and len(windows) <= 4  # 8, 32, 128, 512 lines of seq
    assert list(log_index.windows([], True)) == []


def _store_lines(tmp_path: Path, store: Store, batches: list[list[str]]) -> None:
    """Each batch stored as an agent would send it: its lines written to two workers' files, by turns."""
    logs = tmp_path / "ray" / "session_2026-11-23_01-02-03_000000_9" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    tailer = Tailer(logs.parent.parent, tmp_path / "checkpoint.json")
    for lines in batches:
        for i, line in enumerate(lines):
            pid = PIDS[i % 2]
            with (logs / f"worker-{f'{pid:02x}' * 28}-01000000-{pid}.out").open("a") as out:
                out.write(line + "\n")
        tailer.scan()
        chunks = tailer.read(1 << 24)
        apply_logs(store, [batch_body("node-1", chunks, [])])
        tailer.commit(chunks, [])
    tailer.close()


def _found(con: duckdb.DuckDBPyConnection, **query: object) -> list[str]:
    result = log_lines(con, LogQuery(session=latest_session(con), limit=10_000, **query))  # type: ignore[arg-type]
    rows = orjson.loads(result.rows)
    assert result.total == len(rows)
    return sorted(row["text"] for row in rows)


def _expected(lines: list[str], grep: str | None = None, regex: str | None = None, pid: int | None = None) -> list[str]:
    return sorted(
        line
        for i, line in enumerate(lines)
        if (grep is None or grep in line)
        and (regex is None or re.search(regex, line))
        and (pid is None or PIDS[i % 2] == pid)  # each batch below starts on an even line
    )


def _with_context(lines: list[str], needle: str, n: int) -> list[tuple[int, str, bool]]:
    """(pid, text, context) of the lines holding ``needle`` and the ``n`` before and after each in its file."""
    out = set()
    for pid in PIDS:
        own = [line for i, line in enumerate(lines) if PIDS[i % 2] == pid]
        found = [k for k, line in enumerate(own) if needle in line]
        near = {j for k in found for j in range(max(0, k - n), min(len(own), k + n + 1))}
        out |= {(pid, own[j], j not in found) for j in near}
    return sorted(out)


def test_queries_through_the_indexes_find_what_a_scan_of_every_line_finds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(log_index, "BLOCK_LINES", 16)  # many blocks, several lines of a batch in each, and batches
    rng = random.Random(7)
    words = ["alpha", "beta", "gamma", "delta", "OOM", "Traceback", "shard-00042", "ümlaut", "x"]
    lines = [" ".join(rng.choice(words) + str(rng.randrange(50)) for _ in range(3)) for _ in range(900)]
    lines[436] = "Traceback (most recent call last): the needle"  # in one block only
    store = Store(tmp_path / "data")
    try:
        _store_lines(tmp_path, store, [lines[:6], lines[6:400], lines[400:402], lines[402:]])  # blocks filled twice
        con = store.reader()
        assert con.execute("SELECT count(*) FROM log_blocks").fetchall()[0][0] == 900 // 16 + 1
        searches: list[dict[str, object]] = [
            {"grep": "the needle"},
            {"grep": "OOM1"},
            {"grep": "ümlaut3"},
            {"grep": "gamma49 x"},
            {"grep": "absent"},
            {"grep": "al"},  # too short to be indexed
            {"regex": "Trace(back)? \\(most"},
            {"regex": "delta[0-9]+ OOM4"},
            {"regex": "beta|gamma7"},
            {"pid": 43},
            {"pid": 42, "grep": "OOM1"},
            {"pid": 44},
        ]
        monkeypatch.setattr(log_index, "FIRST_WINDOW", 8)  # pages found across several windows
        for search in searches:
            assert _found(con, **search) == _expected(lines, **search), search  # type: ignore[arg-type]
            every = orjson.loads(log_lines(con, LogQuery(session=latest_session(con), limit=10_000, **search)).rows)  # type: ignore[arg-type]
            for newest in (False, True):
                page = log_lines(
                    con, LogQuery(session=latest_session(con), limit=7, newest=newest, **search), count=False
                )  # type: ignore[arg-type]
                assert orjson.loads(page.rows) == (every[-7:] if newest else every[:7]), (search, newest)
        for needle, n in [("OOM1", 1), ("delta3", 3), ("the needle", 40)]:  # context across many blocks too
            rows = orjson.loads(
                log_lines(
                    con, LogQuery(session=latest_session(con), grep=needle, context=n, limit=10_000), count=False
                ).rows
            )
            found = sorted((r["pid"], r["text"], bool(r.get("context"))) for r in rows)
            assert found == _with_context(lines, needle, n), (needle, n)
        has_needle = " AND ".join(f"get_bit(grams, {b}) = 1" for b in log_index.needle_grams(["the needle"]))
        (maybe,) = con.execute(f"SELECT count(*) FROM log_blocks WHERE {has_needle}").fetchall()[0]
        assert maybe == 1  # the needle's block is all a search for it reads
    finally:
        store.close()


def test_lines_stored_before_the_indexes_existed_are_found(tmp_path: Path) -> None:
    store = Store(tmp_path / "data")
    _store_lines(tmp_path, store, [["old needle", "old other"]])
    store.con.execute("DROP TABLE log_blocks")  # as a store of schema 7 had them
    store.con.execute("DROP TABLE log_file_blocks")
    store.con.execute("UPDATE meta SET value = '7' WHERE key = 'schema_version'")  # (8 had the first alone)
    store.close()
    store = Store(tmp_path / "data")
    try:
        _store_lines(tmp_path, store, [["new needle", "new other"]])
        con = store.reader()
        assert _found(con, grep="needle") == ["new needle", "old needle"]
        assert _found(con, pid=43) == ["new other", "old other"]
    finally:
        store.close()
