"""Where Ray keeps its sessions, and what of a session's metrics is on disk or on a page: its nodes' metrics ports, its
aggregators' lines of a metrics page."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path

from raysight.agent import node_watch
from raysight.signals.ray_metrics.parse import PREFIX


def ray_temp_dir(env: Mapping[str, str]) -> Path:
    """Where Ray 2.60 keeps its sessions for a process with this environment (unless it passes ``_temp_dir``)."""
    base = env.get("RAY_TMPDIR") or (env.get("TMPDIR") if sys.platform.startswith("linux") else None)
    return Path(base or "/tmp") / "ray"


def metrics_ports(session: Path) -> dict[str, int]:
    """Node ID → the metrics export port of every node that shares the session directory
    (``metrics_export_port_<node>``)."""
    ports = {}
    for what, node, path in node_watch.port_files(session):
        if what == "metrics_export":
            with suppress(OSError):
                text = path.read_text().strip()
                if text.isdigit():
                    ports[node] = int(text)
    return ports


def aggregator_lines(text: str) -> str:
    """The aggregator's lines of a node's metrics page (a few dozen of about two thousand)."""
    return "".join(line + "\n" for line in text.splitlines() if PREFIX in line)
