"""Task profiles through the real app (``signals/task_profiles``): a worker's batches journalled, each kept once,
each attempt's samples summed by stack, read back as one profile; what a bad batch gets."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import orjson
import pytest
from starlette.testclient import TestClient

from raysight import wire
from raysight.server.app import create_app
from raysight.settings import Settings
from tests.ray_scenarios import wait_folded
from tests.test_otlp_receiver import raysight

SESSION = "session_2026-11-28_00-00-00_000000_1"
TASK = "a" * 40 + "01000000"
OTHER = "b" * 40 + "01000000"
ACTOR = "e" * 24 + "02000000"  # (of job 02000000)
CALLS = ["1" * 16 + ACTOR, "2" * 16 + ACTOR]  # its calls (an actor task's ID ends with its actor's)
BURN = "main (job.py:10);burn (job.py:3)"
NAP = "main (job.py:10);nap (job.py:6)"


def batch(batch_id: str, *attempts: tuple[str, int, list[list[Any]]], **more: Any) -> dict[str, Any]:
    return {
        "batch_id": batch_id,
        "session": SESSION,
        "node_id": "c" * 56,
        "worker_id": "d" * 56,
        "pid": 4242,
        "hz": 20.0,
        "dropped": 0,
        "attempts": [{"task_id": t, "attempt": a, "stacks": s} for t, a, s in attempts],
        **more,
    }


def post(server: TestClient, body: dict[str, Any]) -> Any:
    return server.post(wire.TASK_PROFILES, content=orjson.dumps(body), headers={"content-type": "application/json"})


def test_an_attempt_s_samples_are_summed_by_stack_and_a_resent_batch_adds_nothing(server: TestClient) -> None:
    first = batch("w1-1", (TASK, 0, [[BURN, 30, 29], [NAP, 4, 0]]), (OTHER, 0, [[NAP, 10, 0]]))
    assert post(server, first).json() == {"ok": True, "stacks": 3}
    assert post(server, first).status_code == 200  # (its answer lost: the sender sends it again)
    assert post(server, batch("w1-2", (TASK, 0, [[BURN, 10, 10]]), (TASK, 1, [[NAP, 5, 0]]))).status_code == 200
    wait_folded(server)
    found = server.get(wire.PROFILE, params={"task": TASK, "attempt": "0"}).json()
    assert found["stacks"] == [[BURN, 40, 39], [NAP, 4, 0]]
    assert (found["session"], found["attempts"], found["samples"], found["on_cpu"]) == (SESSION, 1, 44, 39)
    assert (found["wall_s"], found["cpu_s"]) == (2.2, 1.95)  # (samples at 20 Hz)
    every = server.get(wire.PROFILE, params={"task": TASK}).json()
    assert (every["attempts"], every["stacks"]) == (2, [[BURN, 40, 39], [NAP, 9, 0]])
    cpu = server.get(wire.PROFILE, params={"task": TASK, "cpu_only": "true"}).json()
    assert cpu["stacks"] == [[BURN, 40, 39]]
    assert server.get(wire.PROFILE, params={"job": "01000000"}).json()["attempts"] == 3  # (TASK's two, OTHER's)
    doctor = server.get(wire.DOCTOR).json()["counters"]
    assert (doctor["profile_batches"], doctor["profile_samples"]) == (2, 59)


def test_an_actor_s_profile_merges_its_calls_known_by_their_ids_alone(server: TestClient) -> None:
    """Serve's replicas run with task events off: the tasks table knows none of their calls, their IDs do."""
    calls = [(CALLS[0], 0, [[BURN, 3, 3]]), (CALLS[1], 0, [[BURN, 2, 2], [NAP, 5, 0]]), (TASK, 0, [[NAP, 7, 0]])]
    assert post(server, batch("w1-1", *calls)).status_code == 200
    wait_folded(server)
    actor = server.get(wire.PROFILE, params={"actor": ACTOR}).json()
    assert (actor["attempts"], actor["stacks"]) == (2, [[BURN, 5, 5], [NAP, 5, 0]])
    assert server.get(wire.PROFILE, params={"job": "02000000"}).json()["samples"] == 10


def test_a_batch_resent_into_the_same_group_is_kept_once(tmp_path: Path) -> None:
    settings = Settings(tmp_path / "data").replace(fold_linger_s=1.0, fold_rest=0)  # (both POSTs in one group)
    with TestClient(create_app(settings)) as server:
        for _ in range(2):
            assert post(server, batch("w1-1", (TASK, 0, [[BURN, 30, 29]]))).status_code == 200
        wait_folded(server)
        assert server.get(wire.PROFILE, params={"task": TASK}).json()["stacks"] == [[BURN, 30, 29]]


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"hz": 0}, "hz must be"),
        ({"session": "nope"}, "session must be"),
        ({"batch_id": "a b"}, "batch_id must be"),
        ({"attempts": [{"task_id": "XYZ", "attempt": 0, "stacks": []}]}, "attempts[0].task_id"),
        ({"attempts": [{"task_id": TASK, "attempt": 0, "stacks": [[BURN, 3, 4]]}]}, "samples on CPU"),
        ({"attempts": [{"task_id": TASK, "attempt": 0, "stacks": [["", 3, 0]]}]}, "stack must be"),
        ({"attempts": {}}, "attempts must be a list"),
        ({"attempts": [{"task_id": TASK, "attempt": 0, "stacks": [[";".join(["f (a.py:1)"] * 200), 1, 0]]}]}, "frames"),
    ],
)
def test_a_bad_batch_gets_a_400_naming_what_is_wrong(server: TestClient, change: dict[str, Any], named: str) -> None:
    answer = post(server, batch("w1-1", **{}) | change)
    assert answer.status_code == 400 and named in answer.text, answer.text


def test_a_profile_of_nothing_sampled_is_empty_and_a_query_names_one_thing(server: TestClient) -> None:
    post(server, batch("w1-1", (TASK, 0, [[BURN, 3, 3]])))
    wait_folded(server)
    nothing = server.get(wire.PROFILE, params={"task": OTHER}).json()
    assert (nothing["session"], nothing["samples"], nothing["stacks"]) == (SESSION, 0, [])
    svg = server.get(wire.PROFILE, params={"task": TASK, "format": "svg"})
    assert svg.headers["content-type"] == "image/svg+xml" and "burn (job.py:3)" in svg.text
    assert "format must be" in server.get(wire.PROFILE, params={"task": TASK, "format": "png"}).text
    assert server.get(wire.PROFILE, params={"task": "zz"}).status_code == 400
    assert "name one of" in server.get(wire.PROFILE).text
    assert server.get(wire.PROFILE, params={"attempt": "1", "job": "01000000"}).status_code == 400


def test_the_flame_graph_of_any_stack_is_well_formed_svg_and_deleting_a_session_deletes_its_stacks(
    server: TestClient,
) -> None:
    odd = "main (job.py:10);<b>&\x01\x1b[31m (job.py:3)"  # (a worker names its frames: markup, control characters)
    assert post(server, batch("w1-1", (TASK, 0, [[odd, 3, 3]]))).status_code == 200
    wait_folded(server)
    svg = server.get(wire.PROFILE, params={"task": TASK, "format": "svg"}).text
    texts = [node.text or "" for node in ElementTree.fromstring(svg).iter("{http://www.w3.org/2000/svg}text")]
    assert any("<b>&\ufffd\ufffd[31m" in text for text in texts), texts
    store = raysight(server).store
    assert raysight(server).writer.call(lambda store: store.delete_session(SESSION)).result(timeout=15)
    assert store.reader().execute("SELECT count(*) FROM profile_stacks").fetchone() == (0,)


def test_an_acknowledged_batch_survives_a_stop_before_it_is_folded(tmp_path: Path) -> None:
    with TestClient(create_app(Settings(tmp_path / "data").replace(fold_linger_s=30))) as server:  # held: journalled
        assert post(server, batch("w1-1", (TASK, 0, [[BURN, 30, 29]]))).json() == {"ok": True, "stacks": 1}
    with TestClient(create_app(Settings(tmp_path / "data").replace(fold_linger_s=0, fold_rest=0))) as server:
        wait_folded(server)  # (replayed from the journal)
        assert server.get(wire.PROFILE, params={"task": TASK}).json()["stacks"] == [[BURN, 30, 29]]
