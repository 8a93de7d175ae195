"""What raysight says it is (its version, the User-Agent of its own requests), and what is no setting but every part
agrees on. The settings and their environment variables are :mod:`raysight.settings`'s."""

from __future__ import annotations

import ipaddress

VERSION = "0.1.0"
# What raysight's own HTTP requests say they are, on every client it makes: a Ray dashboard logs it on the line of each
# request it serves, which `raysight logs` leaves out unless asked (``signals/log_lines/parse.py``'s ``own``)
USER_AGENT = f"raysight/{VERSION}"
OWN_HEADERS = {"user-agent": USER_AGENT}

INGEST_DEADLINE_S = 2.5


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
