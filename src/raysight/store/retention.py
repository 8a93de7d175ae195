"""Opt-in bounds on what the store keeps, by age and by size (`raysight server --log-retention 30d --log-max-size
50GB`, ``--metrics-retention``, ``--metrics-max-size``): the duration and size notations, and a retention as given.
What each bound drops is the business of ``store/log_retention.py`` and ``store/metric_retention.py``."""

from __future__ import annotations

import re
from dataclasses import dataclass

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)", re.IGNORECASE)
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """Seconds in ``30d``, ``12h``, ``90m``, ``45s``; ValueError otherwise."""
    match = _DURATION.fullmatch(text.strip())
    if not match or float(match[1]) <= 0:
        raise ValueError(f"{text!r} is not a duration such as 30d, 12h, 90m or 45s")
    return float(match[1]) * _SECONDS[match[2]]


def parse_size(text: str) -> int:
    """Bytes in ``50GB``, ``1.5GiB``, ``500MB``; ValueError otherwise."""
    match = _SIZE.fullmatch(text.strip())
    if not match or float(match[1]) <= 0:
        raise ValueError(f"{text!r} is not a size such as 500MB or 50GB")
    unit = match[2].upper()
    power = "BKMGT".index(unit[0])
    return int(float(match[1]) * (1024 if "I" in unit else 1000) ** power)


@dataclass(frozen=True)
class Retention:
    """How long, and how much of, something to keep (None: no bound), as given."""

    max_age: str | None = None  # 30d
    max_size: str | None = None  # 50GB

    def __bool__(self) -> bool:
        return bool(self.max_age or self.max_size)

    @property
    def age_s(self) -> float | None:
        return parse_duration(self.max_age) if self.max_age else None

    @property
    def size_bytes(self) -> int | None:
        return parse_size(self.max_size) if self.max_size else None

    def why(self, what: str) -> str:
        """The marker's words for what ``what`` retention (``log``, ``metrics``) dropped."""
        bounds = [f"older than {self.max_age}"] if self.max_age else []
        bounds += [f"past {self.max_size}"] if self.max_size else []
        return f"dropped by the server's {what} retention ({' or '.join(bounds)})"


KEEP_ALL = Retention()  # the default
