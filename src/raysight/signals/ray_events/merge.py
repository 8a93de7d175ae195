"""One batch's patches (what the Python folds of ``parse.py`` made of its events) merged into one row per entity
key, with the schema's merge rules. Pure.

The SQL-folded task tables get the same rules from :meth:`raysight.tables.Column.aggregate_sql`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from raysight.signals.ray_events.parse import Key, Patch
from raysight.store import schema

_RULES = {name: {c.name: c.rule for c in t.columns} for name, t in schema.FOLDED_TABLES.items()}


def merge_patches(patches: Iterable[tuple[str, Key, Patch]]) -> dict[str, list[dict[str, Any]]]:
    """Merge ``patches`` (in arrival order) per table and key: table -> rows, key columns named beside the rest."""
    rows: dict[str, dict[Key, Patch]] = {}
    for table, key, patch in patches:
        merged = rows.setdefault(table, {})
        old = merged.get(key)
        if old is None:
            merged[key] = dict(patch)
        else:
            merge_into(old, patch, _RULES[table])
    keys = {name: [c.name for c in schema.FOLDED_TABLES[name].keys] for name in rows}
    return {
        name: [{**dict(zip(keys[name], key)), **patch} for key, patch in merged.items()]
        for name, merged in rows.items()
    }


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
