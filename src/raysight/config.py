"""Settings shared by the server, the CLI and `raysight run`: defaults, and the environment variables that override
them."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

VERSION = "0.1.0"
# What raysight's own HTTP requests say they are, on every client it makes: a Ray dashboard logs it on the line of each
# request it serves, which `raysight logs` leaves out unless asked (``ingest/agent_logs.py``'s ``own``)
USER_AGENT = f"raysight/{VERSION}"
OWN_HEADERS = {"user-agent": USER_AGENT}

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8271
DEFAULT_MAX_BODY = 16 * 1024 * 1024
# Ray's aggregator sends at most RAY_DASHBOARD_AGGREGATOR_AGENT_MAX_EVENT_SEND_BATCH_SIZE (1,000) events per POST, and
# never more than its buffer holds (RAY_DASHBOARD_AGGREGATOR_AGENT_MAX_EVENT_BUFFER_SIZE, 100,000); folding takes
# ~800 bytes of memory an event, so a body of [0,0,…] must not carry millions.
DEFAULT_MAX_EVENTS = 100_000
DEFAULT_MEMORY_LIMIT = "1GB"  # DuckDB's (folding a full group of 48 MB takes ~500 MB); a larger group is split
INGEST_DEADLINE_S = 2.5

ENV_DATA = "RAYSIGHT_DATA"
ENV_SERVER = "RAYSIGHT_SERVER"
ENV_TOKEN = "RAYSIGHT_TOKEN"
ENV_INGEST_KEY = "RAYSIGHT_INGEST_KEY"
ENV_ADMIN_TOKEN = "RAYSIGHT_ADMIN_TOKEN"


@dataclass(frozen=True)
class Limits:
    """How long the server waits for a request's headers, then for its body, and how many connections it holds.
    Ray's aggregator gives up on a POST after 3 s, so these leave it room."""

    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_connections: int = 1000


def default_data_dir() -> Path:
    """``$RAYSIGHT_DATA``, else ``$XDG_DATA_HOME/raysight``, else ``~/.local/share/raysight``."""
    if os.environ.get(ENV_DATA):
        return Path(os.environ[ENV_DATA]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "raysight"


def default_server() -> str:
    return os.environ.get(ENV_SERVER) or f"http://{DEFAULT_HOST}:{DEFAULT_PORT}"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# What one query may spend, as Prometheus's --query.max-samples and --query.timeout (50M, 2 min) but sized for this
# server's memory: a sample loaded costs up to ~70 bytes while it is sorted, a point 8 bytes and ~30 of JSON, each
# point is rendered in Python (~1 us). At 5M, 2,000 series' 2.3M samples and 2.7M points answered peaked the server
# at 0.4-0.5 GB in 2-3.5 s.
DEFAULT_MAX_SAMPLES = 5_000_000
DEFAULT_TIMEOUT_S = 30.0  # (Grafana's data source proxy gives up on a request after 30 s)
# Queries evaluated at once (the others wait, within their time): each may hold up to its samples budget (~0.5 GB at
# the default), and threads under the GIL gain little from more; Grafana's ten panels queue behind two
DEFAULT_MAX_CONCURRENCY = 2


@dataclass(frozen=True)
class QueryLimits:
    """What one query may spend (server options): samples held, counted as Prometheus counts them (each loaded from
    the store, and each point an expression's answer holds at a step; here summed over the query's expressions, and
    each series found as ``store/promql.py``'s ``SERIES_COST``), and seconds; and how many queries are evaluated at
    once."""

    max_samples: int = DEFAULT_MAX_SAMPLES
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY
