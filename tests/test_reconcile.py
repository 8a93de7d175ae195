"""A fold re-derives only what it may have changed of what is inferred (a group of task events alone that keeps its
sessions' spans: its tasks' attempts alone), and leaves every inference as reconciling every session anew would."""

from __future__ import annotations

import base64
import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from raysight.signals.ray_events import apply as ray_apply
from raysight.signals.ray_events.apply import apply_posts
from raysight.signals.ray_events.event_stages import TASK_PAYLOADS
from raysight.signals.ray_events.reconcile import reconcile
from raysight.store.store import Store
from raysight.store.tx import Tx
from tests.conftest import run_exit
from tests.test_store import post

TABLES = ("tasks", "nodes", "workers", "actors", "jobs")
RUN_ENDED_NS = 1795290400000000000  # after the recording's last event


def rows(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    return {name: store.con.execute(f"SELECT * FROM {name} ORDER BY ALL").fetchall() for name in TABLES}


def reconciled_anew(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    """The tables as a reconciliation of every session would leave them (rolled back)."""
    store.con.execute("BEGIN")
    try:
        reconcile(Tx(store.con).run, [s for (s,) in store.con.execute("SELECT session FROM sessions").fetchall()])
        return rows(store)
    finally:
        store.con.execute("ROLLBACK")


class Folds:
    """Folds groups into a store, each checked against a reconciliation of everything; counts the folds reconciled
    by their tasks alone, and those of them that changed an inference."""

    def __init__(self, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
        self.store, self.narrow, self.changed = store, 0, 0
        monkeypatch.setattr(ray_apply, "reconcile_tasks", self._counted(ray_apply.reconcile_tasks))

    def _counted(self, reconcile_tasks: Any) -> Any:
        def counted(*args: Any) -> None:
            self.narrow += 1
            reconcile_tasks(*args)

        return counted

    def fold(self, events: list[dict[str, Any]], label: str | None = "rec", run_id: str | None = "run-1") -> None:
        before, narrow = self.inferred(), self.narrow
        apply_posts(self.store, [post(events, label, run_id)])
        self.check()
        self.changed += self.narrow > narrow and self.inferred() != before

    def inferred(self) -> list[tuple[Any, ...]]:
        return self.store.con.execute(
            """SELECT session, task_id, attempt, inferred_state, inferred_reason, inferred_error_type FROM tasks
               WHERE inferred_state IS NOT NULL ORDER BY ALL"""
        ).fetchall()

    def check(self) -> None:
        assert rows(self.store) == reconciled_anew(self.store)


def is_task_event(event: dict[str, Any]) -> bool:
    return event.get("eventType") in TASK_PAYLOADS


def shifted(event: dict[str, Any], session: str, minutes: int) -> dict[str, Any]:
    """``event`` in another ``session``, ``minutes`` later (its envelope's time: what a session's span is)."""
    at = datetime.fromisoformat(event["timestamp"][:26]) + timedelta(minutes=minutes)
    return {**event, "sessionName": session, "timestamp": at.isoformat() + "Z", "eventId": None}


def retried(session: str, task_id: str, attempt: int, at: str) -> dict[str, Any]:
    """The lifecycle event of a later attempt of a task, pending at ``at``."""
    return {
        "sourceType": "CORE_WORKER",
        "eventType": "TASK_LIFECYCLE_EVENT",
        "timestamp": at,
        "sessionName": session,
        "taskLifecycleEvent": {
            "taskId": base64.b64encode(bytes.fromhex(task_id)).decode(),
            "taskAttempt": attempt + 1,
            "stateTransitions": [{"state": "PENDING_NODE_ASSIGNMENT", "timestamp": at}],
        },
    }


@pytest.mark.parametrize("seed", [None, 1, 2, 3])
def test_task_events_arriving_late_leave_every_inference_as_reconciling_everything(
    tmp_path: Path, ray_batches: list[list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch, seed: int | None
) -> None:
    """The cluster's events and some task events, then the session's end, then the other task events one or two at
    a time (in the recorded order, or shuffled): ends Ray never sent are inferred, then revised as the task events
    come (an execution's end, a later attempt, a definition, Ray's own end state)."""
    store = Store(tmp_path)
    folds = Folds(store, monkeypatch)
    events = [e for batch in ray_batches for e in batch]
    late = [e for e in events if is_task_event(e)][::2]
    if seed is not None:
        random.Random(seed).shuffle(late)
    folds.fold([e for e in events if not any(e is t for t in late)])
    driver_pid = int(store.con.execute("SELECT driver_pid FROM jobs").fetchone()[0])
    run_exit(store, "run-1", driver_pid, 0, RUN_ENDED_NS)
    folds.check()
    step = 1 if seed is None else 2
    for i in range(0, len(late), step):
        folds.fold(late[i : i + step])
    assert folds.narrow and folds.changed, "task events were reconciled by their tasks, and changed inferences"
    changed = folds.changed  # a later attempt of each attempt still open: the open attempts' verdicts change
    open_attempts = store.con.execute(
        "SELECT task_id, attempt FROM tasks WHERE coalesce(reported_state, 'NIL') NOT IN ('FINISHED', 'FAILED')"
    ).fetchall()
    assert open_attempts
    folds.fold([retried(events[0]["sessionName"], *a, events[len(events) // 2]["timestamp"]) for a in open_attempts])
    assert folds.changed == changed + 1
    store.close()


def test_a_session_that_a_later_one_follows_is_reconciled_whole_when_its_span_moves(
    tmp_path: Path, ray_batches: list[list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two sessions of a cluster `raysight run` did not start: the first ends when the second begins, after its own
    last event. A task event moving the first one's last event, or the second one's first, changes those ends: such
    groups are reconciled whole; one within the spans, by its tasks."""
    store = Store(tmp_path)
    folds = Folds(store, monkeypatch)
    events = [e for batch in ray_batches for e in batch]
    first = events[0]["sessionName"]
    tasks = [e for e in events if is_task_event(e)]
    folds.fold([e for e in events if e is not tasks[-1]], run_id=None)
    folds.fold([shifted(e, "session_later", 60) for e in events[1:]], run_id=None)
    assert store.con.execute("SELECT ended_ns FROM session_ends([$1])", [first]).fetchone()[0] is not None
    narrow = folds.narrow
    task_id, attempt = store.con.execute(
        "SELECT task_id, attempt FROM tasks WHERE session = ? LIMIT 1", [first]
    ).fetchone()
    folds.fold([retried(first, task_id, attempt, tasks[len(tasks) // 2]["timestamp"])], run_id=None)  # within its span
    assert folds.narrow == narrow + 1
    folds.fold([shifted(tasks[-1], first, 90)], run_id=None)  # after the second session began
    folds.fold([shifted(tasks[0], "session_later", 30)], run_id=None)  # before the second session's first event
    assert folds.narrow == narrow + 1
    store.close()


def submitted_again(event: dict[str, Any]) -> dict[str, Any]:
    """A profile event of the same attempt a moment later, of its `submit_task` entries alone."""
    task = event["taskProfileEvents"]
    source = task["profileEvents"]
    submits = [
        {**entry, "startTime": str(int(entry["startTime"]) + 1)}
        for entry in source["events"]
        if entry["eventName"] == "submit_task"
    ]
    return {**event, "eventId": None, "taskProfileEvents": {**task, "profileEvents": {**source, "events": submits}}}


def test_profile_events_that_change_no_task_are_appended_neither_written_nor_reconciled(
    tmp_path: Path, ray_batches: list[list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ray sends a running task's profile events every second, also of the calls it keeps no task events of (Serve's
    proxy submitting a replica's call, ~3 `submit_task` entries a request): a group of them that sets nothing their
    attempt's row does not hold already appends its entries and leaves the tasks table, and every inference,
    untouched; one that sets something (a later attempt's) is reconciled by its tasks."""
    store = Store(tmp_path)
    folds = Folds(store, monkeypatch)
    events = [e for batch in ray_batches for e in batch]
    folds.fold(events)
    profiles = [e for e in events if e["eventType"] == "TASK_PROFILE_EVENT"]
    submits = [e for e in map(submitted_again, profiles) if e["taskProfileEvents"]["profileEvents"]["events"]]
    assert submits, "the recording's tasks submitted others"
    entries = sum(len(e["taskProfileEvents"]["profileEvents"]["events"]) for e in submits)
    tasks, kept, narrow = (
        rows(store)["tasks"],
        store.con.execute("SELECT count(*) FROM task_profile").fetchone()[0],
        folds.narrow,
    )
    folds.fold(submits)
    assert rows(store)["tasks"] == tasks and folds.narrow == narrow
    assert store.con.execute("SELECT count(*) FROM task_profile").fetchone()[0] == kept + entries
    later = {**submits[0], "taskProfileEvents": {**submits[0]["taskProfileEvents"], "attemptNumber": 5}}
    folds.fold([later])
    assert folds.narrow == narrow + 1 and rows(store)["tasks"] != tasks
    store.close()
