"""How a group of POSTs (or, when reindexing, a chunk of the raw events) is folded: the staging relations, in order.

Each stage makes one temporary relation from the stages before it, in one statement; the store makes them in the
order of :func:`describe` (``store/store.py``), with its writes between them: after ``seen_events`` the raw rows of
the others are inserted, after ``staged_tasks`` the entity tables are merged. The input that is not a stage is an
Arrow table the store registers: ``staged_posts`` (the POST bodies). With several cores, POSTS and EVENTS run on
another connection while the group before is written (``Store.parse``), into a table of the in-memory ``staging``
database that the store's connections share, and :func:`parsed` stands in for them. ``python -m
raysight.store.pipeline`` prints the SQL a group runs; the store logs each stage it makes, with its time, to the
``raysight.store.sql`` logger at DEBUG."""

from __future__ import annotations

from dataclasses import dataclass

from raysight.ingest import events_sql, ray_event_tables


@dataclass(frozen=True)
class Stage:
    name: str  # the relation it makes
    select: str  # SQL over earlier stages
    view: bool = False  # a view (read once or cheaply: nothing copied), else a temporary table
    about: str = ""

    @property
    def sql(self) -> str:
        return f"CREATE OR REPLACE TEMP {'VIEW' if self.view else 'TABLE'} {self.name} AS {self.select}"


# `incoming(post, ord, label, run_id, body)`: one row per event, its JSON text; two sources
# (a table: parsing a body while its events are parsed would hold two parsed copies of a huge event at once)
POSTS = Stage("incoming", events_sql.EXPLODE_POSTS, about="the events of the POST bodies")
RAW_CHUNK = Stage(
    "incoming",
    """SELECT 0 AS post, rowid AS ord, NULL::VARCHAR AS label, NULL::VARCHAR AS run_id, body FROM raw_events
       WHERE rowid >= getvariable('chunk_start') AND rowid < getvariable('chunk_end')""",
    view=True,
    about="a chunk of the stored raw events (reindex)",
)
EVENTS = Stage(
    "batch_events",
    events_sql.PARSE_EVENTS,
    about="every event parsed once: its envelope, task columns and why it is malformed (reason)",
)


def parsed(table: str) -> Stage:
    """``batch_events`` as a view of ``table``, the events as EVENTS made them on another connection."""
    return Stage("batch_events", f"FROM {table}", view=True, about="the events parsed on another connection")


# An event is its session, ID and timestamp (a resend repeats all three): joined on the three, DuckDB reads only the
# raw row groups whose time span (their zone maps) meets the group's, so finding resends costs little at any store
# size; a unique index would cost ~3.4 µs an event and grow with the store. Events with no timestamp (rare) are
# looked up by the other two.
SEEN = Stage(
    "seen_events",
    """SELECT b.seq FROM batch_events b JOIN raw_events r
           ON r.session = b.session AND r.event_id = b.event_id AND r.ts_ns = b.ts_ns
       WHERE b.reason IS NULL
       UNION ALL
       SELECT b.seq FROM (FROM batch_events WHERE reason IS NULL AND ts_ns IS NULL) b JOIN raw_events r
           ON r.session = b.session AND r.event_id = b.event_id AND r.ts_ns IS NULL
       UNION ALL  -- repeats within the group, but for their first
       SELECT b.seq FROM batch_events b JOIN (
           SELECT session, event_id, min(seq) AS first FROM batch_events WHERE reason IS NULL
           GROUP BY ALL HAVING count(*) > 1) d USING (session, event_id)
       WHERE b.reason IS NULL AND b.seq > d.first""",
    about="the well-formed events stored before (a resend), or repeated in the group but for their first",
)
NONE_SEEN = Stage("seen_events", "SELECT seq FROM batch_events WHERE false", about="none (reindex: raw events are)")
# `fresh`: the well-formed events the store had not seen, once each. Not deleted from batch_events: a session's label
# and span come from every well-formed event.
FRESH = Stage(
    "fresh",
    "SELECT * FROM batch_events WHERE reason IS NULL AND seq NOT IN (FROM seen_events)",
    view=True,
    about="the events first seen",
)
TRANSITIONS = Stage("fresh_transitions", events_sql.TRANSITIONS, about="one row per task state transition")
PROFILE = Stage("fresh_profile", events_sql.PROFILE_ENTRIES, about="one row per task profile entry")
TASKS = Stage(
    "staged_tasks",
    ray_event_tables.TASKS.aggregate_sql(events_sql.TASK_ROWS, "seq"),
    about="one row per task attempt, merged by the columns' rules",
)
SESSIONS = Stage(
    "staged_sessions",
    """SELECT session, arg_min(label, seq) FILTER (WHERE label IS NOT NULL) AS label,
              arg_min(run_id, seq) FILTER (WHERE run_id IS NOT NULL) AS run_id,
              min(ts_ns) AS first_ns, max(ts_ns) AS last_ns,
              count(*) FILTER (WHERE NOT seen) AS events, sum(bytes) FILTER (WHERE NOT seen) AS raw_bytes
       FROM (SELECT *, seq IN (FROM seen_events) AS seen FROM batch_events WHERE reason IS NULL)
       GROUP BY session""",
    about="each session's label, run ID and span from every well-formed event, its counts from the fresh ones",
)

PARSE = [EVENTS]
FOLD = [TRANSITIONS, PROFILE, TASKS]


def describe() -> str:
    """The SQL a group runs, stage by stage in order (RAW_CHUNK stands in for POSTS, and NONE_SEEN for SEEN, when
    reindexing; :func:`parsed` for both POSTS and EVENTS when the group was parsed on another connection)."""
    stages = [POSTS, RAW_CHUNK, *PARSE, parsed("staging.parsed_1"), SEEN, NONE_SEEN, FRESH, *FOLD, SESSIONS]
    return "\n\n".join(f"-- {s.name}: {s.about}\n{s.sql};" for s in stages)


if __name__ == "__main__":
    print(describe())
