"""What Ray's aggregators report of themselves: parsing their Prometheus text, finding a driver's session and its
nodes' metrics ports, and the doctor's words for it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from raysight.agent.scrape import aggregator_lines, find_session, metrics_ports
from raysight.cli.query import ray_reported_lines
from raysight.ingest.ray_metrics import RaySample, parse_aggregator_metrics
from tests.conftest import FIXTURES

TEXT = (FIXTURES / "aggregator_metrics.txt").read_text()  # a head node's page, trimmed (the aggregator and others)
SESSION = "session_2026-11-21_19-46-15_579671_2021"


def by_metric(samples: list[RaySample]) -> dict[tuple[str, str], float]:
    return {(s.metric.removeprefix("ray_aggregator_agent_"), s.event_type): s.value for s in samples}


def test_only_the_aggregators_counters_and_gauges_are_kept() -> None:
    samples = parse_aggregator_metrics(TEXT)
    assert {(s.session, s.source) for s in samples} == {(SESSION, "192.0.2.2:7798")}
    assert by_metric(samples) == {
        ("events_received", ""): 15522,
        ("published_events", ""): 300,
        ("filtered_events", ""): 0,
        ("queue_dropped_events", "TASK_LIFECYCLE_EVENT"): 8780,
        ("queue_dropped_events", "TASK_PROFILE_EVENT"): 3201,
        ("queue_dropped_events", "TASK_DEFINITION_EVENT"): 3201,
        ("queue_dropped_events", "WORKER_LIFECYCLE_EVENT"): 2,
        ("consecutive_failures_since_last_success", ""): 3,
        ("time_since_last_success_seconds", ""): 12.5,
    }  # no histogram, no ray_node_* or ray_tasks
    kinds = {s.metric: s.kind for s in samples}
    assert kinds["ray_aggregator_agent_events_received"] == "counter"
    assert kinds["ray_aggregator_agent_consecutive_failures_since_last_success"] == "gauge"


def test_odd_series_are_summed_or_left_out_and_bad_text_is_a_value_error() -> None:
    help_type = "# TYPE ray_aggregator_agent_publish_failures_total counter\n"
    odd = (
        help_type
        + "\n".join(
            [
                f'ray_aggregator_agent_publish_failures_total{{SessionName="{SESSION}",ip="h",pid="1",consumer="a"}} 2',
                f'ray_aggregator_agent_publish_failures_total{{SessionName="{SESSION}",ip="h",pid="1",consumer="b"}} 3',
                'ray_aggregator_agent_publish_failures_total{ip="h",pid="1"} 7',  # no session
                f'ray_aggregator_agent_publish_failures_total{{SessionName="{SESSION}",ip="h",pid="2"}} NaN',
                f'ray_aggregator_agent_publish_failures_created{{SessionName="{SESSION}",ip="h",pid="1"}} 1.7e9',
                "ray_aggregator_agent_untyped_total 4",
            ]
        )
        + "\n"
    )
    assert parse_aggregator_metrics(odd) == [
        RaySample(SESSION, "h:1", "ray_aggregator_agent_publish_failures", "", "counter", 5.0)
    ]
    assert parse_aggregator_metrics("") == []
    for bad in ['ray_aggregator_agent_x{SessionName="s" 1', "x{a=b} 1", "# TYPE x nonsense\nx 1", "\x00"]:
        with pytest.raises(ValueError, match="not Prometheus text"):
            parse_aggregator_metrics(bad)


def test_the_drivers_session_is_found_by_its_core_log_and_its_nodes_by_their_port_files(tmp_path: Path) -> None:
    ray_dir = tmp_path / "ray"
    for name, pid in (("session_2026-11-21_19-00-00_000001_100", 100), ("session_2026-11-21_20-00-00_000001_200", 200)):
        logs = ray_dir / name / "logs"
        logs.mkdir(parents=True)
        (logs / f"python-core-driver-01000000{'f' * 48}_{pid}.log").touch()
        (logs / f"python-core-worker-{'a' * 56}_{pid + 1}.log").touch()
    (ray_dir / "session_latest").symlink_to(ray_dir / "session_2026-11-21_20-00-00_000001_200")
    newer = ray_dir / "session_2026-11-21_20-00-00_000001_200"
    assert find_session(ray_dir, 200, 0) == newer
    assert find_session(ray_dir, 100, 0) == ray_dir / "session_2026-11-21_19-00-00_000001_100"
    assert find_session(ray_dir, 101, 0) is None  # a worker's log, not a driver's
    assert find_session(ray_dir, 200, time.time() + 60) is None  # only sessions touched since the run began
    assert find_session(tmp_path / "missing", 200, 0) is None
    (newer / f"metrics_export_port_{'4' * 56}").write_text("35153")
    (newer / f"metrics_export_port_{'5' * 56}").write_text("")  # being written
    (newer / f"metrics_agent_port_{'4' * 56}").write_text("18267")
    assert metrics_ports(newer) == [35153]
    lines = aggregator_lines(TEXT)
    assert "ray_node_cpu_count" not in lines and "ray_tasks" not in lines
    assert parse_aggregator_metrics(lines) == parse_aggregator_metrics(TEXT)


def test_the_doctor_says_what_ray_reported_losing_in_words() -> None:
    base = {
        "label": None,
        "agents": 1,
        "received": 15522,
        "published": 300,
        "filtered": 0,
        "publish_failures": 0,
        "buffer_add_failures": 0,
        "consecutive_publish_failures": 0,
        "dropped": {},
    }
    lossy = {
        **base,
        "session": "s1",
        "label": "prod",
        "publish_failures": 402,
        "consecutive_publish_failures": 3,
        "dropped": {"TASK_LIFECYCLE_EVENT": 8780, "TASK_PROFILE_EVENT": 3201},
    }
    assert ray_reported_lines([lossy, {**base, "session": "s2"}]) == [
        "s1 (prod), 1 node(s): received 15,522, published 300, filtered out 0",
        "  Ray reported dropping 8,780 TASK_LIFECYCLE_EVENT, 3,201 TASK_PROFILE_EVENT (buffer full)",
        "  Ray reported 402 events it gave up publishing after retries",
        "  Ray's last 3 publish attempts had failed when scraped",
        "s2, 1 node(s): received 15,522, published 300, filtered out 0",
        "  Ray reported no drops",
    ]
