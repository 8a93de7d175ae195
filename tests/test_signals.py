"""A signal is one package and one registry entry: a toy signal declared in this file alone — its table, its parser,
its apply, its route — is made by the store, received by its route, journalled, applied by the writer (after a
restart too, from the journal) and read back by a query; deleting its session deletes its rows. A toy written at once
(not journalled) is received by its route and written by the writer before it is acknowledged."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from raysight import wire
from raysight.errors import BadIngest
from raysight.server.app import create_app
from raysight.settings import Settings
from raysight.signals.registry import SIGNALS, register, unregister
from raysight.signals.signal import Accepted, Intake, Signal, WrittenIntake
from raysight.store.journal import Record
from raysight.store.store import Store
from raysight.store.tx import Tx
from raysight.tables import Table, arrow_rows, columns

NOTES = Table("toy_notes", columns(session="VARCHAR", note="VARCHAR"))
PATH = wire.INGEST + "/toy-notes"


def parse(body: bytes) -> list[dict[str, str]]:
    notes = orjson.loads(body)
    if not (isinstance(notes, list) and all(isinstance(n, dict) and set(n) == set(NOTES.names) for n in notes)):
        raise BadIngest('a batch of notes is a JSON array of {"session", "note"}')
    return notes


def accept(body: bytes) -> Accepted:
    notes = parse(body)
    return Accepted(body, len(notes), {"notes": len(notes)})


def apply(store: Store, records: Sequence[Record], prepared: Any, folded: int) -> None:
    rows = [note for record in records for note in orjson.loads(record.body)]
    with store.folding(folded) as tx, tx.registered("staged_notes", arrow_rows(rows, NOTES.arrow_schema())):
        tx.run(f"INSERT INTO {NOTES.name} SELECT * FROM staged_notes")


TOY = Signal("toy", (NOTES,), apply=apply, intake=Intake(PATH, accept, "the toy", "batch of notes"))
# The same notes, written at once: in the writer's transaction, acknowledged once committed
MARKS = Table("toy_marks", NOTES.columns)
MARKS_PATH = wire.INGEST + "/toy-marks"


def write_marks(store: Store, marks: list[dict[str, str]]) -> int:
    def keep(tx: Tx) -> int:
        with tx.registered("staged_marks", arrow_rows(marks, MARKS.arrow_schema())):
            tx.run(f"INSERT INTO {MARKS.name} SELECT * FROM staged_marks")
        return len(marks)

    return store.write(keep)


TOY_AT_ONCE = Signal(
    "toy_marks",
    (MARKS,),
    intake=WrittenIntake(
        MARKS_PATH, 1024, parse, write_marks, "batch of marks", "the marks", answer="marks", rejected="bad_marks"
    ),
)


@pytest.fixture
def toy() -> Iterator[Signal]:
    register(TOY)
    yield TOY
    unregister(TOY.name)


def notes(client: TestClient, expected: int) -> list[tuple[str, str]]:
    """The toy's rows, once the writer has applied ``expected`` of them (a bounded poll)."""
    store = client.app.state.raysight.store  # type: ignore[attr-defined]
    deadline = time.monotonic() + 10
    while len(rows := store.reader().execute(f"SELECT * FROM {NOTES.name} ORDER BY note").fetchall()) < expected:
        assert time.monotonic() < deadline, f"{len(rows)} of {expected} notes applied"
        time.sleep(0.02)
    return rows


def test_a_signal_of_the_suite_alone_goes_from_its_route_through_the_journal_and_the_writer_to_a_query(
    tmp_path: Path, toy: Signal
) -> None:
    data_dir = tmp_path / "data"
    with TestClient(create_app(Settings(data_dir).replace(fold_linger_s=30))) as client:  # held: still journalled
        sent = [{"session": "session_a", "note": "first"}, {"session": "session_b", "note": "second"}]
        assert client.post(PATH, json=sent).json() == {"ok": True, "notes": 2}  # acknowledged: durable
        refused = client.post(PATH, json={"note": "not an array"})
        assert refused.status_code == 400 and refused.json()["error"].startswith("bad batch of notes: a batch of")
    with TestClient(create_app(Settings(data_dir).replace(fold_linger_s=0, fold_rest=0))) as client:  # replayed
        assert notes(client, 2) == [("session_a", "first"), ("session_b", "second")]
        assert client.post(PATH, json=[{"session": "session_a", "note": "third"}]).json()["notes"] == 1
        assert len(notes(client, 3)) == 3
        writer = client.app.state.raysight.writer  # type: ignore[attr-defined]
        writer.call(lambda store: store.delete_session("session_a")).result(timeout=10)
        assert notes(client, 1) == [("session_b", "second")]
    assert TOY.name in SIGNALS  # (the fixture takes it away again)


def test_a_signal_written_at_once_is_received_by_its_route_and_written_before_it_is_acknowledged(
    tmp_path: Path,
) -> None:
    register(TOY_AT_ONCE)
    try:
        with TestClient(create_app(Settings(tmp_path / "data"))) as client:
            sent = [{"session": "session_a", "note": "first"}, {"session": "session_a", "note": "second"}]
            assert client.post(MARKS_PATH, json=sent).json() == {"ok": True, "marks": 2}
            store = client.app.state.raysight.store  # type: ignore[attr-defined]
            assert store.reader().execute(f"SELECT count(*) FROM {MARKS.name}").fetchone() == (2,)  # committed
            refused = client.post(MARKS_PATH, json={"note": "not an array"})
            assert refused.status_code == 400 and refused.json()["error"].startswith("bad batch of marks: a batch of")
            too_large = client.post(MARKS_PATH, content=b" " * 1025, headers={"content-type": "application/json"})
            assert too_large.status_code == 413  # over the intake's limit
            assert 'raysight_ingest_rejected_total{reason="bad_marks"} 1.0' in client.get("/metrics").text
    finally:
        unregister(TOY_AT_ONCE.name)
