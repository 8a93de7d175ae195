"""The store: folds are order-independent and idempotent, reindex reproduces them, inference marks what it guessed."""

from __future__ import annotations

import base64
import copy
import random
from pathlib import Path

import orjson
import pytest

from raysight.client import RESOURCES
from raysight.errors import NotFound
from raysight.signals.log_lines.logs_query import LogQuery, log_page
from raysight.signals.ray_events import apply as ray_apply
from raysight.signals.ray_events import entities, summary_query
from raysight.signals.ray_events.apply import Post, apply_posts, parse_posts, reindex
from raysight.signals.ray_events.state_query import list_rows
from raysight.store import schema
from raysight.store.sessions_query import EVERY_SESSION, latest_session, resolve_session
from raysight.store.store import Store
from tests.conftest import FIXTURES, run_exit


def snapshot(store: Store) -> dict[str, list[dict]]:
    con = store.reader()
    return {
        name: list_rows(con, res, session=latest_session(con), limit=None, detail=True, sort=[res.id_field]).rows
        for name, res in entities.RESOURCES.items()
    }


def load(store: Store, batches: list[list[dict]]) -> None:
    for batch in batches:
        apply_posts(store, [post(batch, label="rec", run_id="run-1")])


def post(events: list[dict], label: str | None = None, run_id: str | None = None) -> Post:
    return Post(orjson.dumps(events), label, run_id)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path)
    yield s
    s.close()


def test_the_client_names_every_resource_the_store_answers() -> None:
    assert set(RESOURCES) == set(entities.RESOURCES)


def test_recorded_session_folds_field_by_field(store: Store, ray_batches) -> None:
    load(store, ray_batches)
    con = store.reader()
    tasks = list_rows(con, entities.TASKS, session=latest_session(con), limit=None, detail=True).rows
    by_name = {}
    for t in tasks:
        by_name.setdefault(t["name"], []).append(t)
    fails = by_name["fails"][0]
    assert fails["state"] == "FAILED" and fails["error_type"] == "TASK_EXECUTION_EXCEPTION"
    assert "boom" in fails["error_message"]
    crash = sorted(by_name["crash_once"], key=lambda t: t["attempt_number"])
    assert [(t["attempt_number"], t["state"]) for t in crash] == [(0, "FAILED"), (1, "FINISHED")]
    assert crash[0]["error_type"] == "WORKER_DIED"
    parent = by_name["parent"][0]
    assert {c["parent_task_id"] for c in by_name["child"]} == {parent["task_id"]}
    inc = by_name["Counter.inc"][0]
    assert [e["state"] for e in inc["events"]][-1] == "FINISHED" and inc["task_log_info"]["stdout_file"]
    actors = {
        a["class_name"]: a for a in list_rows(con, entities.ACTORS, session=latest_session(con), detail=True).rows
    }
    assert actors["Counter"]["name"] == "my_counter" and actors["Counter"]["state"] == "DEAD"
    assert actors["Counter"]["death_cause"]["actorDiedErrorContext"]["reason"] == "RAY_KILL"
    assert actors["Fragile"]["num_restarts"] == 1 and actors["Fragile"]["state"] == "ALIVE"
    workers = list_rows(con, entities.WORKERS, session=latest_session(con), detail=True).rows
    assert {w["exit_type"] for w in workers if not w["is_alive"]} >= {"SYSTEM_ERROR", "INTENDED_SYSTEM_EXIT"}
    nodes = list_rows(con, entities.NODES, session=latest_session(con), detail=True).rows
    assert len(nodes) == 1 and nodes[0]["is_head_node"] and nodes[0]["resources_total"]["CPU"] == 2.0


def test_read_models_take_the_session_as_resolved_and_never_pick_one_themselves(store: Store, ray_batches) -> None:
    """The server resolves a request's session once (by name or label, default the newest) and hands it to every read
    model: None means none is recorded, ``*`` every session; a read model given None picks no session of its own."""
    load(store, ray_batches)
    con = store.reader()
    (session,) = {row[0] for row in con.execute("SELECT session FROM sessions").fetchall()}
    assert resolve_session(con, "rec") == resolve_session(con, None) == session  # by label; the newest
    assert resolve_session(con, EVERY_SESSION, every=True) == EVERY_SESSION
    with pytest.raises(NotFound, match="no session named"):
        resolve_session(con, EVERY_SESSION)
    tasks = list_rows(con, entities.TASKS, session=session, limit=None)
    assert tasks.total > 0 and tasks.session == session
    assert list_rows(con, entities.TASKS, session=EVERY_SESSION, limit=None).total == tasks.total
    assert list_rows(con, entities.TASKS, session=None, limit=None).total == 0
    assert summary_query.summarize_tasks(con, None)["summary"] == []
    assert summary_query.summarize_tasks(con, session)["summary"]
    assert log_page(con, LogQuery(session=None)).total == 0


def test_arrival_order_and_resends_do_not_change_the_answer(tmp_path: Path, ray_batches) -> None:
    in_order = Store(tmp_path / "a")
    load(in_order, ray_batches)
    shuffled = Store(tmp_path / "b")
    events = [e for b in ray_batches for e in b]
    random.Random(7).shuffle(events)
    chunks = [events[i : i + 9] for i in range(0, len(events), 9)]
    load(shuffled, chunks + chunks[:3] + chunks)  # every event at least twice, some three times
    assert snapshot(shuffled) == snapshot(in_order)
    grouped = Store(tmp_path / "c")  # the same, as the writer applies a group of posts: in one transaction
    apply_posts(grouped, [post(c) for c in chunks + chunks[:3] + chunks])
    assert snapshot(grouped) == snapshot(in_order)
    counts = dict(shuffled.reader().execute("SELECT name, value FROM counters").fetchall())
    assert counts["stored"] == len(events)
    assert counts["deduplicated"] == len(events) + sum(len(c) for c in chunks[:3])


def test_reindex_rebuilds_the_same_entities(store: Store, ray_batches) -> None:
    load(store, ray_batches)
    before = snapshot(store)
    assert reindex(store) == sum(len(b) for b in ray_batches)
    assert snapshot(store) == before


def test_deleting_a_session_deletes_the_driver_exits_seen_in_it_and_no_other(store: Store, ray_batches) -> None:
    load(store, ray_batches)  # (a session `raysight run` started, as run-1)
    (session,) = store.reader().execute("SELECT session FROM sessions").fetchone()
    run_exit(store, "run-1", 1, 3, 1795290400000000000)
    run_exit(store, "run-2", 2, 0, 1795290400000000000, session=session)  # a driver that joined it
    run_exit(store, "run-3", 3, 0, 1795290400000000000, session="session_other")
    assert store.delete_session(session)
    assert store.reader().execute("SELECT run_id FROM run_exits").fetchall() == [("run-3",)]


def test_inferred_states_are_marked_and_a_late_report_wins(store: Store, ray_batches) -> None:
    load(store, ray_batches)
    open_before = [t for t in snapshot(store)["tasks"] if t["state"] not in ("FINISHED", "FAILED")]
    assert open_before, "the recording has attempts whose end Ray never sent"
    driver_pid = int(store.reader().execute("SELECT driver_pid FROM jobs").fetchone()[0])
    run_exit(store, "run-1", driver_pid, 3, 1795290400000000000)
    tasks = {(t["task_id"], t["attempt_number"]): t for t in snapshot(store)["tasks"]}
    for t in open_before:
        after = tasks[(t["task_id"], t["attempt_number"])]
        assert after["state_inferred"] and after["inferred_reason"]
        assert after["state"] in ("FINISHED", "FAILED") or after["inferred_reason"].startswith("outcome unknown")
    job = snapshot(store)["jobs"][0]
    assert job["status"] == "FAILED" and job["driver_exit_code"] == 3
    # Ray's own terminal state, arriving late, replaces the inference.
    late = open_before[0]
    event = {
        "eventId": "bGF0ZWxhdGVsYXRl",
        "sourceType": "CORE_WORKER",
        "eventType": "TASK_LIFECYCLE_EVENT",
        "timestamp": "2026-11-21T19:47:00.000000000Z",
        "sessionName": late["session"],
        "taskLifecycleEvent": {
            "taskId": _b64(late["task_id"]),
            "taskAttempt": late["attempt_number"],
            "stateTransitions": [{"state": "FAILED", "timestamp": "2026-11-21T19:47:00Z"}],
            "rayErrorInfo": {"errorType": "TASK_CANCELLED", "errorMessage": "late"},
        },
    }
    apply_posts(store, [post([event])])
    row = next(
        t
        for t in snapshot(store)["tasks"]
        if (t["task_id"], t["attempt_number"]) == (late["task_id"], late["attempt_number"])
    )
    assert row["state"] == "FAILED" and not row["state_inferred"] and row["error_type"] == "TASK_CANCELLED"


def _b64(hex_id: str) -> str:
    import base64

    return base64.b64encode(bytes.fromhex(hex_id)).decode()


def test_an_older_schema_is_upgraded_and_refolded(tmp_path: Path, ray_batches) -> None:
    store = Store(tmp_path)
    load(store, ray_batches)
    before = snapshot(store)
    store.con.execute("UPDATE meta SET value = '0' WHERE key = 'schema_version'")
    store.con.execute("DROP TABLE tasks")
    store.con.execute("CREATE TABLE tasks (session VARCHAR, task_id VARCHAR)")
    store.close()
    upgraded = Store(tmp_path)
    assert upgraded.con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] != "0"
    assert snapshot(upgraded) == before
    upgraded.close()


def test_sessions_count_their_events_and_a_v2_store_is_upgraded_in_place(tmp_path: Path, ray_batches) -> None:
    store = Store(tmp_path)
    load(store, ray_batches)
    load(store, ray_batches)  # resent: counted once
    raw = store.con.execute("SELECT count(*), sum(strlen(body)) FROM raw_events").fetchone()
    assert store.con.execute("SELECT events, raw_bytes FROM sessions").fetchone() == raw
    store.con.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    store.con.execute("ALTER TABLE sessions DROP COLUMN events")
    store.con.execute("ALTER TABLE sessions DROP COLUMN raw_bytes")
    store.close()
    upgraded = Store(tmp_path)
    assert upgraded.con.execute("SELECT events, raw_bytes FROM sessions").fetchone() == raw
    assert apply_posts(upgraded, [post(ray_batches[2])]).stored == 0  # the migrated raw keys still deduplicate
    reindex(upgraded)
    assert upgraded.con.execute("SELECT events, raw_bytes FROM sessions").fetchone() == raw
    upgraded.close()


def test_a_resend_still_names_its_session(store: Store, ray_batches) -> None:
    """Events already stored are not folded again, but a resend through a labelled URL still gives the session its
    label and run ID (a session's label and span come from every well-formed event), in one group or two."""
    events = [e for b in ray_batches for e in b]
    apply_posts(store, [post(events)])
    assert store.con.execute("SELECT label, run_id FROM sessions").fetchall() == [(None, None)]
    assert apply_posts(store, [post(events, label="prod", run_id="r1")]).stored == 0
    assert store.con.execute("SELECT label, run_id, events FROM sessions").fetchall() == [("prod", "r1", len(events))]


def test_an_event_twice_in_one_group_counts_once_and_its_labelled_copy_names_the_session(tmp_path: Path) -> None:
    store = Store(tmp_path)
    events = [{**e, "sessionName": "twice"} for e in orjson.loads((FIXTURES / "ray_batches.json").read_bytes())[0]]
    result = apply_posts(store, [post(events), post(events, label="lab")])
    assert result.stored == len(events) and result.deduplicated == len(events)
    assert store.con.execute("SELECT label, events FROM sessions").fetchall() == [("lab", len(events))]
    store.close()


def test_resends_are_found_wherever_they_were_stored_and_without_a_timestamp(store: Store, ray_batches) -> None:
    """Resends are found by session, ID and timestamp (reading only the raw row groups of a group's time span): an
    old event resent among new ones of later days counts once, and so does one with no timestamp."""
    events = [e for b in ray_batches for e in b]
    apply_posts(store, [post(events)])
    later = []
    for k in range(1, 10):  # copies of the events, each with new IDs and a later day
        for e in copy.deepcopy(events):
            e["eventId"] = base64.b64encode(k.to_bytes(4, "big") + e["eventId"].encode()[:12]).decode()
            e["timestamp"] = e["timestamp"].replace("2026-11-21", f"2026-12-{k:02d}")
            later.append(e)
    assert apply_posts(store, [post(later)]).stored == len(later)
    untimed = {**events[0], "eventId": base64.b64encode(b"no timestamp").decode()}
    del untimed["timestamp"]
    assert apply_posts(store, [post([untimed])]).stored == 1
    resent = apply_posts(store, [post(later[-5:] + [events[3], untimed])])
    assert (resent.stored, resent.deduplicated) == (0, 7)
    (raw,) = store.con.execute("SELECT count(*) FROM raw_events").fetchone()
    assert raw == len(events) + len(later) + 1


def test_a_group_parsed_on_another_connection_folds_as_one_parsed_in_the_transaction(
    tmp_path: Path, ray_batches, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer parses a group on its gather thread (Store.parse) when it has several cores: the same answers and
    counters as parsing inside apply, resends and malformed events included, and the staging table is let go."""
    events = [e for b in ray_batches for e in b]
    malformed = [{**events[0], "eventId": "not base64!"}, {**events[-1], "nodeId": 7}, "not an event"]
    groups = [[post(events[:40])], [post(events[20:]), post(malformed)], [post(events, label="again")]]
    inline, parsed = Store(tmp_path / "inline"), Store(tmp_path / "parsed")
    for group in groups:
        expected = apply_posts(inline, group)
        assert apply_posts(parsed, group, parsed=parse_posts(parsed, group)) == expected
    assert snapshot(parsed) == snapshot(inline)
    counters = "SELECT * FROM counters ORDER BY 1"
    assert parsed.con.execute(counters).fetchall() == inline.con.execute(counters).fetchall()
    quarantine = "SELECT reason, body FROM quarantine ORDER BY 1"
    assert parsed.con.execute(quarantine).fetchall() == inline.con.execute(quarantine).fetchall()
    staging = "SELECT count(*) FROM duckdb_tables() WHERE database_name = 'staging'"
    assert parsed.con.execute(staging).fetchone() == (0,)
    left = parse_posts(parsed, groups[0])

    def fail(*_: object) -> None:
        raise RuntimeError("the fold failed")

    monkeypatch.setattr(ray_apply, "_fold", fail)
    with pytest.raises(RuntimeError, match="the fold failed"):  # a failed apply lets its parse go too
        apply_posts(parsed, groups[0], parsed=left)
    assert parsed.con.execute(staging).fetchone() == (0,)
    inline.close()
    parsed.close()


def test_numbers_that_do_not_fit_their_columns_are_quarantined_not_wedging_the_store(store: Store, ray_batches) -> None:
    """An event whose numbers overflow the store's columns would fail every write of its group: it is quarantined."""
    lifecycle = next(e for b in ray_batches for e in b if e["eventType"] == "TASK_LIFECYCLE_EVENT")

    def variant(n: int, change) -> dict:
        event = copy.deepcopy(lifecycle)
        event["eventId"] = base64.b64encode(bytes([n]) * 28).decode()
        change(event, event["taskLifecycleEvent"])
        return event

    odd = [
        variant(1, lambda e, p: p.update(taskAttempt=99_999_999_999)),
        variant(2, lambda e, p: p.update(workerPid=1e20)),  # as orjson reads a number beyond 64 bits
        variant(3, lambda e, p: p["stateTransitions"][0].update(timestamp="9999-12-31T00:00:00Z")),
        variant(4, lambda e, p: p.update(taskLogInfo={"stdoutStart": "99999999999999999999"})),
    ]
    kept = [
        variant(5, lambda e, p: e.update(timestamp="9999-12-31T00:00:00Z")),  # the event's own time: unknown
        variant(6, lambda e, p: p.update(taskLogInfo={"stdoutFile": "a\u0000b"})),
    ]
    result = apply_posts(store, [post(odd + kept)])
    assert result.stored == 2 and result.quarantined == 4
    reasons = [r for (r,) in store.con.execute("SELECT reason FROM quarantine").fetchall()]
    assert all("bits" in r or "timestamp" in r for r in reasons), reasons


def test_a_few_rows_merged_in_one_statement_fold_as_an_insert_then_a_merge(
    tmp_path: Path, ray_batches, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small groups (a trickle's POSTs, their rows merged in one statement) leave every folded table as the insert
    and merge of a big group's rows do, whatever order the events come in."""
    events = [e for b in ray_batches for e in b]
    random.Random(3).shuffle(events)
    chunks = [events[i : i + 3] for i in range(0, len(events), 3)]
    stores = {}
    for at_once in (ray_apply.MERGED_AT_ONCE, 0):
        monkeypatch.setattr(ray_apply, "MERGED_AT_ONCE", at_once)
        stores[at_once] = Store(tmp_path / str(at_once))
        load(stores[at_once], chunks + chunks[:5])
    one, two = (
        {t: s.con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in schema.FOLDED_TABLES}
        for s in stores.values()
    )
    assert one == two and all(one.values())
    for s in stores.values():
        s.close()
