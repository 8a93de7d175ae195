"""Ray's events into the store: a group of POST bodies in one transaction, and every fold rebuilt from the raw events.

A group goes in whole, through the stages of :mod:`.event_stages` in the order of :mod:`.pipeline`: DuckDB explodes
and parses the bodies, the raw events are inserted (only first sightings are folded), task events are folded in SQL
and the cluster-level events by their Python folds (:mod:`.parse`), all in one transaction, then what is inferred of
the group's sessions is derived again (``signals/ray_events/reconcile.py``). With several cores a group is parsed ahead
(:func:`parse_posts`) on a connection of the signal's own while the group before it is written.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import duckdb
import orjson
import pyarrow as pa

from raysight.signals.polls.parse import driver_patch
from raysight.signals.ray_events import event_stages as stage
from raysight.signals.ray_events.event_stages import SUPPORTED_TYPES
from raysight.signals.ray_events.merge import merge_patches
from raysight.signals.ray_events.parse import HANDLERS, Key, Patch, event_patches
from raysight.signals.ray_events.reconcile import SPANS_KEPT, reconcile, reconcile_tasks
from raysight.store import schema
from raysight.store.opening import STAGING
from raysight.store.statements import Stage
from raysight.store.store import Store
from raysight.store.tx import Tx
from raysight.tables import arrow_rows

_INSERTED = "inserted_keys"  # the keys an upsert inserted (an Arrow table), which its merge leaves out
REINDEX_CHUNK = 100_000
MERGED_AT_ONCE = 16  # rows: where one merge statement costs less than an insert and a merge (a trickle's POST)
Patches = dict[int, list[tuple[str, Key, Patch]]]  # an event's sequence number in its group → its patches


@dataclass(frozen=True)
class Post:
    """One POST body (a JSON array of Ray events) and the ingest URL's cluster label and run ID."""

    body: bytes | str
    label: str | None = None
    run_id: str | None = None


@dataclass(frozen=True)
class Parsed:
    """POST bodies parsed apart from the store's transaction (:func:`parse_posts`): the table of their events (as
    ``batch_events`` would hold them), and the patches of the Python-folded types."""

    table: str  # in the staging database, dropped by apply_posts
    patches: Patches


@dataclass(frozen=True)
class ApplyResult:
    received: int
    stored: int
    deduplicated: int
    quarantined: int
    unsupported: int


class Folding:
    """What the signal keeps beside a store (``store.part("ray", Folding)``): the staging relations the group being
    written has made, the merges written so far (by table, relation and the columns they set), and the parser's
    connection (made on first use), closed with the store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.staged: dict[str, Stage] = {}
        self.merges: dict[tuple[str, str, tuple[str, ...]], str] = {}
        self.parser: duckdb.DuckDBPyConnection | None = None
        self.parses = 0

    def stage(self, tx: Tx, made: Stage) -> None:
        """Make one stage's relation (see :mod:`.pipeline`) with the writer's ``tx``, dropped at the end of the
        group."""
        tx.run(made.sql)
        self.staged[made.name] = made

    def drop_staging(self, tx: Tx) -> None:
        """Let go of the group's staging relations (a 48 MB group's parsed events hold several times that)."""
        for made in self.staged.values():
            tx.run(made.drop)
        self.staged.clear()

    def close(self) -> None:
        if self.parser is not None:
            self.parser.close()


def folding(store: Store) -> Folding:
    return store.part("ray", Folding)


def apply_posts(
    store: Store, posts: Sequence[Post], journal_seq: int | None = None, parsed: Parsed | None = None
) -> ApplyResult:
    """Write POST bodies durably: raw events, quarantine, entity folds, inference and counters, in one transaction.

    Only events the store had not seen are folded, so a resent batch changes nothing but the counters.
    ``journal_seq`` is the last journal record the posts hold; it is recorded in the same transaction.
    ``parsed`` is what :func:`parse_posts` made of the same posts, if it was called (else they are parsed here).
    """
    try:
        return _apply(store, posts, journal_seq, parsed)
    finally:
        if parsed is not None:  # after the transaction, which writes to the store's database only
            with contextlib.suppress(duckdb.Error):  # (the connection a failure left unusable will not)
                store.tx.run(f"DROP TABLE IF EXISTS {parsed.table}")


def _apply(store: Store, posts: Sequence[Post], journal_seq: int | None, parsed: Parsed | None) -> ApplyResult:
    part = folding(store)
    with store.folding(journal_seq) as tx:
        if parsed is None:
            with tx.registered(stage.POSTED, posts_table(posts)):
                patches = _parse(tx, stage.POSTS, part)
        else:
            part.stage(tx, stage.parsed(parsed.table))
            patches = parsed.patches
        received, unsupported, malformed = tx.one(stage.RECEIVED.sql)
        (quarantined,) = tx.one(stage.QUARANTINE.sql) if malformed else (0,)
        part.stage(tx, stage.SEEN)  # a resend, or an event twice in the group: fold each first sighting once
        part.stage(tx, stage.FRESH)
        (stored,) = tx.one(stage.INSERT_RAW.sql)
        _fold(tx, part, patches)
        result = ApplyResult(
            received=received,
            stored=stored,
            deduplicated=received - stored - quarantined,
            quarantined=quarantined,
            unsupported=unsupported,
        )
        tx.count(**asdict(result), batches=1)
        part.drop_staging(tx)
    return result


def parse_posts(store: Store, posts: Sequence[Post]) -> Parsed:
    """Parse POST bodies for :func:`apply_posts` with a connection of the signal's own, into a table of the staging
    database: on another thread, while the writer's connection writes the group before (one thread at a time calls
    this). :func:`apply_posts` drops the table; a parse that is never applied leaves it until the store closes."""
    part = folding(store)
    if part.parser is None:
        part.parser = store.reader()
    part.parses += 1
    table = f"{STAGING}.parsed_{part.parses}"
    tx = Tx(part.parser)
    with store.one_thread(part.parser), tx.registered(stage.POSTED, posts_table(posts)):
        try:
            return Parsed(table, _parse(tx, stage.POSTS, into=table))
        except BaseException:
            tx.run(f"DROP TABLE IF EXISTS {table}")
            raise
        finally:
            tx.run(stage.POSTS.drop)


def _parse(tx: Tx, incoming: Stage, part: Folding | None = None, into: str | None = None) -> Patches:
    """Parse the events of ``incoming`` into ``batch_events`` (the staging relations of ``part``, the writer's), or
    the table ``into`` (the parser's); returns the patches of the Python-folded types (whose malformed events get
    their ``reason`` here)."""
    if part is None:
        tx.run(incoming.sql)
        tx.run(f"CREATE TABLE {into} AS {stage.EVENTS.select}")
    else:
        part.stage(tx, incoming)
        part.stage(tx, stage.EVENTS)
    events = into or stage.EVENTS.name
    patches: Patches = {}
    reasons: list[tuple[int, str]] = []
    rows = tx.run(
        f"SELECT seq, session, event_type, body FROM {events} WHERE reason IS NULL AND list_contains($1, event_type)",
        [list(HANDLERS)],
    ).fetchall()
    for seq, session, event_type, body in rows:
        try:
            patches[seq] = event_patches(event_type, session, orjson.loads(body))
        except (ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:
            reasons.append((seq, f"{type(exc).__name__}: {exc}"[:500]))
    if reasons:
        tx.run(
            f"UPDATE {events} SET reason = r.reason FROM (SELECT unnest($1::BIGINT[]) AS seq, "
            f"unnest($2::VARCHAR[]) AS reason) r WHERE {events}.seq = r.seq",
            [[seq for seq, _ in reasons], [why for _, why in reasons]],
        )
    return patches


def _fold(tx: Tx, part: Folding, patches: Patches) -> None:
    """Fold ``fresh`` (events first seen) into the entity tables: tasks in SQL, the rest from ``patches``; session
    spans come from all of ``batch_events``."""
    for made in (stage.TRANSITIONS, stage.PROFILE, stage.TASKS):
        part.stage(tx, made)
    tasks_changed = _upsert(tx, part, "tasks", stage.TASKS.name, unless_unchanged=True)
    for appended in stage.APPENDED:
        tx.run(appended.sql)
    seqs = tx.run(stage.PATCHED.sql).fetchall() if patches else []  # (each event of those types has patches)
    _upsert_patches(tx, part, (p for (seq,) in seqs for p in patches[seq]))
    part.stage(tx, stage.SESSIONS)
    (kept,) = tx.one(SPANS_KEPT.sql) if not seqs else (False,)
    _upsert(tx, part, "sessions", stage.SESSIONS.name)
    sessions = [row[0] for row in tx.run(f"SELECT session FROM {stage.SESSIONS.name} ORDER BY 1").fetchall()]
    if kept:  # task rows alone changed, if any did: only their inferences may
        if tasks_changed:
            tasks = [row[0] for row in tx.run(f"SELECT DISTINCT task_id FROM {stage.TASKS.name}").fetchall()]
            reconcile_tasks(tx.run, sessions, tasks)
    else:
        reconcile(tx.run, sessions)


def upsert_patches(store: Store, tx: Tx, patches: Iterable[tuple[str, Key, Patch]]) -> None:
    """Fold ``patches`` (in arrival order) into their entity tables, in ``tx`` (the writer's): what another signal
    knows of Ray's entities (a poll's drivers) folded as their events would be."""
    _upsert_patches(tx, folding(store), patches)


def _upsert_patches(tx: Tx, part: Folding, patches: Iterable[tuple[str, Key, Patch]]) -> None:
    for name, folded in merge_patches(patches).items():
        staged = arrow_rows(folded, schema.FOLDED_TABLES[name].arrow_schema())
        with tx.registered(f"arrow_{name}", staged):
            _upsert(tx, part, name, f"arrow_{name}")


def _upsert(tx: Tx, part: Folding, name: str, staged: str, unless_unchanged: bool = False) -> bool:
    """Insert the rows of relation ``staged`` with new keys, then merge the others into the stored rows (two
    cheap statements, not one: DuckDB's ON CONFLICT DO UPDATE costs per column it sets). A few rows are merged in
    one statement where that writes the same: one row, or rows of a table whose merges keep the stored value of a
    column a row leaves NULL (then the columns any row sets may be merged into every stored row). With
    ``unless_unchanged``, a few rows that would change nothing are not written: Serve's calls, of which Ray sends no
    task events, bring profile events every second that set only what their task's row holds already. Whether the
    table may have changed."""
    table = schema.FOLDED_TABLES[name]
    (total,) = tx.one(f"SELECT count(*) FROM {staged}")
    if total == 0:
        return False
    if total <= MERGED_AT_ONCE:
        if unless_unchanged and tx.one(table.unchanged_sql(staged)) == (True,):
            return False
        if total == 1 or table.null_keeps:
            _merge(tx, part, name, staged)
            return True
    inserted = tx.returning(table.insert_sql(staged), [c.name for c in table.keys])
    if inserted.num_rows == total:
        return True
    keys = ", ".join(c.name for c in table.keys)
    with tx.registered(_INSERTED, inserted):
        merging = Stage("merging", f"SELECT * FROM {staged} ANTI JOIN {_INSERTED} USING ({keys})")
        part.stage(tx, merging)
    _merge(tx, part, name, merging.name)
    return True


def _merge(tx: Tx, part: Folding, name: str, staged: str) -> None:
    """Merge the rows of ``staged`` into the stored rows of their keys (inserting those of new keys), setting only
    the columns some row sets."""
    table = schema.FOLDED_TABLES[name]
    counts = tx.one("SELECT " + ", ".join(f"count({c.name})" for c in table.columns) + f" FROM {staged}")
    columns = tuple(c.name for c, n in zip(table.columns, counts) if n)
    sql = part.merges.get((name, staged, columns))
    if sql is None:
        sql = part.merges[(name, staged, columns)] = table.merge_sql(staged, list(columns))
    tx.run(sql).fetchall()


def reindex(store: Store) -> int:
    """Rebuild every entity table from the raw events; returns how many events were refolded.

    An event this raysight's parser rejects (kept by an older one) is left out of the folds, not fatal.
    """
    part = folding(store)
    with store.transaction() as tx:
        for name in schema.FOLD_TABLE_NAMES:
            tx.run(f"DELETE FROM {name}")
        tx.run("UPDATE sessions SET first_ns = NULL, last_ns = NULL, events = NULL, raw_bytes = NULL")
        (last,) = tx.one("SELECT coalesce(max(rowid) + 1, 0) FROM raw_events")
        total = 0
        for start in range(0, last, REINDEX_CHUNK):
            tx.run("SET VARIABLE chunk_start = ?", [start])
            tx.run("SET VARIABLE chunk_end = ?", [start + REINDEX_CHUNK])
            patches = _parse(tx, stage.RAW_CHUNK, part)
            part.stage(tx, stage.NONE_SEEN)
            part.stage(tx, stage.FRESH)
            _fold(tx, part, patches)
            total += tx.one(f"SELECT count(*) FROM {stage.FRESH.name}")[0]
        _refold_drivers(tx, part)
        tx.run("UPDATE raw_events SET supported = list_contains($1, event_type)", [SUPPORTED_TYPES])
        part.drop_staging(tx)
    return total


def _refold_drivers(tx: Tx, part: Folding) -> None:
    """Fold the drivers the poller kept (``polled``) into the workers table again: the raw events hold none."""
    rows = tx.run(
        """SELECT session, row, coalesce(list_filter(history, lambda h: h.state = 'DEAD')[1].ts, last_ns)
           FROM polled WHERE resource = 'drivers'"""
    ).fetchall()
    _upsert_patches(tx, part, (driver_patch(session, orjson.loads(row), dead_ns) for session, row, dead_ns in rows))
    reconcile(tx.run, sorted({row[0] for row in rows}))


def posts_table(posts: Sequence[Post]) -> pa.Table:
    """``staged_posts``: the POST bodies, numbered, with their URL's label and run ID."""
    return pa.table(
        {
            "post": pa.array(range(len(posts)), pa.int32()),
            "label": pa.array([p.label for p in posts], pa.string()),
            "run_id": pa.array([p.run_id for p in posts], pa.string()),
            "body": pa.array([p.body for p in posts], pa.string()),
        }
    )
