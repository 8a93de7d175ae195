"""Scraping a Ray session's Prometheus targets, as Prometheus would, and sending each page to the server
(``POST /ingest/agent/metrics``). The targets are those Ray writes for Prometheus in the session's service-discovery
file (every node's metrics export port, the autoscaler's and the dashboard's), scraped every 5 s, Ray's own cadence.
"""

from __future__ import annotations

import time
from contextlib import suppress
from pathlib import Path

import httpx
import orjson

from raysight.agent.scrape import SessionWatcher
from raysight.errors import RaysightError

SCRAPE_EVERY_S = 5.0
TIMEOUT_S = 3.0
SD_FILE = "prom_metrics_service_discovery.json"


def targets(session: Path) -> list[tuple[str, str]]:
    """Each ``(instance, job)`` the session's service-discovery file lists (Prometheus's ``file_sd`` format: a list
    of ``{"labels": {"job": …}, "targets": ["host:port", …]}``); none while Ray has not written it."""
    try:
        groups = orjson.loads((session / SD_FILE).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return []
    found: list[tuple[str, str]] = []
    for group in groups if isinstance(groups, list) else []:
        if not isinstance(group, dict) or not isinstance(group.get("targets"), list):
            continue
        labels = group.get("labels")
        job = str(labels.get("job") or "ray") if isinstance(labels, dict) else "ray"
        found += [(t, job) for t in group["targets"] if isinstance(t, str) and (t, job) not in found]
    return found


class MetricsScraper(SessionWatcher):
    """Scrapes every target of the session `raysight run`'s driver joined, each page sent as it is."""

    every_s = SCRAPE_EVERY_S
    name = "raysight-metrics"

    def __init__(self, server: str, key: str | None, driver_pid: int, ray_dir: Path) -> None:
        super().__init__(server, key, driver_pid, ray_dir)
        self._http = httpx.Client(timeout=TIMEOUT_S, trust_env=False)

    def tick(self, session: Path) -> None:
        for instance, job in targets(session):
            with suppress(httpx.HTTPError, RaysightError):  # a node going or gone, a server busy: the others stand
                scraped_ms = time.time_ns() // 1_000_000
                page = self._http.get(f"http://{instance}/metrics").raise_for_status().text
                scrape = {
                    "session": session.name,
                    "scraped_ms": scraped_ms,
                    "target": {"instance": instance, "job": job},
                }
                self._client.metrics_scrape({**scrape, "text": page}, self.key)

    def stop(self, timeout: float = 5) -> None:
        super().stop(timeout)
        self._http.close()
