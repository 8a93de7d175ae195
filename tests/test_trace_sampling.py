"""Stored traces: tail sampling (``signals/spans/trace_sampling.py``) — complete traces neither failed nor slow are
kept in the fraction asked for, by a hash of their ID; failed and slow ones always; undecided ones wait — and the
writer's folding of the exports that arrive within its spans linger together."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from raysight import wire
from raysight.cli.server import server_cmd
from raysight.settings import TailSampling, WriterSettings
from raysight.signals.spans import SIGNAL as SPANS_SIGNAL
from raysight.signals.spans import apply
from raysight.signals.spans.apply import apply_spans
from raysight.signals.spans.parse import SPANS
from raysight.signals.spans.trace_sampling import sample_traces
from raysight.store.store import Store
from raysight.store.writer import Writer

S = 1_000_000_000
NOW = 1_800_000_000 * S


def span(trace: int, span_id: int, start: int, end: int, status: str = "unset") -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(SPANS.names)
    row.update(
        trace_id=f"{trace:032x}", span_id=f"{span_id:016x}", name=f"s{span_id}", start_ns=start, end_ns=end,
        status=status, session="session_2026-11-24_12-00-00_000000_1",
    )  # fmt: skip
    return row


def traces(store: Store) -> set[int]:
    return {int(t, 16) for (t,) in store.reader().execute("SELECT DISTINCT trace_id FROM spans").fetchall()}


def counters(store: Store) -> dict[str, int]:
    return dict(store.reader().execute("SELECT name, value FROM counters").fetchall())


@pytest.fixture
def store(tmp_path: Path) -> Store:
    store = Store(tmp_path / "data")
    yield store
    store.close()


def test_failed_slow_and_unfinished_traces_stay_the_rest_go(store: Store) -> None:
    done = NOW - 60 * S  # ended a minute ago: decided by a pass with a 30 s wait
    task = {"scope": wire.TASK_SCOPE, "kind": "consumer", "task_id": "ab" * 24, "attempt": 0}
    rows = [
        {**span(1, 1, done - S // 10, done), **task},  # quick and fine: dropped (a task attempt's span)
        span(1, 2, done - S // 20, done - S // 30),
        span(2, 3, done - S // 10, done, "error"),  # a failed span: kept
        span(2, 4, done - S // 20, done - S // 30),
        span(3, 5, done - 3 * S, done),  # 3 s long: kept as slow
        span(4, 6, NOW - 2 * S, NOW - S),  # ended a second ago: not decided yet
    ]
    apply_spans(store, [orjson.dumps(rows)])
    sampling = TailSampling(keep=0.0, slow_ns=2 * S, wait_s=30)
    assert sample_traces(store, sampling, NOW) == 2
    assert traces(store) == {2, 3, 4}
    ends = store.reader().execute("SELECT task_id, attempt, error FROM attempt_ends").fetchall()
    assert ends == [("ab" * 24, 0, None)]  # how the attempt ended outlives its span: it returned
    assert sample_traces(store, sampling, NOW) == 0  # decided once
    late = span(1, 7, done, done + 1)  # a span of a trace already decided, come late: kept
    apply_spans(store, [orjson.dumps([late])])
    assert sample_traces(store, sampling, NOW + 60 * S) == 1  # trace 4, now complete
    assert traces(store) == {1, 2, 3}
    assert {k: v for k, v in counters(store).items() if "sampled" in k} == {
        "traces_sampled_out": 2,
        "spans_sampled_out": 3,
    }


def test_the_fraction_kept_is_decided_by_the_trace_id_alike_everywhere(tmp_path: Path) -> None:
    rows = [span(t, t, NOW - 90 * S, NOW - 80 * S) for t in range(1, 2001)]
    kept = []
    for name in ("a", "b"):
        store = Store(tmp_path / name)
        try:
            apply_spans(store, [orjson.dumps(rows)])
            sample_traces(store, TailSampling(keep=0.25, wait_s=30), NOW)
            kept.append(traces(store))
        finally:
            store.close()
    assert kept[0] == kept[1] and 400 < len(kept[0]) < 600  # 2,000 × 0.25, give or take


def test_the_server_takes_the_sampling_options_and_refuses_bad_ones() -> None:
    assert not TailSampling().active and TailSampling(keep=0.5).active
    with pytest.raises(ValueError, match="0 to 1"):
        TailSampling(keep=1.5)
    for args, says in ((["--traces-keep", "2"], "0<=x<=1"), (["--traces-keep-slow", "soon"], "not a duration")):
        result = CliRunner().invoke(server_cmd, args)
        assert result.exit_code == 2 and says in result.output, result.output


@pytest.mark.parametrize("linger_s", [0.0, 1.0])
def test_exports_arriving_within_the_spans_linger_are_folded_in_one_transaction(
    store: Store, linger_s: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    folds: list[int] = []  # the exports each fold took

    def counted(store: Store, bodies: list[bytes], journal_seq: int | None = None) -> int:
        folds.append(len(bodies))
        return apply_spans(store, bodies, journal_seq)

    monkeypatch.setattr(apply, "apply_spans", counted)
    writer = Writer(store, settings=WriterSettings(fold_linger_s=0, fold_rest=0, spans_linger_s=linger_s))
    try:
        for i in range(5):  # five exports 50 ms apart, as five traced workers' a moment apart
            writer.submit(orjson.dumps([span(1, i + 1, NOW, NOW + S)]), events=1, kind=SPANS_SIGNAL.name).result(
                timeout=10
            )
            time.sleep(0.05)
        deadline = time.monotonic() + 10
        while counters(store).get("spans", 0) < 5:
            assert time.monotonic() < deadline, folds
            time.sleep(0.05)
    finally:
        writer.close()
    assert sum(folds) == 5
    if linger_s:
        assert folds == [5]
    else:
        assert len(folds) >= 3, folds
