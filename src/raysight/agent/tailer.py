"""Following every log file of a node's Ray sessions, by identity rather than by name, with a checkpoint.

A file is known by its device and inode, so Ray's rotation (a rename to ``NAME.1``) and its move of dead workers' files
to ``logs/old/`` keep its place; its descriptor stays open, so a file deleted or rotated away is read to its end first,
and the file that rotation starts only after it. Ray may rotate a busy file several times in a few milliseconds: a look
at the directory that finds anything new is taken again until it holds still. A file that shrinks was truncated (an
outside logrotate's copy-truncate): its bytes start again under a new key, and the copy that logrotate made first (a new
file named after it whose first bytes are the same) is read from where the original was left, not from its start. What
was read becomes the checkpoint only once the server has made it durable (:meth:`Tailer.commit`), so a restart, even
after SIGKILL, reads on from there: lines the server had already taken before a crash are sent again and dropped there
by their offsets.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import orjson

from raysight.agent.log_files import FileInfo, Piece, describe, marker, named_as_copy, rotation_place, split

HEAD_BYTES = 256  # a file's first bytes: told apart from a reused inode, and matched by its copy
COPY_WAIT_S = 30.0  # a copy whose original is not truncated meanwhile is read from the original's offset anyway
IDLE_CLOSE_S = 30.0  # a descriptor of a file read to its end and not grown for this long is closed
READ_BYTES = 4 * 1024 * 1024  # at most this much of one file per read
SPOOL_BYTES = 1 << 30  # unread bytes held in deleted files at most (the server away): past it the oldest are dropped
RECHECK_S = 5.0  # between looks at a session that was not active since ``since``: has it become so?
SETTLE_TRIES = 10  # listings taken at most while the files move, for one that agrees with the one before
UNLINKED = "?"  # a new file's predecessor while not known: found by a look that did not hold still
Listed = tuple[str, str, str, os.stat_result]  # a file a look found: its session, name under logs/, path and stat


@dataclass
class Followed:
    """A file followed, and what of it was read and acknowledged (what the checkpoint keeps)."""

    session: str
    dev: int
    ino: int
    name: str  # under the session's logs/, when first seen
    path: str  # its name under logs/ when last seen (moved or rotated since it was first seen, perhaps)
    offset: int = 0  # bytes acknowledged
    mid_line: bool = False
    context: dict[str, str] = field(default_factory=dict)  # Ray's in-band markers so far: job_id, task_name, actor_name
    # The key of the file rotated away when this one took its name: its markers are in force here, once it is read
    # (UNLINKED: not known yet, and the file not read until it is)
    predecessor: str = ""
    head: str = ""  # hash of its first head_len bytes
    head_len: int = 0
    size: int = 0  # its size when last seen
    # These bytes, among all a host's files ever: a deleted file's inode is soon another's, and a truncated file's
    # bytes start again; the server keeps each offset of a key once.
    uid: str = field(default_factory=lambda: uuid.uuid4().hex[:16])

    @property
    def key(self) -> str:
        return f"{self.dev}-{self.ino}-{self.uid}"

    @property
    def info(self) -> FileInfo:
        info = describe(self.name)
        assert info is not None  # only logs are followed
        return info


@dataclass
class _Open:
    """A followed file's descriptor and where it is now."""

    path: Path
    fd: int | None = None
    grown_at: float = field(default_factory=time.monotonic)
    vanished: float | None = None  # when it left the directory: read to its end through the descriptor, then dropped


@dataclass(frozen=True)
class Chunk:
    """Records read from one file, and the state of the file once they are acknowledged."""

    file: Followed  # as it is now
    after: Followed  # as it will be
    path: str  # its name under the session's logs/ now
    pieces: list[tuple[Piece, dict[str, str], bool]]  # each record, the markers in force, whether it is a marker
    written_ns: int  # when the file was last written, as it was read: its records were written by then


@dataclass(frozen=True)
class Gap:
    """Bytes of a file that could not be read (it vanished before its end was read)."""

    file: Followed
    start: int
    end: int  # its size when last seen
    why: str


def _under_logs(path: Path) -> str:
    """A path's name under its session's ``logs/``."""
    return str(path).rsplit("/logs/", 1)[-1]


def _ident(st: os.stat_result) -> tuple[int, int]:
    """A file's identity: its device and inode."""
    return st.st_dev, st.st_ino


def _names(path: Path, ident: tuple[int, int]) -> bool:
    """Whether ``path`` names the file ``ident`` now."""
    try:
        return _ident(path.stat()) == ident
    except OSError:
        return False


def _log_files(session: str, directory: str, under: str) -> Iterator[tuple[str, str, str, os.stat_result | None]]:
    """(session, name under logs/, path, stat) of each log file in ``directory`` (``under`` logs/) and below it, the
    stat None for a name gone by then (the file moved on since the walk); a look a scan takes several times a second:
    one stat a file."""
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return
    for entry in entries:
        name = under + entry.name
        if entry.is_dir(follow_symlinks=False):
            yield from _log_files(session, entry.path, name + "/")
        elif not entry.is_symlink() and describe(name) is not None:
            try:
                st: os.stat_result | None = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                st = None
            yield session, name, entry.path, st  # (a str: a Path made a file a look cost more than its stat)


def _layout(listing: list[Listed]) -> list[tuple[str, str, int, int]]:
    """Which file each name of a listing is."""
    return [(session, name, *_ident(st)) for session, name, _, st in listing]


def _head(path: Path | int, length: int = HEAD_BYTES) -> tuple[str, int]:
    """(hash, length) of the first ``length`` bytes (fewer in a shorter file) of a path or descriptor."""
    if isinstance(path, int):
        data = os.pread(path, length, 0)
    else:
        with path.open("rb") as f:
            data = f.read(length)
    return hashlib.sha256(data).hexdigest()[:32], len(data)


class Tailer:
    """The log files under ``ray_dir``'s sessions (``session_*/logs``), followed from ``checkpoint``."""

    def __init__(
        self, ray_dir: Path, checkpoint: Path, since: float | None = None, spool_bytes: int = SPOOL_BYTES
    ) -> None:
        """``since``: only sessions whose logs changed from then on (epoch seconds), else every session;
        ``spool_bytes``: the most held unread in deleted files (see :meth:`_bound_spool`)."""
        self.ray_dir, self.checkpoint, self.since, self.spool_bytes = ray_dir, checkpoint, since, spool_bytes
        self._sessions: set[str] = set()  # the sessions followed
        self._passed: dict[str, float] = {}  # sessions not followed → when to look at them again (monotonic)
        self.files: dict[tuple[int, int], Followed] = {}
        self._open: dict[tuple[int, int], _Open] = {}
        self._copies: dict[tuple[int, int], tuple[Path, Followed, float]] = {}  # copy → (path, its original, since)
        self.gaps: list[Gap] = []  # not yet sent
        self._turn = 0
        self._sized: set[tuple[int, int]] = set()  # the files the last scan found, and so knows the size of
        if checkpoint.exists():
            for saved in orjson.loads(checkpoint.read_bytes())["files"]:
                followed = Followed(**saved)
                self.files[(followed.dev, followed.ino)] = followed

    # --- finding files -------------------------------------------------------------------------------------------

    @property
    def sessions(self) -> frozenset[str]:
        """The sessions whose files are followed (as of the last scan)."""
        return frozenset(self._sessions)

    def _settled_listing(self) -> tuple[list[Listed], bool]:
        """:meth:`_listing`, taken again while it changes, and whether it held still: a listing is a walk of names and
        then a stat of each, so one taken while Ray rotates a file (several renames in a few milliseconds) may see a
        file twice, under its old and new names, or miss it. A listing that shows nothing new is taken as it is; one
        that does is taken until two in a row agree (at most :data:`SETTLE_TRIES` times), the second with each name
        walked still there to stat: each file then stayed under its name from the first's stat to the second's, so the
        second is the directory as it was when its walk was taken."""
        listing, whole = self._look()
        if whole and not self._shows_change(listing):
            return listing, True
        for _ in range(SETTLE_TRIES):
            again, whole = self._look()
            if whole and _layout(again) == _layout(listing):
                return again, True
            listing = again
        return listing, False

    def _look(self) -> tuple[list[Listed], bool]:
        """:meth:`_listing` once, and whether each name walked was still there to stat."""
        walked = list(self._listing())
        listing = [(session, name, path, st) for session, name, path, st in walked if st is not None]
        return listing, len(listing) == len(walked)

    def _shows_change(self, listing: list[Listed]) -> bool:
        """Whether a listing holds a file not followed, a followed file under another name, or misses one (not one
        known to be deleted)."""
        named = {_ident(st): name for _, name, _, st in listing}
        if len(named) < len(listing):
            return True  # a file twice
        for ident, followed in self.files.items():
            if followed.session in self._sessions and not self._deleted(ident) and named.get(ident) != followed.path:
                return True
        return not named.keys() <= self.files.keys() | self._copies.keys()

    def _deleted(self, ident: tuple[int, int]) -> bool:
        """Whether a followed file is known to be deleted (held open until read to its end)."""
        opened = self._open.get(ident)
        return opened is not None and opened.vanished is not None

    def _listing(self) -> Iterator[tuple[str, str, str, os.stat_result | None]]:
        """(session, name under logs/, path, stat or None: see :func:`_log_files`) of every log file now (not a
        link)."""
        try:  # (not session_latest: a link to one of them)
            sessions = sorted(
                e.name for e in os.scandir(self.ray_dir) if e.name.startswith("session_") and not e.is_symlink()
            )
        except FileNotFoundError:
            return
        for session in sessions:
            if self._followed(session):
                yield from _log_files(session, self._logs(session), "")

    def _logs(self, session: str) -> str:
        """The session's ``logs/`` (a str: a look passes over hundreds of sessions)."""
        return os.path.join(self.ray_dir, session, "logs")

    def _followed(self, session: str) -> bool:
        """Whether the session's files are followed: all are, or those of sessions active since ``since`` (one that
        was not is looked at again every :data:`RECHECK_S`: a machine keeps hundreds of old sessions, passed over
        in each look without a path made or a stat taken)."""
        if session in self._sessions:
            return True
        if self._passed.get(session, 0.0) > time.monotonic():
            return False
        try:
            if self.since is not None and os.stat(self._logs(session)).st_mtime < self.since:
                self._passed[session] = time.monotonic() + RECHECK_S
                return False
        except FileNotFoundError:
            return False
        self._sessions.add(session)
        return True

    def scan(self) -> None:
        """Find new, moved, truncated, copied and vanished files."""
        new: list[tuple[int, int]] = []
        for _ in range(SETTLE_TRIES):  # until every new file is opened as listed (none moved on meanwhile)
            listing, settled = self._settled_listing()
            for _, _, path, st in listing:
                if _ident(st) in self.files:
                    self._place(_ident(st), path)
            found = [entry for entry in listing if _ident(entry[3]) not in self.files]
            taken = [self._new(*entry) for entry in found]  # before restarts: a copy is matched against its original
            new += [_ident(st) for *_, st in found if _ident(st) in self.files]
            if all(taken):
                break
        seen = self._sized = {_ident(st) for *_, st in listing}
        unlinked = [f for f in self.files.values() if f.predecessor == UNLINKED and (f.dev, f.ino) not in new]
        new_files = [self.files[ident] for ident in new if ident in self.files]
        self._link_rotations(new_files + unlinked, seen if settled else None)
        for _, name, _, st in listing:
            ident = _ident(st)
            if (followed := self.files.get(ident)) is None:
                continue
            opened = self._open[ident]
            followed.path = name
            if opened.fd is None and st.st_size == followed.size == followed.offset:
                continue  # closed while idle, read to its end and grown no more: nothing to open it for
            fd = self._fd(ident, opened)  # its head read through the inode: the path may be another's now
            if fd is None:
                continue
            if st.st_size < followed.offset or _head(fd, followed.head_len)[0] != followed.head:
                self._restarted(ident, followed, name, fd, st.st_size)  # truncated, or the inode reused
            else:
                followed.size = st.st_size
        self._settle_copies()
        for ident, followed in list(self.files.items()):
            listed = followed.session in self._sessions or not (self.ray_dir / followed.session).exists()
            if ident not in seen and listed:  # (a session not followed now keeps its files' places)
                self._vanished(ident)
        self._bound_spool()

    def _bound_spool(self) -> None:
        """Files gone from the directory but held open until read are the spool (what Ray rotated away or deleted
        while the server was away): past ``spool_bytes`` unread in them, the oldest are dropped, each a gap."""
        held = sorted((opened.vanished, ident) for ident, opened in self._open.items() if opened.vanished is not None)
        unread = sum(self.files[ident].size - self.files[ident].offset for _, ident in held)
        for _, ident in held:
            if unread <= self.spool_bytes:
                break
            followed = self.files[ident]
            unread -= followed.size - followed.offset
            if followed.size > followed.offset:
                why = f"deleted, and dropped unread: over the agent's spool of {self.spool_bytes:,} bytes"
                self.gaps.append(Gap(followed, followed.offset, followed.size, why))
            self._drop(ident)

    def _place(self, ident: tuple[int, int], path: str) -> None:
        """Where a followed file is now (a Path made only when it moved)."""
        opened = self._open.get(ident)
        if opened is None:
            self._open[ident] = _Open(Path(path))
        elif str(opened.path) != path:
            opened.path = Path(path)

    def _new(self, session: str, name: str, where: str, st: os.stat_result) -> bool:
        """Follow a file listed for the first time (or wait to see whether it is a copy); False when its path names
        another file now, or none (it moved on, or was deleted, since it was listed)."""
        ident, path = _ident(st), Path(where)
        if ident in self._copies or ident in self.files:
            return True
        original = self._original_of(session, name, path)
        if original is not None:
            self._copies[ident] = (path, original, time.monotonic())
            return True
        opened = _Open(path)
        if self._fd(ident, opened) is None:
            return False
        assert opened.fd is not None  # opened now: what is written is read even if the file is deleted next
        head, head_len = _head(opened.fd)
        self.files[ident] = Followed(session, *ident, name, head=head, head_len=head_len, size=st.st_size, path=name)
        self._open[ident] = opened
        return True

    def _link_rotations(self, new: list[Followed], listed: set[tuple[int, int]] | None) -> None:
        """Each new file's predecessor: the file that a rename rotation moved away from its name (found in the same
        scan, perhaps: Ray may rotate a file several times between two looks). That is the nearest older one of its
        rotation there is, ``NAME.k+1`` for ``NAME.k`` or above it: Ray renames the oldest first, so a look taken
        mid-rotation may find ``NAME.k+1`` moved up already and ``NAME.k`` not yet. Only the files of a look that held
        still (``listed``) have a name to go by; after one that did not (None), the new files wait for one that does
        (:data:`UNLINKED`): a file missed by it keeps the name it had before, below the files rotated past it."""
        if listed is None:
            for followed in new:
                followed.predecessor = UNLINKED
            return
        if not new:
            return  # (most looks: the files' rotations are not gathered for nothing)
        rotations: dict[tuple[str, str], list[tuple[int, Followed]]] = {}
        for ident, followed in self.files.items():
            if ident not in listed:
                continue  # deleted, or moved out of sight: its name may be another's now
            name, place = rotation_place(self._name_now(followed))
            rotations.setdefault((followed.session, name), []).append((place, followed))
        for followed in new:
            name, place = rotation_place(self._name_now(followed))
            older = [(k, f) for k, f in rotations.get((followed.session, name), []) if k > place]
            followed.predecessor = min(older, key=lambda kf: kf[0])[1].key if older else ""

    def _original_of(self, session: str, name: str, path: Path) -> Followed | None:
        """The followed file, partly read, that the new file ``name`` is a copy of: named as logrotate names a copy of
        it (:func:`named_as_copy`), with the same first bytes. (A copy of a file not read yet is read whole, as any new
        file.)"""
        for followed in self.files.values():
            named = named_as_copy(name, self._name_now(followed), followed.path)
            if followed.session != session or not followed.offset or not named:
                continue
            with contextlib.suppress(FileNotFoundError):
                if _head(path, followed.head_len) == (followed.head, followed.head_len):
                    return followed
        return None

    def _name_now(self, followed: Followed) -> str:
        """Its name under logs/ now (moved or rotated since it was first seen, perhaps)."""
        opened = self._open.get((followed.dev, followed.ino))
        return followed.path if opened is None else _under_logs(opened.path)

    def _restarted(self, ident: tuple[int, int], followed: Followed, name: str, fd: int, size: int) -> None:
        """The file's bytes start again (copy-truncate, or a new file on a reused inode): its copy, if it has one,
        carries on from the offset read, and the file (``size`` bytes now) is read from its start under a new key."""
        for copy, (copy_path, original, _) in list(self._copies.items()):
            if original is followed:
                self._adopt(copy, copy_path, followed)
        head, head_len = _head(fd)
        self.files[ident] = Followed(
            followed.session,
            *ident,
            name,
            context=dict(followed.context),
            head=head,
            head_len=head_len,
            size=size,
            path=name,
        )

    def _adopt(self, ident: tuple[int, int], path: Path, original: Followed) -> None:
        """Follow a copy of ``original`` from where ``original`` was read."""
        del self._copies[ident]
        with contextlib.suppress(FileNotFoundError):
            size = path.stat().st_size
            offset = min(original.offset, size)
            self.files[ident] = replace(
                original,
                dev=ident[0],
                ino=ident[1],
                offset=offset,
                size=size,
                path=_under_logs(path),
                uid=uuid.uuid4().hex[:16],
            )
            self._open[ident] = _Open(path)

    def _settle_copies(self) -> None:
        """Copies whose original was not truncated in time, or vanished, are followed from its offset."""
        for ident, (path, original, since) in list(self._copies.items()):
            gone = (original.dev, original.ino) not in self.files
            if gone or time.monotonic() - since > COPY_WAIT_S:
                self._adopt(ident, path, original)

    def _vanished(self, ident: tuple[int, int]) -> None:
        """A followed file is not in the listing. Deleted, it is read to its end through its descriptor, then dropped;
        without one, what was not read of it is a gap. Still linked (moved out of sight, or missed by the listing),
        it is followed on: dropped, it would be read again, whole, once listed again."""
        opened, followed = self._open.get(ident), self.files[ident]
        if opened is not None and opened.fd is not None:
            if opened.vanished is None and os.fstat(opened.fd).st_nlink == 0:
                opened.vanished = time.monotonic()  # read() drops it once its end is read
            return
        if opened is not None and _names(opened.path, ident):
            return
        if followed.size > followed.offset:
            self.gaps.append(Gap(followed, followed.offset, followed.size, "deleted before it was read to its end"))
        self._drop(ident)

    def _drop(self, ident: tuple[int, int]) -> None:
        opened = self._open.pop(ident, None)
        if opened is not None and opened.fd is not None:
            os.close(opened.fd)
        dropped = self.files.pop(ident, None)
        if dropped is not None:  # read to its end (or given up): its markers go on in the file that followed it
            for successor in self.files.values():
                if successor.predecessor == dropped.key:
                    self._inherit(successor, dropped)

    def _after_predecessor(self, followed: Followed, final: bool) -> bool:
        """Whether the file rotated away before ``followed`` took its name is read to its end (then its markers are
        in force in ``followed``); a file that follows none is. One whose predecessor is not known yet waits for a
        look that holds still, but for the ``final`` read: out of order then rather than never read."""
        if not followed.predecessor:
            return True
        if followed.predecessor == UNLINKED:
            if final:
                self._inherit(followed, None)
            return final
        predecessor = next((f for f in self.files.values() if f.key == followed.predecessor), None)
        if predecessor is not None and predecessor.offset < predecessor.size:
            return False  # its bytes were written first: they are read, and their markers known, first
        self._inherit(followed, predecessor)
        return True

    @staticmethod
    def _inherit(followed: Followed, predecessor: Followed | None) -> None:
        """``followed`` no longer waits for its predecessor: the markers in force at the predecessor's end are."""
        followed.context = {**(predecessor.context if predecessor else {}), **followed.context}
        followed.predecessor = ""

    # --- reading -------------------------------------------------------------------------------------------------

    def read(self, budget: int, final: bool = False) -> list[Chunk]:
        """New records of the files, up to about ``budget`` bytes in all (starting with a different file each time);
        ``final``: partial last lines too (the files will grow no more)."""
        chunks = []
        now = time.monotonic()
        idents = list(self.files)
        self._turn = (self._turn + 1) % max(len(idents), 1)
        for ident in idents[self._turn :] + idents[: self._turn]:
            followed, opened = self.files[ident], self._open.get(ident)
            if budget <= 0 or opened is None:
                continue
            if followed.size <= followed.offset and (opened.fd is None or (ident in self._sized and not final)):
                self._close_if_idle(opened, now)  # closed while idle, or the last scan found it no larger than read
                continue
            if not self._after_predecessor(followed, final):
                continue
            if (fd := self._fd(ident, opened)) is None:
                continue
            wanted = min(READ_BYTES, budget)
            data = os.pread(fd, wanted, followed.offset)
            if not data:
                if opened.vanished is not None:
                    self._drop(ident)
                else:
                    self._close_if_idle(opened, now)
                continue
            opened.grown_at = now
            # A partial last line is whole only at the end of a file that grows no more, not where the budget ends
            whole = len(data) < wanted and (final or opened.vanished is not None)
            pieces, used, mid_line = split(data, followed.offset, followed.mid_line, whole)
            if pieces:
                budget -= used
                chunks.append(self._chunk(followed, pieces, used, mid_line, fd, opened.path))
        return chunks

    @staticmethod
    def _close_if_idle(opened: _Open, now: float) -> None:
        """Close the descriptor of a file read to its end that has not grown for :data:`IDLE_CLOSE_S`."""
        if opened.fd is not None and now - opened.grown_at > IDLE_CLOSE_S:
            os.close(opened.fd)
            opened.fd = None

    @staticmethod
    def _chunk(followed: Followed, pieces: list[Piece], used: int, mid_line: bool, fd: int, path: Path) -> Chunk:
        """The records ``pieces`` with the markers in force at each, and the file's state after them."""
        context = dict(followed.context)
        records = []
        for piece in pieces:
            found = None if piece.continued else marker(piece.data)
            if found is not None:
                context[found[0]] = found[1]
                if found[0] == "job_id":  # a new job: its task is not known yet
                    context.pop("task_name", None)
            records.append((piece, dict(context), found is not None))
        after = replace(followed, offset=followed.offset + used, mid_line=mid_line, context=context)
        after.size = max(after.size, after.offset)
        if followed.head_len < HEAD_BYTES and after.offset > followed.head_len:
            after.head, after.head_len = _head(fd)
        return Chunk(followed, after, _under_logs(path), records, os.fstat(fd).st_mtime_ns)

    def _fd(self, ident: tuple[int, int], opened: _Open) -> int | None:
        if opened.fd is None:
            try:
                fd = os.open(opened.path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                return None
            st = os.fstat(fd)
            if _ident(st) != ident:  # replaced since the scan
                os.close(fd)
                return None
            opened.fd = fd
        return opened.fd

    def commit(self, chunks: list[Chunk], gaps: list[Gap]) -> None:
        """The server has made ``chunks`` and ``gaps`` durable: move on, and save the checkpoint."""
        for chunk in chunks:
            ident = (chunk.file.dev, chunk.file.ino)
            if self.files.get(ident) is chunk.file:
                self.files[ident] = chunk.after
        self.gaps = [g for g in self.gaps if g not in gaps]
        self.save()

    def save(self) -> None:
        """Write the checkpoint: atomically (a new file renamed over the old), and durably."""
        self.checkpoint.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.checkpoint.with_name(self.checkpoint.name + ".new")
        data = orjson.dumps({"files": list(self.files.values())})  # (as asdict would, 50x faster)
        with temporary.open("wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, self.checkpoint)

    def close(self) -> None:
        for opened in self._open.values():
            if opened.fd is not None:
                os.close(opened.fd)
        self._open.clear()
