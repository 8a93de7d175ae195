"""Scraping this host's part of the Ray sessions running on it, as Prometheus would, each page sent to the server as
it is (``POST /ingest/agent/metrics``), every 5 s (Ray's own cadence); the node agent does it
(``agent/node_agent.py``), so `raysight run` and `raysight agent` alike.

A host's targets: the metrics export port of each of its raylets (``metrics_export_port_<node id>`` in the session
directory; the target labelled with that ``NodeId``, which Ray's node metrics lack), and the other targets of Ray's
service-discovery file that are on this host (the head's autoscaler and dashboard). Each agent scrapes only what is
on its own host, so a cluster with an agent on every node is scraped once; of several agents on one host, the one
holding the session's scrape lock does it. Beside them, raysight's own page of the session's processes
(``agent/process_stats.py``). Families can be kept or dropped at the source (:class:`Families`), before they are sent.
Of each node's page, the lines of Ray's aggregator (what its event export received, sent and dropped) also go to
``POST /ingest/agent/ray-metrics``, for the doctor: the page is not asked for twice (Ray's dashboard agent renders
every Serve series each time).
"""

from __future__ import annotations

import fcntl
import logging
import re
import socket
import time
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx
import orjson
import psutil

from raysight import wire
from raysight.agent import node_watch
from raysight.agent.process_stats import JOB as PROCESS_JOB
from raysight.agent.process_stats import ProcessStats
from raysight.agent.scrape import aggregator_lines, metrics_ports
from raysight.config import OWN_HEADERS

log = logging.getLogger("raysight.agent")

SCRAPE_EVERY_S = 5.0
TIMEOUT_S = 3.0
MAX_AT_ONCE = 8  # targets scraped at once
SD_FILE = "prom_metrics_service_discovery.json"
LOCK_FILE = "raysight_scrape.lock"


@dataclass(frozen=True)
class Target:
    instance: str
    job: str
    labels: Mapping[str, str]


@dataclass(frozen=True)
class Families:
    """Which metric families are sent: a sample whose name ``keep`` matches (all, if None) and ``drop`` does not
    (Prometheus's ``metric_relabel_configs`` on ``__name__``: regular expressions matched against the whole name)."""

    keep: re.Pattern[str] | None = None
    drop: re.Pattern[str] | None = None

    def wants(self, name: str) -> bool:
        return (self.keep is None or bool(self.keep.fullmatch(name))) and not (
            self.drop is not None and self.drop.fullmatch(name)
        )

    def page(self, text: str) -> str:
        """The lines of ``text`` about the families wanted (samples, and their ``# HELP`` and ``# TYPE``)."""
        if self.keep is None and self.drop is None:
            return text
        return "".join(line for line in text.splitlines(keepends=True) if self.wants(_name_of(line)))


def _name_of(line: str) -> str:
    """The metric a line of Prometheus text is about: a sample's name, or the name a comment describes."""
    if line.startswith("#"):
        parts = line.split(None, 3)
        return parts[2] if len(parts) > 2 and parts[1] in ("HELP", "TYPE") else ""
    end = len(line)
    for stop in "{ \t\n":
        if (at := line.find(stop)) != -1:
            end = min(end, at)
    return line[:end]


def sd_targets(session: Path) -> list[Target]:
    """Each target of the session's service-discovery file (Prometheus's ``file_sd`` format: a list of
    ``{"labels": {"job": …}, "targets": ["host:port", …]}``); none while Ray has not written it (only the head's
    session directory has one)."""
    try:
        groups = orjson.loads((session / SD_FILE).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return []
    found: dict[tuple[str, str], Target] = {}
    for group in groups if isinstance(groups, list) else []:
        if not isinstance(group, dict) or not isinstance(group.get("targets"), list):
            continue
        labels = group.get("labels")
        job = str(labels.get("job") or "ray") if isinstance(labels, dict) else "ray"
        for instance in group["targets"]:
            if isinstance(instance, str):
                found.setdefault((instance, job), Target(instance, job, {}))
    return list(found.values())


def host_targets(session: Path, raylets: Mapping[str, str], addresses: set[str]) -> list[Target]:
    """The session's targets on this host: each raylet's node (``raylets``: node ID → its IP), labelled with its
    ``NodeId``, and the service-discovery file's targets at one of this host's ``addresses``."""
    nodes = {
        f"{ip}:{port}": Target(f"{ip}:{port}", "ray", {"NodeId": node})
        for node, port in metrics_ports(session).items()
        if (ip := raylets.get(node))
    }
    local = [t for t in sd_targets(session) if t.instance.rsplit(":", 1)[0].strip("[]") in addresses]
    return [*nodes.values(), *(t for t in local if t.instance not in nodes)]


def host_addresses() -> set[str]:
    """This host's IP addresses (any interface's), and its name."""
    addresses = {"localhost", socket.gethostname()}
    with suppress(OSError):
        for entries in psutil.net_if_addrs().values():
            addresses.update(entry.address.split("%", 1)[0] for entry in entries if entry.family in _IP_FAMILIES)
    return addresses


_IP_FAMILIES = (socket.AF_INET, socket.AF_INET6)


def raylet_ips(session: str, running: Mapping[node_watch.Key, int]) -> dict[str, str]:
    """Node ID → IP of each of the session's raylets running here, from its command line (``--node_ip_address``)."""
    ips = {}
    for (name, process, node_id), pid in running.items():
        if name == session and process == node_watch.RAYLET:
            with suppress(psutil.Error):
                for arg in psutil.Process(pid).cmdline():
                    if arg.startswith("--node_ip_address="):
                        ips[node_id] = arg.split("=", 1)[1]
    return ips


class HostScraper:
    """Scrapes the sessions running on this host, each through ``send`` (a scrape's JSON body, as
    ``signals/scrapes/parse.py`` takes it); closed with its agent."""

    def __init__(
        self,
        send: Callable[[wire.MetricsScrape], None],
        families: Families | None = None,
        report: Callable[[str], None] | None = None,
    ) -> None:
        """``report``: takes the aggregator's lines of each node's page."""
        self._send, self.families, self._report = send, families or Families(), report
        self._http = httpx.Client(timeout=TIMEOUT_S, trust_env=False, headers=OWN_HEADERS)
        self._pool = ThreadPoolExecutor(MAX_AT_ONCE, thread_name_prefix="raysight-scrape")
        self._stats = ProcessStats()
        self._addresses = host_addresses()
        self._locks: dict[Path, IO[Any] | None] = {}  # a session's scrape lock, held; None: another scraper's
        self.host = socket.gethostname()

    def scrape(self, ray_dir: Path, followed: Collection[str]) -> int:
        """Scrape each ``followed`` session that has a raylet or a GCS running on this host; the pages sent."""
        running = node_watch.running()
        sessions = sorted({key[0] for key in running} & set(followed))
        for gone in set(self._locks) - {ray_dir / s for s in sessions}:
            if (lock := self._locks.pop(gone)) is not None:
                lock.close()
        return sum(self.scrape_session(ray_dir / session, running) for session in sessions)

    def scrape_session(self, session: Path, running: Mapping[node_watch.Key, int]) -> int:
        """Scrape the session's targets on this host and its processes, unless another scraper here has it."""
        if not self._hold(session):
            return 0
        targets = host_targets(session, raylet_ips(session.name, running), self._addresses)
        scrapes = [self._pool.submit(self._scrape_target, session, target) for target in targets]
        scraped_ms = time.time_ns() // 1_000_000
        processes = self._stats.page(session, running)
        sent = self._page(session, scraped_ms, Target(self.host, PROCESS_JOB, {}), processes)
        return sent + sum(scrape.result() for scrape in scrapes)

    def _scrape_target(self, session: Path, target: Target) -> int:
        """Scrape one target and send its page (each target at once, as Prometheus does: a slow one holds up no
        other); the pages sent."""
        scraped_ms = time.time_ns() // 1_000_000
        try:
            page = self._http.get(f"http://{target.instance}{wire.METRICS}").raise_for_status().text
        except httpx.HTTPError:  # a node going or gone: the others stand
            return 0
        if self._report is not None and "NodeId" in target.labels and (lines := aggregator_lines(page)):  # a node's
            try:
                self._report(lines)
            except httpx.HTTPError as exc:  # the next scrape's counts follow
                log.warning("could not send the aggregator counts of %s to the server (%s)", target.instance, exc)
        return self._page(session, scraped_ms, target, page)

    def _page(self, session: Path, scraped_ms: int, target: Target, page: str) -> int:
        body: wire.MetricsScrape = {
            "session": session.name,
            "scraped_ms": scraped_ms,
            "target": {"instance": target.instance, "job": target.job, "labels": dict(target.labels)},
            "text": self.families.page(page),
        }
        try:
            self._send(body)
        except httpx.HTTPError as exc:  # the server away or busy: a scrape is a moment's view, the next one follows
            log.warning("could not send a scrape of %s to the server (%s)", target.instance, exc)
            return 0
        return 1

    def _hold(self, session: Path) -> bool:
        """Whether this scraper holds the session's scrape lock (taking it if it is free): one scraper a host. A
        session directory this agent may not write in has no lock to share: it scrapes."""
        if self._locks.get(session) is None:
            self._locks[session] = None
            try:
                lock = (session / LOCK_FILE).open("a")
            except OSError:
                return True
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._locks[session] = lock
            except BlockingIOError:
                lock.close()
        return self._locks[session] is not None

    def close(self) -> None:
        for lock in self._locks.values():
            if lock is not None:
                lock.close()
        self._locks.clear()
        self._pool.shutdown()
        self._http.close()
        self._stats.close()
