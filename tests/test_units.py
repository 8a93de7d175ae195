"""Durations, sizes and times: one dialect for every option and query parameter (``raysight/units.py``)."""

from __future__ import annotations

import pytest

from raysight.units import MS, NS, S, duration_ns, duration_s, size_bytes, time_ns

NOW = 2_000_000_000 * S


def test_durations_from_nanoseconds_to_days() -> None:
    texts = ("250ns", "3us", "500ms", "1.5s", "2m", "1.5h", "30d", " 12 h ")
    nanoseconds = [250, 3000, 5 * 10**8, 15 * 10**8, 120 * S, 5400 * S, 30 * 86400 * S, 43200 * S]
    assert [duration_ns(t) for t in texts] == nanoseconds
    assert duration_s("500ms") == 0.5 and duration_s("1d") == 86400.0


def test_a_bare_duration_counts_what_its_reader_says_and_is_refused_elsewhere() -> None:
    assert duration_s("30", bare=S) == 30.0 and duration_ns("1500", bare=NS) == 1500
    with pytest.raises(ValueError, match=r"'30' is not a duration such as 30d, 12h, 90m, 1.5s or 500ms$"):
        duration_ns("30")
    with pytest.raises(ValueError, match=r"or s as a bare number$"):
        duration_ns("soon", bare=S)
    for bad in ("d", "-1d", "1w", "1.d", "5 minutes", ""):
        with pytest.raises(ValueError, match="is not a duration"):
            duration_ns(bad)


def test_sizes_in_powers_of_1000_and_1024_in_any_case() -> None:
    texts = ("500MB", "50GB", "1.5GiB", "10B", "1kB", "2tib")
    assert [size_bytes(t) for t in texts] == [500 * 10**6, 50 * 10**9, 3 * 2**29, 10, 1000, 2 * 2**40]
    assert size_bytes("100000", bare=True) == 100_000
    for bad in ("50", "GB", "1PB", "lots", "-1MB"):
        with pytest.raises(ValueError, match="is not a size such as 500MB"):
            size_bytes(bad)
    with pytest.raises(ValueError, match="or bytes$"):
        size_bytes("1.5", bare=True)


def test_times_ago_ahead_iso_8601_and_epoch() -> None:
    assert time_ns("-5m", NOW) == time_ns("5m", NOW) == NOW - 300 * S
    assert time_ns("+1.5h", NOW) == NOW + 5400 * S and time_ns("-500ms", NOW) == NOW - 500 * MS
    at = 1795392000 * S
    assert time_ns("2026-11-23T00:00:00", NOW) == time_ns("2026-11-23T01:00:00+01:00", NOW) == at
    assert time_ns("2026-11-23T00:00:00Z", NOW) == time_ns("2026-11-23", NOW) == at
    assert time_ns("1795392000000", NOW) == at  # epoch ms
    assert time_ns("1795392000000000000", NOW, epoch=NS) == at and time_ns("1795392000.5", NOW, epoch=S) == at + S // 2


def test_a_time_that_is_none_says_what_a_time_is() -> None:
    for bad in ("yesterday", "-5", "5 minutes ago", "2026-13-01", "-"):
        with pytest.raises(ValueError, match=r"is neither a time ago \(30s, 10m, 2h, 1d\) nor an ISO 8601 time"):
            time_ns(bad, NOW)
    with pytest.raises(ValueError, match="nor epoch ns$"):
        time_ns("soon", NOW, epoch=NS)
