"""The ingest journal: records survive a reopen in order, a torn tail is cut, damage costs only the records it covers,
folded segments are released."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest

from raysight.store import journal as journal_module
from raysight.store.journal import Journal


def test_records_replay_in_order_after_a_reopen_and_numbering_goes_on(tmp_path: Path) -> None:
    j = Journal(tmp_path, folded=0)
    first = j.append([("lab", "run", b"[1]", 1), (None, None, b"[2]", 1)])
    j.close()
    j = Journal(tmp_path, folded=0)
    assert [(r.seq, r.label, r.run_id, r.body) for r in j.replay(0)] == [
        (1, "lab", "run", b"[1]"),
        (2, None, None, b"[2]"),
    ]
    assert [r.seq for r in j.append([(None, None, b"[3]", 1)])] == [3]
    assert [r.body for r in j.replay(folded=first[-1].seq)] == [b"[3]"]
    j.close()


def test_a_torn_last_append_is_cut_and_never_replayed(tmp_path: Path) -> None:
    j = Journal(tmp_path, folded=0)
    j.append([(None, None, b"[1]", 1)])
    j.close()
    (segment,) = tmp_path.glob("*.log")
    good = segment.stat().st_size
    with segment.open("ab") as f:
        f.write(b"\x40\x00\x00\x00garbage")
    j = Journal(tmp_path, folded=0)
    assert segment.stat().st_size == good and [r.body for r in j.replay(0)] == [b"[1]"]
    assert j.append([(None, None, b"[2]", 1)])[0].seq == 2
    j.close()


def test_segments_whose_records_are_all_folded_are_released(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal_module, "SEGMENT_BYTES", 10)  # a segment per append
    j = Journal(tmp_path, folded=0)
    for n in range(4):
        j.append([(None, None, f"[{n}]".encode(), 1)])
    assert len(list(tmp_path.glob("*.log"))) == 4
    j.release(folded=2)
    assert [r.seq for r in j.replay(0)] == [3, 4]
    j.release(folded=4)
    assert [r.seq for r in j.replay(0)] == [4]  # the segment being appended to stays
    j.close()


def test_a_zeroed_block_mid_segment_costs_only_the_records_it_covers(tmp_path: Path) -> None:
    j = Journal(tmp_path, folded=0)
    records = [j.append([(None, None, b"[%02d]" % n + b" " * 100, 1)])[0] for n in range(40)]
    j.close()
    (segment,) = tmp_path.glob("*.log")
    data = bytearray(segment.read_bytes())
    data[1000:1500] = bytes(500)  # a lost write-back: a few records' worth of zeros
    segment.write_bytes(data)
    j = Journal(tmp_path, folded=0)
    replayed = [r.seq for r in j.replay(0)]
    size = len(data) // len(records)
    covered = set(range(1000 // size + 1, 1500 // size + 2))
    assert replayed == [r.seq for r in records if r.seq not in covered]
    assert j.damage()["corrupt"] == 1 and j.damage()["corrupt_bytes"] >= 500
    assert j.append([(None, None, b"[]", 0)])[0].seq == 41
    j.close()


def test_a_segment_written_before_sync_markers_is_replayed_after_an_upgrade(tmp_path: Path) -> None:
    def legacy(seq: int, body: bytes) -> bytes:  # raysight's journal record before sync markers
        payload = b'["lab",null]\n' + body
        return struct.pack("<IIQ", len(payload), zlib.crc32(payload), seq) + payload

    (tmp_path / f"{1:016d}.log").write_bytes(legacy(1, b"[1]") + legacy(2, b"[2]") + legacy(3, b"[3")[:9])
    j = Journal(tmp_path, folded=1)
    assert [(r.seq, r.label, r.body) for r in j.replay(1)] == [(2, "lab", b"[2]")]
    assert j.append([(None, None, b"[4]", 1)])[0].seq == 3
    assert [r.seq for r in j.replay(1)] == [2, 3] and j.damage() == {"corrupt": 0, "corrupt_bytes": 0, "torn": 1}
    j.close()
