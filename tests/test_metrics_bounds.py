"""Bounds on the metrics ingest path (``POST /ingest/agent/metrics``): a hostile page is refused before the writer sees
it (a line of many labels, a page of too many lines, a value the store cannot keep), and what the store remembers of
refused series stays bounded whatever the scrapes bring. Each test sends the request a probe of the running server
sent, scaled down where the full size would cost CI time (the docstring says by how much)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from starlette.testclient import TestClient

from raysight.errors import BadIngest, TooMany
from raysight.server.app import create_app
from raysight.settings import Settings
from raysight.signals.scrapes import parse as prom_text
from raysight.signals.scrapes.apply import targets
from tests.ray_scenarios import JSON, ServerProcess
from tests.test_metrics import SESSION, T0, at, scrape, store_call, values

FIXTURES = Path(__file__).parent / "fixtures"


def body(text: str, scraped_ms: int = T0, **target: Any) -> bytes:
    return orjson.dumps(
        {"session": SESSION, "scraped_ms": scraped_ms, "target": {"job": "ray", **target}, "text": text}
    )


def labelled(n: int) -> str:
    """A sample line of ``n`` labels, as the probe's: ``many{l0="v",…} 1``."""
    return "many{" + ",".join(f'l{i}="v"' for i in range(n)) + "} 1\n"


def test_a_line_of_many_labels_is_refused_at_once_while_the_server_answers(tmp_path: Path) -> None:
    """The probe's line of 100,000 labels (1.2 MB; it kept the writer busy 70 s) at full size: refused with 400
    naming the line and the limit before the writer sees it, /api/raysight/ping answering within 1 s all the while;
    a scrape within the bounds folds after it, and the server stops at once."""
    server = ServerProcess(tmp_path / "data").start()
    answers: list[httpx.Response] = []
    url = f"{server.url}/ingest/agent/metrics"
    try:
        sender = threading.Thread(
            target=lambda: answers.append(
                httpx.post(url, content=body(labelled(100_000), instance="h:1"), headers=JSON, timeout=60)
            )
        )
        sender.start()
        deadline = time.monotonic() + 60
        with httpx.Client(base_url=server.url, timeout=1) as http:
            while sender.is_alive():  # (a ping slower than 1 s raises)
                assert http.get("/api/raysight/ping").status_code == 200
                assert time.monotonic() < deadline, "the scrape was not answered"
                time.sleep(0.05)
            sender.join()
            (refused,) = answers
            assert refused.status_code == 400, refused.text
            assert refused.json()["error"].startswith('bad scrape: line 1 (\'many{l0="v",l1="v"')
            assert refused.json()["error"].endswith("over 64 labels (Prometheus's label_limit)")
            kept = http.post(url, content=body(labelled(64), T0 + 1, instance="h:1"), headers=JSON, timeout=10)
            assert kept.json() == {"ok": True, "samples": 1}, kept.text
            answer = http.get("/api/v1/query", params={"query": "count by (job) ({l63='v'})", "time": (T0 + 1) / 1000})
            assert values(answer.json()["data"]["result"]) == [1.0]
    finally:
        server.stop()  # (within 30 s, or it raises)


def test_a_page_of_too_many_lines_is_refused_before_it_is_decoded(server: TestClient) -> None:
    """The probe's scrape of 1M series was stored but answered 503, past the ingest deadline: a page over MAX_LINES
    is now refused with 413, counted on the wire (here MAX_LINES + 1 lines of one sample, 200 KB, not 1M series);
    a page of MAX_LINES lines is taken."""
    page = "x 1\n" * (prom_text.MAX_LINES + 1)
    over = server.post("/ingest/agent/metrics", content=body(page, instance="h:1"), headers=JSON)
    assert over.status_code == 413
    assert over.json()["error"] == "bad scrape: 50,001 lines in one page, over 50,000 (Prometheus's sample_limit): " + (
        "scrape less"
    )
    assert 'raysight_ingest_rejected_total{reason="too_many_items"} 1.0' in server.get("/metrics").text
    # counted before the JSON is read: a body cut short (not JSON) is still refused for its lines
    with pytest.raises(TooMany):
        prom_text.parse(body(page, instance="h:1")[:-2])  # (its closing "})
    page = "# HELP x An x.\n" * (prom_text.MAX_LINES - 1) + "x 1\n"
    assert scrape(server, 0, page).json() == {"ok": True, "samples": 1}


def test_escaped_newlines_in_label_values_are_not_lines() -> None:
    """On the wire a label value's ``\\n`` (Prometheus's escape of a newline: a backslash and an n) is ``\\\\n``, whose
    last two bytes read as JSON's newline: they are not counted as lines."""
    page = 'x{a="1\\n2\\n3"} 1\n' * 20_000
    assert len(prom_text.parse(body(page, instance="h:1")).page.heads) == 20_000


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("x 1 9223372036854775808\n", "line 1 ('x 1 9223372036854775808'): a time past what the store keeps"),
        ("x 1\ny 1 -9223372036854775809\n", "line 2 ('y 1 -9223372036854775809'): a time past what the store keeps"),
        (labelled(65), "over 64 labels (Prometheus's label_limit)"),
        ('x{a="' + "v" * 4097 + '"} 1\n', "the value of a over 4096 characters"),
        ("x{" + "a" * 1025 + '="v"} 1\n', "a label's name over 1024 characters"),
        ("x" * 1025 + " 1\n", "a name over 1024 characters"),
        ("x" * 1025 + '{a="v"} 1\n', "a name over 1024 characters"),
        ('x{a="' + "v" * 400_000 + "} 1\n", "over 329,088 characters, more than any line within the bounds"),
        ('x 1\ny{a="b\x00c"} 1\n', "line 2: a character the store cannot keep ('\\x00')"),
        ('x{a="b\x01c"} 1\n', "line 1: a character the store cannot keep ('\\x01')"),
        ("# HELP x \x01\nx 1\n", "line 1: a character the store cannot keep ('\\x01')"),
    ],
)
def test_a_line_the_store_cannot_keep_is_refused_naming_it(text: str, says: str) -> None:
    with pytest.raises(BadIngest) as refused:
        prom_text.parse(body(text, instance="h:1"))
    assert says in str(refused.value)


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ({"instance": "h:1\x00"}, "target.instance holds a character the store cannot keep"),
        ({"instance": "h:1", "job": "r\x01"}, "target.job holds a character the store cannot keep"),
        ({"instance": "h:1", "labels": {"a": "b\x00"}}, "the value of a holds a character the store cannot keep"),
        ({"instance": "h:1", "labels": {"a": "v" * 4097}}, "the value of a must be a string of at most 4096"),
        ({"instance": "h:1", "labels": {"a" * 1025: "v"}}, "a name is over 1024 characters"),
    ],
)
def test_a_target_the_store_cannot_keep_is_refused(target: dict[str, Any], says: str) -> None:
    with pytest.raises(BadIngest) as refused:
        prom_text.parse(body("x 1\n", **target))
    assert says in str(refused.value)


def test_lines_at_the_bounds_and_rays_own_pages_are_taken(server: TestClient) -> None:
    """Ray's lines name at most a dozen labels (11 in its aggregator's page), of values under 200 characters."""
    edge = labelled(64) + 'x{a="' + "v" * 4096 + '"} 2\n' + "y" * 1024 + f" 3 {2**63 - 1}\nz 4 {-(2**63)}\n"
    assert len(prom_text.parse(body(edge, instance="h:1")).page.heads) == 4
    ray_page = (FIXTURES / "aggregator_metrics.txt").read_text()
    assert scrape(server, 0, ray_page).json()["samples"] == len(prom_text.lines(ray_page, T0).heads) > 0


def test_a_time_past_int64_is_refused_and_the_targets_next_scrape_records(server: TestClient) -> None:
    """The probe's sample stamped past int64 got 503 on every resend (the store's OverflowError): 400 now, naming
    the line, and the same target's next scrape is kept."""
    refused = scrape(server, 0, "x 1\ny 2 99999999999999999999\n")
    assert refused.status_code == 400
    assert refused.json()["error"].startswith("bad scrape: line 2 ('y 2 99999999999999999999'): a time past what")
    assert scrape(server, 0, "x 1\ny 2\n").json() == {"ok": True, "samples": 2}
    assert values(server.get("/api/v1/query", params={"query": "y", "time": at(0)}).json()["data"]["result"]) == [2.0]


def known_lines(store: Any) -> tuple[int, int]:
    """The lines the store remembers of its targets, counted and as it accounts them."""
    known = targets(store)
    return sum(len(target.series) for target in known.known.values()), known.lines


def test_refused_series_are_remembered_only_while_their_target_exposes_them(tmp_path: Path) -> None:
    """The probe's ten scrapes of 200,000 new series each past --metrics-max-series 1000 grew the server by 470 MB,
    never released: here ten of 2,000 past a limit of 100. The store remembers only the last scrape's lines, and
    counts each refused series once while it stays exposed."""
    lines = 2_000
    with TestClient(
        create_app(Settings(tmp_path / "data").replace(fold_linger_s=0, fold_rest=0, metrics_max_series=100))
    ) as c:
        for i in range(10):
            page = "".join(f'x{{n="{i}-{j}"}} 1\n' for j in range(lines))
            assert scrape(c, i, page).json()["samples"] == (100 if i == 0 else 0)
            assert store_call(c, known_lines) == (lines, lines)
        assert scrape(c, 10, page).json()["samples"] == 0  # the last page again: nothing counted twice
        (refused,) = c.get("/api/raysight/doctor").json()["metrics_refused"]
        assert (refused["series_held"], refused["series_refused"]) == (100, 10 * lines - 100)
        assert refused["samples_dropped"] == 11 * lines - 100


def test_the_lines_remembered_are_bounded_across_targets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past MAX_KNOWN_LINES (here 5, not 500,000) the least recently scraped target is forgotten; its next scrape
    finds its series again by their labels."""
    monkeypatch.setattr("raysight.signals.scrapes.apply.MAX_KNOWN_LINES", 5)
    page = "a 1\nb 2\nc 3\n"
    with TestClient(create_app(Settings(tmp_path / "data").replace(fold_linger_s=0, fold_rest=0))) as c:
        for i, instance in enumerate(("h:1", "h:2", "h:1")):
            assert scrape(c, i, page, instance=instance).json()["samples"] == 3
            assert store_call(c, known_lines) == (3, 3)
        assert store_call(c, lambda s: [key[1] for key in targets(s).known]) == ["h:1"]
        assert values(
            c.get("/api/v1/query", params={"query": "count_over_time(a[1m])", "time": at(2)}).json()["data"]["result"]
        ) == [2.0, 1.0]
        assert len(c.get("/api/v1/series", params={"match[]": "a"}).json()["data"]) == 2
