"""Coarse indexes of the stored log lines, so that a query reads only the lines that may match.

Lines are grouped in blocks of :data:`BLOCK_LINES` consecutive ``seq`` values. Each block keeps a bitmap of the
trigrams (three consecutive bytes) its text holds, each hashed to one of :data:`GRAM_BITS` bits (``log_blocks``); a
search for a substring (or a regex, by the literals every match must contain) needs every trigram of the literal.
Each file keeps the blocks that hold its lines, with their byte offsets and times (``log_file_blocks``): a query by
worker, pid, file, actor, node or task attempt needs its files' blocks. DuckDB then reads only the row groups of
those blocks (``seq`` rises as lines are stored, so its zone maps prune). False positives only cost reading; a block
is never wrongly skipped. Lines stored before the indexes existed are always read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa

try:
    import re._parser as sre_parse  # type: ignore[import-not-found]  # Python 3.11+
except ImportError:  # pragma: no cover - Python 3.10
    import sre_parse  # type: ignore[no-redef]

BLOCK_LINES = 8192
GRAM_BITS = 1 << 16
MAX_GRAMS = 64  # bits tested by a search
MAX_RANGES = 64  # a query's seq ranges; more are merged across their narrowest gaps (reading a little more)
FIRST_WINDOW = 1 << 18  # lines (of seq) a query reads first; each next window is four times the one before
_MULTIPLIER = np.uint32(2654435761)  # Knuth's multiplicative hash: the top 16 of 32 bits


def _gram_hashes(data: np.ndarray) -> np.ndarray:
    """The hashed trigram of each position of ``data`` (bytes as uint8)."""
    if len(data) < 3:
        return np.empty(0, np.uint32)
    grams = (data[:-2].astype(np.uint32) << 16) | (data[1:-1].astype(np.uint32) << 8) | data[2:].astype(np.uint32)
    return (grams * _MULTIPLIER) >> np.uint32(16)


def _bitmap(hashes: np.ndarray) -> bytes:
    bits = np.zeros(GRAM_BITS, np.bool_)
    bits[hashes] = True
    return np.packbits(bits).tobytes()  # bit i is byte i // 8's (i % 8)th from the top, as DuckDB's get_bit counts


def block_grams(lines: pa.Table) -> pa.Table:
    """Each block's bitmap (``block``, ``grams``) of the trigrams in the ``text`` of ``lines`` (rising ``seq``)."""
    if lines.num_rows == 0:
        return pa.table({"block": pa.array([], pa.int64()), "grams": pa.array([], pa.binary())})
    text = lines.column("text").combine_chunks().cast(pa.large_string())
    offsets = np.frombuffer(text.buffers()[1], np.int64)[text.offset : text.offset + len(text) + 1]
    data = np.frombuffer(text.buffers()[2], np.uint8)
    blocks = lines.column("seq").to_numpy() // BLOCK_LINES
    starts = np.flatnonzero(np.diff(blocks, prepend=-1))
    ends = [*starts[1:], len(blocks)]
    # Trigrams spanning two lines are kept too: they cost a few bits and never hide a line
    grams = [_bitmap(_gram_hashes(data[offsets[s] : offsets[e]])) for s, e in zip(starts, ends)]
    return pa.table({"block": pa.array(blocks[starts], pa.int64()), "grams": pa.array(grams, pa.binary())})


def needle_grams(literals: Iterable[str]) -> list[int]:
    """The bits a block's bitmap must have set to contain every one of ``literals``: at most :data:`MAX_GRAMS` of
    them (a long needle's first are enough to skip nearly every block that lacks it), none for short literals."""
    hashes = [_gram_hashes(np.frombuffer(s.encode(), np.uint8)) for s in literals]
    return sorted({int(h) for h in (np.concatenate(hashes) if hashes else [])})[:MAX_GRAMS]


def required_literals(pattern: str) -> list[str]:
    """Strings every match of the regex ``pattern`` contains (conservatively: fewer, or none, when unsure)."""
    try:
        parsed = sre_parse.parse(pattern)
    except re.error:
        return []
    if parsed.state.flags & re.IGNORECASE:
        return []
    runs: list[str] = []
    _collect(list(parsed), runs)
    return [r for r in runs if r]


def _collect(items: list, runs: list[str]) -> None:
    """Append to ``runs`` the literal runs of a sequence of parsed regex items; a run ends wherever it is unsure."""
    run: list[str] = []

    def end() -> None:
        runs.append("".join(run))
        run.clear()

    for op, arg in items:
        if op is sre_parse.LITERAL:
            run.append(chr(arg))
        elif op is sre_parse.SUBPATTERN and not (arg[1] & re.IGNORECASE):
            end()
            _collect(list(arg[3]), runs)
        elif op in (sre_parse.MAX_REPEAT, sre_parse.MIN_REPEAT) and arg[0] >= 1:
            end()  # present at least once: what it must contain is required, but not next to its neighbours
            _collect(list(arg[2]), runs)
        else:  # a class, any character, an alternation, an optional part, an anchor, a reference
            end()
    end()


def seq_ranges(blocks: list[int], last_seq: int, indexed_from: int = 0) -> list[tuple[int, int]]:
    """The ``seq`` ranges to read: those of ``blocks`` (ascending), and every line to ``indexed_from`` (stored before
    the index was), up to ``last_seq``; at most :data:`MAX_RANGES` of them, merged across the narrowest gaps (the
    fewest lines read that cannot match)."""
    ranges: list[tuple[int, int]] = [(0, indexed_from)] if indexed_from > 0 else []
    for block in blocks:
        lo, hi = block * BLOCK_LINES, min(block * BLOCK_LINES + BLOCK_LINES - 1, last_seq)
        if lo > last_seq:
            break
        if ranges and lo <= ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], max(hi, ranges[-1][1]))
        else:
            ranges.append((lo, hi))
    if len(ranges) <= MAX_RANGES:
        return ranges
    by_width = sorted(range(len(ranges) - 1), key=lambda i: ranges[i + 1][0] - ranges[i][1])
    kept = set(by_width[len(ranges) - MAX_RANGES :])  # the widest gaps (gap i follows range i)
    merged = [ranges[0]]
    for i in range(1, len(ranges)):
        if i - 1 in kept:
            merged.append(ranges[i])
        else:
            merged[-1] = (merged[-1][0], ranges[i][1])
    return merged


def clip(ranges: list[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    """``ranges`` within ``lo``…``hi``."""
    return [(max(a, lo), min(b, hi)) for a, b in ranges if a <= hi and b >= lo]


def windows(ranges: list[tuple[int, int]], newest: bool = False) -> Iterator[list[tuple[int, int]]]:
    """``ranges`` cut into consecutive windows of ``seq``, from the lowest (the highest, ``newest``), each four times
    the span of the one before: a query that wants only the first (or last) matches reads little more than it must."""
    if not ranges:
        return
    lo, hi, span = ranges[0][0], ranges[-1][1], FIRST_WINDOW
    while lo <= hi:
        window = clip(ranges, max(lo, hi - span + 1), hi) if newest else clip(ranges, lo, min(hi, lo + span - 1))
        if newest:
            hi -= span
        else:
            lo += span
        span *= 4
        if window:
            yield window


def around(blocks: list[tuple[int, int]], seq: int, lines: int) -> list[int]:
    """The blocks to read for the ``lines`` lines before and after line ``seq`` of a file whose lines are in
    ``blocks`` ((block, lines of the file in it), ascending): the line's own, and the file's before and after it
    until they hold that many of its lines."""
    at = next(i for i, (block, _) in enumerate(blocks) if block == seq // BLOCK_LINES)
    first, last, before, after = at, at, 0, 0
    while first > 0 and before < lines:
        first -= 1
        before += blocks[first][1]
    while last < len(blocks) - 1 and after < lines:
        last += 1
        after += blocks[last][1]
    return [block for block, _ in blocks[first : last + 1]]
