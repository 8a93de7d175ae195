"""The node agent's tailer on real files: every line once, through Ray's rotation (also while the tailer looks),
copy-truncate, moves, restarts from the checkpoint, partial and huge lines, invalid UTF-8 and deleted files."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from raysight.agent.log_files import MAX_RECORD, describe, marker, named_as_copy, rotation_place, split
from raysight.agent.tailer import SETTLE_TRIES, Tailer

WORKER = "worker-" + "ab" * 28 + "-01000000-4242.out"


def test_a_worker_file_name_says_its_worker_job_pid_and_stream() -> None:
    info = describe(f"old/{WORKER}.2")
    assert info is not None
    assert (info.name, info.stream, info.worker_id, info.job_id, info.pid) == (
        WORKER,
        "stdout",
        "ab" * 28,
        "01000000",
        4242,
    )
    prestarted = describe(WORKER.replace("01000000", "ffffffff").replace(".out", ".err"))
    assert prestarted is not None and (prestarted.job_id, prestarted.stream) == (None, "stderr")
    assert describe("raylet.1.out").stream == "system"  # type: ignore[union-attr]
    assert describe("gcs_server.err").stream == "system"  # type: ignore[union-attr]
    assert describe("job-driver-raysubmit_1.log").stream == "stdout"  # type: ignore[union-attr]
    assert describe("dashboard.log").stream == "system"  # type: ignore[union-attr]
    assert describe("debug_state.txt") is None and describe("ports_by_node.json") is None


def test_a_rotation_s_places_and_the_names_logrotate_gives_a_copy() -> None:
    assert [rotation_place(n) for n in ("raylet.out", "raylet.out.3", "old/w.out.12")] == [
        ("raylet.out", 0),
        ("raylet.out", 3),
        ("old/w.out", 12),
    ]
    assert named_as_copy("w.out-20261123", "w.out", "w.out")  # dateext, beside its original
    assert named_as_copy("w.out-20261123", "w.out.1", "w.out")  # its original rotated since it was last seen
    assert named_as_copy("w.out.1", "w.out", "w.out")  # copytruncate's NAME.1 beside NAME
    assert not named_as_copy("w.out", "w.out.1", "w.out")  # the file Ray's rotation starts, under the old name
    assert not named_as_copy("w.out.1", "w.out.3", "w.out")  # Ray rotated three times between two looks


def test_split_keeps_a_partial_line_for_later_and_cuts_a_huge_one_into_flagged_pieces() -> None:
    pieces, used, mid = split(b"a\nbb\ncc", 100, False, final=False)
    assert [(p.offset, p.data, p.continued) for p in pieces] == [(100, b"a", False), (102, b"bb", False)]
    assert (used, mid) == (5, False)
    pieces, used, mid = split(b"cc", 105, False, final=True)
    assert [(p.data, p.continued) for p in pieces] == [(b"cc", False)] and (used, mid) == (2, True)
    huge = b"x" * (2 * MAX_RECORD + 10) + b"\nnext\n"
    pieces, used, mid = split(huge, 0, False, final=False)
    assert [(len(p.data), p.continued) for p in pieces] == [
        (MAX_RECORD, False),
        (MAX_RECORD, True),
        (10, True),
        (4, False),
    ]
    assert b"".join(p.data for p in pieces[:3]) == b"x" * (2 * MAX_RECORD + 10) and used == len(huge) and not mid
    exact = b"y" * MAX_RECORD + b"\n"
    assert [len(p.data) for p in split(exact, 0, False, final=False)[0]] == [MAX_RECORD]


def test_markers_are_ray_s_in_band_lines() -> None:
    assert marker(b":task_name:f") == ("task_name", "f")
    assert marker(b":actor_name:Counter(n=0)") == ("actor_name", "Counter(n=0)")
    assert marker(b":job_id:01000000") == ("job_id", "01000000")
    assert marker(b"plain :task_name: text") is None


class Collector:
    """Reads through a Tailer as the agent does (scan, read, commit), keeping every record's text."""

    def __init__(self, ray_dir: Path, state: Path) -> None:
        self.ray_dir, self.state = ray_dir, state
        self.tailer = Tailer(ray_dir, state / "checkpoint.json")
        self.texts: list[str] = []
        self.records: list[tuple[str, str, int, dict[str, str]]] = []

    def pump(self, final: bool = False, commit: bool = True) -> int:
        got = 0
        while True:
            self.tailer.scan()
            chunks = self.tailer.read(1 << 20, final=final)
            if not chunks:
                return got
            for chunk in chunks:
                for piece, context, _ in chunk.pieces:
                    self.texts.append(piece.data.decode("utf-8", "replace"))
                    self.records.append((chunk.file.key, chunk.file.info.name, piece.offset, context))
                    got += 1
            if not commit:
                return got
            self.tailer.commit(chunks, [])

    def restart(self) -> None:
        self.tailer.close()
        self.tailer = Tailer(self.ray_dir, self.state / "checkpoint.json")


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    path = tmp_path / "ray" / "session_2026-11-23_00-00-00_000000_1" / "logs"
    path.mkdir(parents=True)
    (tmp_path / "ray" / "session_latest").symlink_to(path.parent)
    return path


def _write(path: Path, first: int, count: int) -> int:
    with path.open("a") as f:
        for i in range(first, first + count):
            f.write(f"line {i}\n")
    return first + count


def _numbers(texts: list[str]) -> list[int]:
    return [int(t.split()[1]) for t in texts if t.startswith("line ")]


def test_every_line_once_through_rename_rotation_copy_truncate_moves_and_restarts(logs: Path, tmp_path: Path) -> None:
    c = Collector(logs.parent.parent, tmp_path / "state")
    live = logs / WORKER
    n = _write(live, 0, 100)
    c.pump()
    n = _write(live, n, 50)
    # Ray's rotation: rename to .1, a new file under the old name; lines written to the renamed one before the rename
    live.rename(logs / f"{WORKER}.1")
    n = _write(live, n, 30)
    c.pump()
    # an outside logrotate's copy-truncate, with lines the agent had not read yet at the copy
    n = _write(live, n, 20)
    shutil.copyfile(live, logs / f"{WORKER}-20261123")
    os.truncate(live, 0)
    n = _write(live, n, 10)
    c.pump()
    # the agent killed after reading but before its checkpoint moved, then restarted
    n = _write(live, n, 25)
    c.pump(commit=False)
    c.texts = c.texts[: len(c.texts) - 25]
    c.restart()
    c.pump()
    # Ray moves a dead worker's file to old/ (a rename within logs/), and it grows there
    (logs / "old").mkdir()
    live.rename(logs / "old" / WORKER)
    n = _write(logs / "old" / WORKER, n, 5)
    c.restart()  # a restart while it was moved
    c.pump()
    assert sorted(_numbers(c.texts)) == list(range(n))  # each once (files are read in any order)


def test_a_partial_line_waits_for_its_end_and_a_deleted_file_is_read_to_its_end(logs: Path, tmp_path: Path) -> None:
    c = Collector(logs.parent.parent, tmp_path / "state")
    path = logs / "raylet.out"
    path.write_bytes(b"whole\nhal")
    c.pump()
    assert c.texts == ["whole"]
    with path.open("ab") as f:
        f.write(b"f\nlast")
    c.pump()
    assert c.texts == ["whole", "half"]
    tail = logs / "gcs_server.out"
    _write(tail, 0, 1000)
    c.tailer.scan()  # found (and opened) before it is deleted
    tail.unlink()
    c.pump()
    assert sorted(_numbers(c.texts)) == list(range(1000))
    c.pump(final=True)
    assert c.texts[-1] == "last"


def test_markers_give_each_line_its_job_task_and_actor_across_a_restart(logs: Path, tmp_path: Path) -> None:
    c = Collector(logs.parent.parent, tmp_path / "state")
    path = logs / WORKER
    path.write_text(":job_id:01000000\n:task_name:f\nfrom f\n:actor_name:Counter\n")
    c.pump()
    c.restart()
    with path.open("a") as f:
        f.write("from the actor\n")
    c.pump()
    assert c.records[2][3] == {"job_id": "01000000", "task_name": "f"}
    assert c.records[-1][3] == {"job_id": "01000000", "task_name": "f", "actor_name": "Counter"}


def test_binary_and_invalid_utf8_files_are_read_without_loss(logs: Path, tmp_path: Path) -> None:
    c = Collector(logs.parent.parent, tmp_path / "state")
    data = bytes(range(256)) * 300 + b"\n\xff\xfe tail \xc3\x28\n"
    (logs / "binary.log").write_bytes(data)
    c.tailer.scan()
    chunks = c.tailer.read(1 << 20)
    assert b"\n".join(p.data for chunk in chunks for p, _, _ in chunk.pieces) + b"\n" == data


def test_an_idle_file_s_descriptor_is_closed_and_reopened_once_it_grows(
    logs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("raysight.agent.tailer.IDLE_CLOSE_S", 0.0)
    c = Collector(logs.parent.parent, tmp_path / "state")
    n = _write(logs / WORKER, 0, 5)
    c.pump()
    c.pump()  # read to its end, and idle: closed
    assert [o.fd for o in c.tailer._open.values()] == [None]
    opened = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda *a, **k: opened.append(a[0]) or real_open(*a, **k))
    c.pump()
    assert opened == []  # not reopened while it does not grow
    n = _write(logs / WORKER, n, 3)
    c.pump()
    assert sorted(_numbers(c.texts)) == list(range(n))


def test_a_task_s_markers_go_on_in_the_file_that_rotation_starts(logs: Path, tmp_path: Path) -> None:
    """Ray writes a task's markers once, when it starts; its later output may be in the next file of a rotation."""
    c = Collector(logs.parent.parent, tmp_path / "state")
    live = logs / WORKER
    live.write_text(":job_id:01000000\n:task_name:f\nf 0\n")
    c.pump()
    live.rename(logs / f"{WORKER}.1")
    live.write_text("f 1\n:task_name:g\ng 0\n")
    c.pump()
    # twice more before the agent looks again (and a restart meanwhile): the middle file's markers reach the last
    (logs / f"{WORKER}.1").rename(logs / f"{WORKER}.2")
    live.rename(logs / f"{WORKER}.1")
    live.write_text("g 1\n")
    c.tailer.scan()
    c.restart()
    c.pump()
    tasks = {text: context.get("task_name") for text, (*_, context) in zip(c.texts, c.records)}
    assert {t: tasks[t] for t in ("f 0", "f 1", "g 0", "g 1")} == {"f 0": "f", "f 1": "f", "g 0": "g", "g 1": "g"}
    assert c.texts.count("g 1") == 1
    # another worker's file rotated four times before the agent first looks: its first file's markers reach the last
    other = logs / WORKER.replace("4242", "4343")
    for i in range(5):
        if i:
            _rotate(other)
        other.write_text(f":task_name:h\nh {i}\n" if i == 0 else f"h {i}\n")
    c.pump()
    tasks = [context.get("task_name") for text, (*_, context) in zip(c.texts, c.records) if text.startswith("h ")]
    assert tasks == ["h"] * 5


def test_the_files_ray_rotation_starts_are_read_at_once_even_when_they_begin_as_the_one_before(
    logs: Path, tmp_path: Path
) -> None:
    """A task printing the same line over and over: each new file's first bytes are those of the file renamed away,
    as a copy's are its original's; yet nothing was copied, and nothing waits to be told apart."""
    c = Collector(logs.parent.parent, tmp_path / "state")
    live = logs / WORKER
    live.write_text("tick\n" * 50)
    c.pump()
    _rotate(live)  # the new file under the old one's name
    live.write_text("tick\n" * 50)
    c.pump()
    for _ in range(2):  # twice before the agent looks again: NAME.1 beside a file renamed away from NAME
        _rotate(live)
        live.write_text("tick\n" * 50)
    c.pump()
    assert c.texts == ["tick"] * 200


def _rotate(live: Path) -> None:
    """As Ray rotates a file: NAME.k to NAME.k+1 (oldest first), NAME to NAME.1."""
    rotated = sorted(live.parent.glob(live.name + ".*"), key=lambda p: int(p.suffix[1:]), reverse=True)
    for older in rotated:
        older.rename(live.with_name(f"{live.name}.{int(older.suffix[1:]) + 1}"))
    live.rename(live.with_name(live.name + ".1"))


def _print_rotated(live: Path, lines: int, max_bytes: int, go: threading.Event) -> None:
    """As a Ray worker prints under ``RAY_ROTATION_MAX_BYTES``: a task's markers, then numbered lines, each written
    whole, the file rotated (:func:`_rotate`) before a line would take it past ``max_bytes``."""
    go.wait()
    f = live.open("ab", buffering=0)
    f.write(b":job_id:01000000\n:task_name:printer\n")
    for i in range(lines):
        line = f"line {i} padded to rotate the file sooner ................................\n".encode()
        if f.tell() + len(line) > max_bytes:
            f.close()
            _rotate(live)
            f = live.open("ab", buffering=0)
        f.write(line)
    f.close()


def _moving_between_walk_and_stat(monkeypatch: pytest.MonkeyPatch, logs: Path, move: Callable[[], None]) -> None:
    """Ray moves files on (``move``) at each of the tailer's walks of ``logs``, before it stats what it walked."""
    walk = os.scandir

    def scandir(path: str | Path) -> Iterator[os.DirEntry[str]]:
        if path != str(logs):  # (not the tailer's walk: a glob's, of a Path)
            return walk(path)
        entries = list(walk(path))
        move()
        return iter(entries)

    monkeypatch.setattr(os, "scandir", scandir)


def test_every_line_once_in_order_and_in_its_task_while_ray_rotates_as_the_tailer_looks(
    logs: Path, tmp_path: Path
) -> None:
    """Ray rotates a busy worker's file several times in a few milliseconds: a look at the directory then may see a
    file under its old and new names, or miss it. Run many times with the tailer looking throughout."""
    for trial in range(150):
        live = tmp_path / f"ray{trial}" / logs.parent.name / "logs" / WORKER
        live.parent.mkdir(parents=True)
        live.touch()
        c = Collector(live.parent.parent.parent, tmp_path / f"state{trial}")
        c.pump()
        go = threading.Event()
        printer = threading.Thread(target=_print_rotated, args=(live, 200, 2048, go))
        printer.start()
        time.sleep(trial % 7 * 0.0005)  # the first look at a different moment each time
        go.set()
        deadline = time.monotonic() + 30
        while printer.is_alive() and time.monotonic() < deadline:
            c.pump()
        printer.join()
        c.pump(final=True)
        c.tailer.close()
        lines = [(text, context.get("task_name")) for text, (*_, context) in zip(c.texts, c.records)]
        assert len(list(live.parent.iterdir())) > 5  # rotated
        assert lines[2:] == [(f"line {i} padded to rotate the file sooner {'.' * 32}", "printer") for i in range(200)]


@pytest.mark.parametrize("alike", [True, False], ids=["two-alike-looks-miss-it", "no-look-holds-still"])
def test_a_file_rotated_past_the_tailer_s_looks_still_comes_first_with_its_markers(
    logs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, alike: bool
) -> None:
    """A look is a walk of the names, then a stat of each: Ray's renames in between may hide a file from it, even from
    two looks in a row that agree, or go on through every look of a scan. Each rotation is made here between a walk
    and its stats; the files that follow the hidden one are read after it, with its markers."""
    c = Collector(logs.parent.parent, tmp_path / "state")
    live = logs / WORKER
    live.write_text(":job_id:01000000\n:task_name:printer\nline 0\n")
    c.pump()
    n = _write(live, 1, 1)  # not read yet

    def rotate() -> None:  # Ray rotates the file; the worker prints a line in the new one
        nonlocal n
        _rotate(live)
        n = _write(live, n, 1)

    moves: list[Callable[[], None]]
    if alike:  # the first file moves past the first look (to .2) and the second (.2 to .3: the next rotation begins)
        rotate()
        moves = [rotate, lambda: (logs / f"{WORKER}.2").rename(logs / f"{WORKER}.3")]
    else:
        moves = [rotate] * (SETTLE_TRIES + 2)
    _moving_between_walk_and_stat(monkeypatch, logs, lambda: moves.pop(0)() if moves else None)
    c.pump()
    monkeypatch.undo()
    if alike:  # the rotation begun goes on
        (logs / f"{WORKER}.1").rename(logs / f"{WORKER}.2")
        live.rename(logs / f"{WORKER}.1")
        n = _write(live, n, 1)
    c.pump(final=True)
    lines = [(text, context.get("task_name")) for text, (*_, context) in zip(c.texts, c.records)]
    assert not moves and lines[2:] == [(f"line {i}", "printer") for i in range(n)]


def test_a_final_read_reads_the_files_no_look_could_place(
    logs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files Ray rotated through every look of a scan wait for a look that holds still to know which file they follow,
    but the final read (the agent draining, the files to grow no more) reads them as they are: out of order rather
    than never."""
    tailer = Tailer(logs.parent.parent, tmp_path / "checkpoint.json")
    live = logs / WORKER
    n = _write(live, 0, 1)
    tailer.scan()

    def rotate() -> None:  # at every look
        nonlocal n
        _rotate(live)
        n = _write(live, n, 1)

    _moving_between_walk_and_stat(monkeypatch, logs, rotate)
    tailer.scan()
    monkeypatch.undo()

    def read(final: bool) -> set[bytes]:
        chunks = tailer.read(1 << 20, final=final)
        tailer.commit(chunks, [])
        return {piece.data for chunk in chunks for piece, _, _ in chunk.pieces}

    assert read(final=False) == {b"line 0"}  # the first file: the files after it wait
    assert read(final=True) == {f"line {i}".encode() for i in range(1, n)}
    tailer.close()


def test_files_rotated_twice_between_looks_as_ray_deletes_the_oldest_follow_the_files_before_them(
    logs: Path, tmp_path: Path
) -> None:
    """With two backups, Ray deletes ``NAME.2`` before each rotation: a file deleted since the last look is not where
    that look saw it, and the files rotated past it meanwhile are read after the one they followed, not after it."""
    c = Collector(logs.parent.parent, tmp_path / "state")
    live = logs / WORKER
    n = 0
    for task in "abc":
        if task != "a":
            _rotate(live)
        live.write_text(f":task_name:{task}\n")
        n = _write(live, n, 1)
        c.pump()
    n = _write(live, n, 1)  # not read yet
    for task in "de":
        (logs / f"{WORKER}.2").unlink()
        _rotate(live)
        live.write_text(f":task_name:{task}\n")
        n = _write(live, n, 1)
    c.pump(final=True)
    lines = [(text, context.get("task_name")) for text, (*_, context) in zip(c.texts, c.records)]
    assert [line for line in lines if line[0].startswith("line ")] == [
        (f"line {i}", task) for i, task in enumerate("abccde")
    ]


def test_only_sessions_active_since_are_followed_and_an_old_one_is_looked_at_again_now_and_then(
    logs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A machine keeps hundreds of old sessions: one not active since ``since`` is not looked at on every scan, but
    every RECHECK_S (a cluster it ran may be joined again)."""
    monkeypatch.setattr("raysight.agent.tailer.RECHECK_S", 2.0)
    old = logs.parent.parent / "session_2026-11-01_00-00-00_000000_1" / "logs"
    old.mkdir(parents=True)
    (old / "raylet.out").write_text("old line\n")
    os.utime(old, (1, 1))
    (logs / "raylet.out").write_text("new line\n")
    tailer = Tailer(logs.parent.parent, tmp_path / "checkpoint.json", since=time.time() - 60)
    tailer.scan()
    assert tailer.sessions == {logs.parent.name}  # (not the old one, nor session_latest, a link to the new one)
    (old / f"python-core-driver-{'ab' * 28}_9.log").write_text("joined again\n")  # its logs/ changes now
    tailer.scan()
    assert tailer.sessions == {logs.parent.name}  # not looked at again yet
    time.sleep(2.1)
    tailer.scan()
    assert tailer.sessions == {logs.parent.name, old.parent.name}
    read = {piece.data for chunk in tailer.read(1 << 20) for piece, _, _ in chunk.pieces}
    assert read == {b"new line", b"old line", b"joined again"}


def test_files_deleted_unread_are_held_up_to_the_spool_bound_and_the_oldest_past_it_are_gaps(
    logs: Path, tmp_path: Path
) -> None:
    tailer = Tailer(logs.parent.parent, tmp_path / "checkpoint.json", spool_bytes=1500)
    names = ("raylet.out.3", "raylet.out.2", "raylet.out.1")  # rotated away, oldest first
    for name in names:
        (logs / name).write_text("".join(f"{name} {i:03d}\n" for i in range(50)))  # 850 bytes each
    tailer.scan()  # opened: their descriptors now hold them
    for name in names:
        (logs / name).unlink()
        tailer.scan()  # (each gone after the one before)
    # 2550 bytes unread in deleted files, 1500 allowed: the two oldest are dropped, each a gap from where it was read
    assert [(g.file.path, g.start, g.end) for g in tailer.gaps] == [("raylet.out.3", 0, 850), ("raylet.out.2", 0, 850)]
    assert "over the agent's spool of 1,500 bytes" in tailer.gaps[0].why
    chunks = tailer.read(1 << 20)
    assert {chunk.path for chunk in chunks} == {"raylet.out.1"}  # the newest is still read to its end
    assert len(chunks[0].pieces) == 50
