"""Scrapes into the store: their samples, the series new to it (their labels parsed once), each scrape itself and
each metric's type and help; what the store knows of each target in memory (:class:`Targets`, kept beside the store);
and what deleting a session deletes of them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from raysight.signals.scrapes import metric_retention
from raysight.signals.scrapes.parse import (
    METADATA,
    METRIC_SAMPLES,
    METRIC_SERIES,
    METRIC_TABLES,
    SERIES,
    Lines,
    Scrape,
    name_and_labels,
)
from raysight.signals.signal import forget_by_session
from raysight.store.tx import Tx

if TYPE_CHECKING:
    from raysight.store.store import Store

MAX_TARGETS = 4096  # scraped targets whose series the store knows by their lines, in memory
MAX_KNOWN_LINES = 500_000  # lines of those targets' last scrapes, all together (~180 MB of Ray's, 362 bytes each)
MALFORMED = -1  # a line whose labels are not well formed (a label named twice): no series, parsed again each scrape
SAMPLES_SCHEMA = METRIC_SAMPLES.arrow_schema()
TargetKey = tuple[str, str, str, tuple[tuple[str, str], ...]]  # session, instance, job, the target's labels


@dataclass
class Target:
    """What the store knows of a scraped target: its last scrape's time, and the series of each line that scrape
    exposed (the line up to its value → the series' number; None: refused past the session's limit). Only the last
    scrape's: a line the target no longer exposes is forgotten, refused or not (it is parsed again if it comes back)."""

    last_ms: int | None
    series: dict[str, int | None] = field(default_factory=dict)


class Targets:
    """The targets the store knows by their last scrapes' lines, least recently scraped first: at most
    :data:`MAX_TARGETS` targets and :data:`MAX_KNOWN_LINES` lines, the least recently scraped forgotten first (found
    again from their labels). The signal's part of the store (``store.part``)."""

    def __init__(self) -> None:
        self.known: dict[TargetKey, Target] = {}
        self.lines = 0  # the lines of self.known, all together

    def get(self, key: TargetKey) -> Target | None:
        return self.known.get(key)

    def keep(self, key: TargetKey, target: Target) -> None:
        """``target`` as its last scrape (committed) left it, the most recently used; the least recently used go
        while past the bounds."""
        self.forget(key)
        self.known[key] = target
        self.lines += len(target.series)
        while len(self.known) > MAX_TARGETS or self.lines > MAX_KNOWN_LINES:
            self.forget(next(iter(self.known)))

    def forget(self, key: TargetKey) -> None:
        if (target := self.known.pop(key, None)) is not None:
            self.lines -= len(target.series)

    def forget_session(self, session: str) -> None:
        """Let go of what is known of ``session``'s targets (its series are being deleted)."""
        for key in [key for key in self.known if key[0] == session]:
            self.forget(key)


def targets(store: Store) -> Targets:
    return store.part("scrapes", lambda _: Targets())


def key_of(scrape: Scrape) -> dict[str, str]:
    return {"session": scrape.session, "instance": scrape.instance, "job": scrape.job}


def record_scrapes(store: Store, scrapes: Sequence[Scrape]) -> list[int]:
    """Keep scrapes of Prometheus targets (``parse.py``), in one transaction: their samples, the series new to the
    store (their labels parsed once), each scrape itself (a series the target no longer exposes is stale from then
    on) and each metric's type and help. A scrape not newer than its target's last changes nothing (Prometheus too
    refuses samples out of order). Returns the samples kept of each.

    Each target's series are known by the lines of its last scrape (:class:`Targets`), so a scrape parses only its
    new lines' labels; the samples go in as one Arrow table."""
    known_targets = targets(store)
    kept_of: list[int] = []
    staged: dict[TargetKey, Target] = {}  # what the transaction adds to the targets, theirs once it commits
    samples: dict[str, list[Any]] = {name: [] for name in SAMPLES_SCHEMA.names}
    done: list[tuple[str, str, str, int, int]] = []
    refused: dict[str, list[int]] = {}  # session -> [series refused, samples dropped, last scrape's ms]
    with store.transaction() as tx:
        for scrape in scrapes:
            key = (scrape.session, scrape.instance, scrape.job, tuple(scrape.labels.items()))
            known = staged.get(key) or known_targets.get(key) or _target(tx, scrape)
            if known.last_ms is not None and known.last_ms >= scrape.scraped_ms:
                kept_of.append(0)
                continue
            page = scrape.page
            new = [i for i, head in enumerate(page.heads) if head not in known.series]
            found = _record_new_series(tx, store.metrics_max_series, scrape, page, new) if new else {}
            lines = {**known.series, **found} if found else known.series
            numbers = [lines.get(head, MALFORMED) for head in page.heads]
            if len(lines) != len(page.heads):  # (the lines gone from the page forgotten: no more than it has)
                lines = {head: number for head, number in zip(page.heads, numbers) if number != MALFORMED}
            staged[key] = Target(scrape.scraped_ms, lines)
            dropped = numbers.count(None)  # (refused past the session's limit)
            ts_ms, values = page.ts_ms, page.values  # (the page's own lists left whole: it may be kept again)
            if dropped or MALFORMED in numbers:
                kept = [i for i, number in enumerate(numbers) if number is not None and number != MALFORMED]
                numbers = [numbers[i] for i in kept]
                ts_ms, values = [ts_ms[i] for i in kept], [values[i] for i in kept]
            samples["series_no"] += numbers
            samples["ts_ms"] += ts_ms
            samples["value"] += values
            done.append((scrape.session, scrape.instance, scrape.job, scrape.scraped_ms, len(numbers)))
            kept_of.append(len(numbers))
            if dropped:
                counts = refused.setdefault(scrape.session, [0, 0, 0])
                counts[0] += sum(1 for number in found.values() if number is None)
                counts[1] += dropped
                counts[2] = max(counts[2], scrape.scraped_ms)
        if samples["series_no"]:
            tx.con.from_arrow(pa.table(samples, schema=SAMPLES_SCHEMA)).insert_into(METRIC_SAMPLES.name)
        if done:
            rows = ", ".join(["(?, ?, ?, ?, ?)"] * len(done))
            tx.run(f"INSERT INTO metric_scrapes VALUES {rows}", [v for row in done for v in row])
        for session, (series, dropped, last_ms) in refused.items():
            added = {"session": session, "series": series, "samples": dropped, "ts_ms": last_ms}
            tx.run(metric_retention.COUNT_REFUSED, added)
    for key, target in staged.items():  # (only once committed)
        known_targets.keep(key, target)
    return kept_of


def _target(tx: Tx, scrape: Scrape) -> Target:
    """A target not in memory: its last scrape, as stored (its series are found again by their labels)."""
    (last,) = tx.one(
        "SELECT max(ts_ms) FROM metric_scrapes WHERE session = $session AND instance = $instance AND job = $job",
        key_of(scrape),
    )
    return Target(last)


def _record_new_series(tx: Tx, max_series: int, scrape: Scrape, page: Lines, new: list[int]) -> dict[str, int | None]:
    """Keep the series of the page's ``new`` lines (their labels parsed, under their canonical IDs) while the
    session has room for them (``max_series``), the type and help of the scrape's metrics, and the session; each new
    line's head → its series (None: refused past the session's limit; a line whose labels are not well formed is left
    out)."""
    split = [name_and_labels(page.heads[i]) for i in new]
    lines = pa.table(
        {
            "line": pa.array(new, pa.int32()),
            "name": [name for name, _ in split],
            "labels_text": [labels for _, labels in split],
        }
    )
    with tx.registered("new_lines", lines):
        tx.run(f"CREATE OR REPLACE TEMP TABLE new_series AS {SERIES}", scrape.target)
    tx.run(
        """CREATE OR REPLACE TEMP TABLE fresh_series AS
           SELECT DISTINCT ON (series_id) * FROM new_series ANTI JOIN metric_series USING (series_id)"""
    )
    (fresh,) = tx.one("SELECT count(*) FROM fresh_series")
    (held,) = tx.one("SELECT count(*) FROM metric_series WHERE session = ?", [scrape.session])
    room = max(0, min(fresh, max_series - held))
    tx.run(
        """INSERT INTO metric_series
           SELECT nextval('metric_series_no'), series_id, $session, name, labels, $instance, $job
           FROM fresh_series ORDER BY name, series_id LIMIT $room""",
        {**key_of(scrape), "room": room},
    )
    numbers = dict(
        tx.run("SELECT n.line, s.series_no FROM new_series n LEFT JOIN metric_series s USING (series_id)").fetchall()
    )
    tx.run(
        f"INSERT OR REPLACE INTO metric_metadata SELECT $session, name, type, help FROM ({METADATA})",
        {"session": scrape.session, "text": scrape.text},
    )
    tx.run("INSERT INTO sessions (session) VALUES (?) ON CONFLICT DO NOTHING", [scrape.session])
    for made in ("new_series", "fresh_series"):
        tx.run(f"DROP TABLE {made}")
    return {page.heads[i]: numbers[i] for i in new if i in numbers}


def forget(store: Store, tx: Tx, session: str) -> None:
    """A session's series, their samples (keyed by series, not by session), its scrapes and what the store knows of
    its targets."""
    tx.run(
        f"DELETE FROM {METRIC_SAMPLES.name} WHERE series_no IN "
        f"(SELECT series_no FROM {METRIC_SERIES.name} WHERE session = ?)",
        [session],
    )
    forget_by_session(METRIC_TABLES)(store, tx, session)
    targets(store).forget_session(session)
