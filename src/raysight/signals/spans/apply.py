"""Spans into the store: journalled exports applied a group at a time, and what deleting a session deletes of them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from raysight.signals.ray_events.reconcile import reconcile
from raysight.signals.signal import forget_by_session
from raysight.signals.spans.parse import ATTEMPT_ENDS, SPAN_RESOURCES, SPANS, attempt_ends_sql, resource_id
from raysight.store.tx import Tx
from raysight.tables import arrow_rows

if TYPE_CHECKING:
    from raysight.store.store import Store

SPAN_SCHEMA = SPANS.arrow_schema()


def apply_spans(store: Store, bodies: Sequence[bytes], journal_seq: int | None = None) -> int:
    """Store the spans of journalled OTLP exports (``parse.Export.journalled``) and their resources in one
    transaction, each span once however often it was sent (the first copy: DuckDB's conflict check keeps the
    first of a batch too), and how each task attempt they are of ended (``attempt_ends``), also of the spans of a
    server that keeps none; the spans stored. An attempt whose outcome was inferred, Ray's end missing, is
    inferred again with its span's."""
    rows: list[dict[str, Any]] = []
    passing: list[dict[str, Any]] = []  # spans not kept, read for their attempts' ends
    resources: dict[str, str] = {}
    for body in bodies:
        export = orjson.loads(body)
        if isinstance(export, list):  # journalled before resources were kept apart: each row holds its own
            export = {"resources": {}, "spans": export}
            for row in export["spans"]:
                text = row.pop("resource", None) or "{}"
                row["resource_id"] = resource_id(text.encode())
                resources[row["resource_id"]] = text
        (rows if export.get("keep", True) else passing).extend(export["spans"])
        resources.update(export["resources"])
    spans = arrow_rows(rows, SPAN_SCHEMA)
    seen = pa.concat_tables([spans, arrow_rows(passing, SPAN_SCHEMA)])
    del rows, passing
    sessions = pc.unique(spans["session"].drop_null()).to_pylist()
    known = kept_resources(store)
    new = {resource: text for resource, text in resources.items() if resource not in known}
    kept = pa.table([list(new), list(new.values())], schema=SPAN_RESOURCES.arrow_schema())
    with (
        store.folding(journal_seq) as tx,
        tx.registered("staged_spans", spans),
        tx.registered("seen_spans", seen),
        tx.registered("staged_resources", kept),
    ):
        (stored,) = tx.one("INSERT INTO spans BY NAME SELECT * FROM staged_spans ON CONFLICT DO NOTHING")
        if new:
            tx.run("INSERT INTO span_resources SELECT * FROM staged_resources ON CONFLICT DO NOTHING")
        ends = tx.returning(
            f"""INSERT INTO attempt_ends {attempt_ends_sql("seen_spans")} ON CONFLICT DO NOTHING
                RETURNING session, task_id, attempt""",
            ["session", "task_id", "attempt"],
        )
        if sessions:
            tx.run("INSERT INTO sessions (session) SELECT unnest($1::VARCHAR[]) ON CONFLICT DO NOTHING", [sessions])
        with tx.registered("new_ends", ends):  # (an end kept before changes nothing)
            inferred = tx.run(
                """SELECT DISTINCT session FROM new_ends JOIN tasks t USING (session, task_id, attempt)
                   WHERE t.inferred_state IS NOT NULL"""
            ).fetchall()
        reconcile(tx.run, sorted(session for (session,) in inferred))
        tx.count(spans=stored, spans_deduplicated=spans.num_rows - stored, span_batches=len(bodies))
    known.update(new)  # (once committed)
    return int(stored)


def kept_resources(store: Store) -> set[str]:
    """The IDs of the span resources the store holds, as far as this process wrote them: each process sends the same
    resource with every export, and inserting it again cost a statement a group."""
    return store.part("span_resources", lambda _: set())


def forget(store: Store, tx: Tx, session: str) -> None:
    """A session's spans and attempt ends, and the resources no span names any more."""
    forget_by_session((SPANS, ATTEMPT_ENDS))(store, tx, session)
    kept_resources(store).clear()
    tx.run(
        "DELETE FROM span_resources WHERE resource_id NOT IN "
        "(SELECT DISTINCT resource_id FROM spans WHERE resource_id IS NOT NULL)"
    )
