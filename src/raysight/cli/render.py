"""Output in Ray's shapes: a table of upper-case columns, or JSON, or YAML."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any

import click
import orjson
import yaml
from rich.console import Console
from rich.table import Table

FORMATS = ("table", "json", "yaml")
_console = Console(soft_wrap=True)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def dump(data: Any, fmt: str) -> None:
    """JSON or YAML of any value; for ``table``, the caller draws its own."""
    if fmt == "json":
        click.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())
    else:
        click.echo(yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=120).rstrip())


def cell(name: str, value: Any) -> str:
    if value is None:
        return ""
    if name.endswith("_ms") and isinstance(value, (int, float)) and not name.startswith("duration") and value > 1e11:
        return datetime.fromtimestamp(value / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    if isinstance(value, float):
        return f"{value:.1f}"
    if isinstance(value, (dict, list)):
        return yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    if isinstance(value, str) and "\n" in value:  # a traceback: its last line says what happened
        lines = [line for line in _ANSI.sub("", value).splitlines() if line.strip()]
        return lines[-1].strip() if lines else ""
    return str(value)


def table(rows: list[dict[str, Any]], title: str | None = None, columns: list[str] | None = None) -> None:
    columns = columns or (list(rows[0]) if rows else [])
    out = Table(title=title, box=None, header_style="bold", pad_edge=False)
    for name in columns:
        out.add_column(name.upper(), overflow="fold")
    for row in rows:
        out.add_row(*(cell(name, row.get(name)) for name in columns))
    _console.print(out)


def heading(text: str) -> None:
    _console.print(f"[bold]{text}[/bold]")
