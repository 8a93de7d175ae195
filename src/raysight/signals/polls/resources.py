"""Ray's resources as its dashboard's cluster status gives them (``loadMetricsReport``), in the words `ray status`
uses: pure."""

from __future__ import annotations

from typing import Any

# The dashboard gives resource names in camelCase; Ray's own output names them so
_NAMES = {"objectStoreMemory": "object_store_memory", "node:InternalHead": "node:__internal_head__"}


def usage(pairs: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    """``{"CPU": [used, total], …}`` as ``{"CPU": {"used", "total"}, …}``, by Ray's names."""
    return {_NAMES.get(k, k): {"used": used, "total": total} for k, (used, total) in sorted(pairs.items())}


def demands(pairs: list[Any]) -> list[dict[str, Any]]:
    """``[[shape, count], …]`` (what waited, by the resources it asked for) as ``[{"shape", "count"}, …]``."""
    return [{"shape": shape, "count": n} for shape, n in pairs]
