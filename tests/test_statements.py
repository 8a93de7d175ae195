"""Every named statement of the store runs on the recorded session (`fixtures/ray_batches.json`): each macro, each
stage and write of each group, each read model's query, as :mod:`raysight.store.catalog` collects them, so that one
that no longer binds fails here; and the store runs each group's statements in the order
`python -m raysight.signals.ray_events.pipeline` prints them."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raysight.signals.ray_events import event_stages, pipeline
from raysight.signals.ray_events.apply import apply_posts, parse_posts, posts_table, reindex
from raysight.store import catalog
from raysight.store.statements import Group, bind, params
from raysight.store.store import Store
from tests.conftest import run_exit
from tests.test_reconcile import retried
from tests.test_store import load, post, snapshot


def samples(store: Store) -> dict[str, Any]:
    """A value for each parameter a statement may name (``$session``, ``of_session``), of the recorded session."""
    session, task = store.reader().execute("SELECT session, task_id FROM tasks LIMIT 1").fetchone()
    return {
        **dict.fromkeys(("job", "since", "until", "type", "node", "worker", "at", "step", "start", "end")),
        "session": session,
        "sessions": [session],
        "tasks": [task],
        "of_session": session,
        "of_sessions": [session],
        "name": "rec",
        "id": task,
        "colours": False,
        "kind": "task",
        "ms": 0,
        "near": 5000,
        "n": 120,
        "now": 0,
        "steps": [1000],
        "bins": 120,
        "limit": 10,
        "trace": "0" * 32,
    }


def run(store: Store, sql: str, values: dict[str, Any]) -> list[tuple[Any, ...]]:
    unknown = set(params(sql)) - set(values)
    assert not unknown, f"give the test a sample value of {unknown}"
    return store.con.execute(sql, bind(sql, values)).fetchall()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory, ray_batches: list[list[dict[str, Any]]]) -> Iterator[Store]:
    store = Store(tmp_path_factory.mktemp("statements"))
    load(store, ray_batches)
    yield store
    store.close()


def test_each_table_macro_reads_the_recorded_session(recorded: Store) -> None:
    values = samples(recorded)
    tables = [m for m in catalog.MACROS if m.table]
    assert {"session_ends", "job_run_exits", "rooted_failures", "log_attempts"} <= {m.name for m in tables}
    for macro in tables:
        arguments = ", ".join(f"${name}" for name in macro.params)
        run(recorded, f"SELECT count(*) FROM {macro.name}({arguments})", values)


@pytest.mark.parametrize("group", catalog.GROUPS, ids=lambda g: g.name)
def test_each_group_runs_its_statements_in_order(
    recorded: Store, group: Group, ray_batches: list[list[dict[str, Any]]]
) -> None:
    """Each statement of the group, in order, over the inputs it reads (the POST bodies, the table parsed on another
    connection, the chunk of raw events), in a transaction rolled back."""
    con, values = recorded.con, samples(recorded)
    posts = [post(batch) for batch in ray_batches] + [post([{"eventId": "not base64"}])]
    con.register(event_stages.POSTED, posts_table(posts))
    con.execute(event_stages.POSTS.sql)
    con.execute(f"CREATE TABLE staging.parsed_1 AS {event_stages.EVENTS.select}")  # (as Store.parse makes it)
    con.execute(event_stages.POSTS.drop)
    con.execute("SET VARIABLE chunk_start = 0")
    con.execute("SET VARIABLE chunk_end = 1000000")
    con.execute("BEGIN")
    try:
        for step in group.steps:
            run(recorded, step.sql, values)
    finally:
        con.execute("ROLLBACK")
        con.execute("DROP TABLE staging.parsed_1")
        con.unregister(event_stages.POSTED)


def test_each_read_model_query_runs_on_the_recorded_session(recorded: Store) -> None:
    values = samples(recorded)
    found = catalog.read_queries()
    assert {"error groups", "sessions", "task stream", "activity"} <= {q.name for q in found}
    for query in found:
        run(recorded, query.sql, values)
    listed = snapshot(recorded)  # every field of every resource (the statements each list builds)
    assert all(listed[name] for name in ("tasks", "actors", "nodes", "workers", "jobs"))


def test_python_m_prints_each_group_s_statements_in_order() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "raysight.signals.ray_events.pipeline", "apply"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    printed = done.stdout
    places = [printed.index(f"-- {step.name}: {step.about}\n{step.sql};") for step in pipeline.APPLY.steps]
    assert places == sorted(places) and "-- the group reconcile" not in printed
    assert [step.name for step in pipeline.APPLY.steps][:4] == ["incoming", "batch_events", "received", "quarantine"]


class Statements(logging.Handler):
    """The statements the store runs, from its SQL log (whitespace as it logs it)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.run: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.run.append(record.getMessage().split("\t", 1)[1])


def test_the_store_runs_each_group_in_the_order_it_is_printed(
    tmp_path: Path, ray_batches: list[list[dict[str, Any]]]
) -> None:
    """A group parsed in the transaction, then one parsed on another connection (each with a malformed event), a
    reindex, a driver's exit that ends the session (so that its nodes', workers' and actors' ends are at stake), and a
    later attempt of a task left open (task events alone, reconciled by their tasks): each group's statements are
    among those the store ran, in the group's order."""
    logged, log = Statements(), logging.getLogger("raysight.store.sql")
    log.addHandler(logged)
    level = log.level
    log.setLevel(logging.DEBUG)
    store = Store(tmp_path)
    try:
        half = len(ray_batches) // 2
        malformed = post([{"eventId": "not base64"}])  # (quarantined)
        apply_posts(store, [post(batch, "rec", "run-1") for batch in ray_batches[:half]] + [malformed])
        rest = [post(batch, "rec", "run-1") for batch in ray_batches[half:]] + [malformed]
        apply_posts(store, [], parsed=parse_posts(store, rest))
        reindex(store)
        run_exit(store, "run-1", None, 0, 2**62)
        running = "SELECT task_id, attempt FROM tasks WHERE reported_state = 'RUNNING' LIMIT 1"
        (attempt,) = store.con.execute(running).fetchall()
        events = [e for batch in ray_batches for e in batch]
        apply_posts(store, [post([retried(events[0]["sessionName"], *attempt, events[-1]["timestamp"])])])
    finally:
        store.close()
        log.removeHandler(logged)
        log.setLevel(level)
    for group in catalog.GROUPS:
        at = -1
        for step in group.steps:
            sql = " ".join(step.sql.split())
            assert sql in logged.run[at + 1 :], f"{group.name}: {step.name} not run after the statements before it"
            at = logged.run.index(sql, at + 1)
