"""Output in Ray's shapes: a table of upper-case columns (one line per row, as `ray list` prints), JSON or YAML.

Rows are never wrapped: an ID split over lines cannot be copied or grepped. In a pipe every row is printed whole; on a
terminal narrower than the table, text columns (names, messages) are cut short with "…", never IDs, numbers or times.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

import click
import orjson
import yaml

from raysight.ansi import plain

FORMATS = ("table", "json", "yaml")
GAP = "  "
MIN_TEXT_WIDTH = 8  # a text column cut short (its header too) keeps at least this many characters
_WHOLE = ("session", "ip", "node_ip", "ray_namespace")  # besides *_id and *_ms


def dump(data: Any, fmt: str) -> None:
    """JSON or YAML of any value; for ``table``, the caller draws its own."""
    if fmt == "json":
        click.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())
    else:
        click.echo(yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=120).rstrip())


def cell(name: str, value: Any) -> str:
    """One value as one line of text: times in UTC, nested values as flow YAML, a traceback as its last line."""
    if value is None:
        return ""
    if name.endswith("_ms") and isinstance(value, (int, float)) and not name.startswith("duration") and value > 1e11:
        return datetime.fromtimestamp(value / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    if isinstance(value, float):
        return f"{value:.1f}"
    if isinstance(value, (dict, list)):
        return yaml.safe_dump(value, default_flow_style=True, width=1_000_000).strip().replace("\n", " ")
    if isinstance(value, str) and "\n" in value:  # a traceback: its last line says what happened
        lines = [line for line in plain(value).splitlines() if line.strip()]
        return lines[-1].strip() if lines else ""
    return str(value)


def is_whole(name: str, values: Sequence[Any]) -> bool:
    """IDs, numbers and times are always shown whole; only text may be cut short."""
    if name.endswith(("_id", "_ms")) or name in _WHOLE:
        return True
    return all(v is None or isinstance(v, (bool, int, float)) for v in values)


def fit(widths: Sequence[int], floors: Sequence[int | None], budget: int) -> list[int]:
    """Column widths within ``budget``: the cuttable columns (a floor, not None) capped at the largest width that
    fits, none below its floor; the rest kept whole. When even the floors do not fit, the floors."""

    def capped(cap: int) -> list[int]:
        return [w if f is None else min(w, max(f, cap)) for w, f in zip(widths, floors)]

    low, high = 0, max(widths, default=0)
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if sum(capped(mid)) <= budget else (low, mid - 1)
    return capped(low)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def layout(header: Sequence[str], body: Sequence[Sequence[str]], whole: Sequence[bool], width: int | None) -> list[str]:
    """The lines of a table, one per row; within ``width`` characters when it is given and the whole columns fit."""
    widths = [max(len(c) for c in column) for column in zip(header, *body)]
    if width is not None:
        floors = [None if w else min(n, MIN_TEXT_WIDTH) for n, w in zip(widths, whole)]
        widths = fit(widths, floors, width - len(GAP) * (len(widths) - 1))
    return [GAP.join(_clip(c, n).ljust(n) for c, n in zip(row, widths)).rstrip() for row in (header, *body)]


def terminal_width() -> int | None:
    """The terminal's width when output goes to one; None in a pipe or a file, where rows are printed whole."""
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


def table(rows: list[dict[str, Any]], title: str | None = None, columns: list[str] | None = None) -> None:
    columns = columns or (list(rows[0]) if rows else [])
    if title:
        heading(title)
    header = [name.upper() for name in columns]
    body = [[cell(name, row.get(name)) for name in columns] for row in rows]
    whole = [is_whole(name, [row.get(name) for row in rows]) for name in columns]
    for line in layout(header, body, whole, terminal_width()):
        click.echo(line)


def summary_rows(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A summary's groups as table rows, each group's state counts in one cell ("FAILED: 1, FINISHED: 9")."""
    return [{**g, "state_counts": ", ".join(f"{s}: {n}" for s, n in g["state_counts"].items())} for g in groups]


def heading(text: str) -> None:
    click.secho(text, bold=True)
