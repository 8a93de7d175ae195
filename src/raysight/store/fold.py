"""One batch's patches combined into one row per entity key, with the schema's merge rules. Pure: no I/O."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from raysight.ingest.ray_events import Key, Parsed, Patch
from raysight.store import schema

_RULES = {name: {c.name: c.rule for c in t.columns} for name, t in schema.FOLDED_TABLES.items()}
_KEYS = {name: [c.name for c in t.keys] for name, t in schema.FOLDED_TABLES.items()}
_KEYS.update({name: [c.name for c in schema.TASK_KEY] for name in schema.APPEND_TABLES})


@dataclass
class Folded:
    rows: dict[str, dict[Key, Patch]] = field(default_factory=dict)  # table -> key -> merged patch
    appends: dict[str, list[Patch]] = field(default_factory=dict)  # append table -> rows
    session_stats: dict[str, Patch] = field(default_factory=dict)  # session -> events and raw_bytes folded

    def staged(self, table: str) -> list[dict[str, Any]]:
        """Rows ready for staging: key columns named, merged columns beside them."""
        names = _KEYS[table]
        return [{**dict(zip(names, key)), **patch} for key, patch in self.rows.get(table, {}).items()]


def fold(events: Iterable[Parsed]) -> Folded:
    """Merge the patches of ``events`` (in arrival order) per table and key; collect append-table rows."""
    out = Folded()
    for parsed in events:
        stats = out.session_stats.setdefault(parsed.raw.session, {"events": 0, "raw_bytes": 0})
        stats["events"] += 1
        stats["raw_bytes"] += len(parsed.raw.body)
        for table, key, patch in parsed.patches:
            if table in schema.APPEND_TABLES:
                out.appends.setdefault(table, []).append({**dict(zip(_KEYS[table], key)), **patch})
                continue
            rows = out.rows.setdefault(table, {})
            old = rows.get(key)
            if old is None:
                rows[key] = dict(patch)
            else:
                merge_into(old, patch, _RULES[table])
    return out


def merge_into(old: Patch, new: Patch, rules: dict[str, str]) -> None:
    """Merge ``new`` into ``old`` in place, column by column, as the store's ON CONFLICT clause does."""
    for name, value in new.items():
        if value is None:
            continue
        current = old.get(name)
        rule = rules[name]
        if current is None or rule == "latest":
            old[name] = value
        elif rule == "least":
            old[name] = min(current, value)
        elif rule == "greatest":
            old[name] = max(current, value)
        elif rule in ("sum", "union"):  # numbers add up; history lists concatenate (the store sorts them)
            old[name] = current + value
