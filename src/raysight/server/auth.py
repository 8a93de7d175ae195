"""Secrets for a server bound beyond loopback: a read token for queries, a write-only key for ingest, and an admin
token for destructive operations (deleting sessions, reindexing).

Ray's aggregator sends no headers and logs its export URL in clear, so the ingest key travels in the URL and
grants nothing but writes. All three are generated once per data directory (mode 0600) unless given.
"""

from __future__ import annotations

import hmac
import os
import secrets
from dataclasses import asdict, dataclass
from pathlib import Path

import orjson

from raysight.settings import SECRETS_FILE, Credentials


def _same(given: str | None, secret: str | None) -> bool:
    """Constant-time equality of a credential and a secret; any text (a header may carry Latin-1, a URL UTF-8)."""
    return given is not None and secret is not None and hmac.compare_digest(given.encode(), secret.encode())


def bearer(header: str | None) -> str | None:
    """The credential of an ``Authorization: Bearer …`` header."""
    scheme, _, value = (header or "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" else None


@dataclass(frozen=True)
class Secrets(Credentials):
    """The credentials a server asks for (None: all open, as on loopback), and the checks of what a request brings."""

    @classmethod
    def loopback(cls) -> Secrets:
        return cls(None, None, None)

    @classmethod
    def of(cls, credentials: Credentials) -> Secrets:
        return cls(**asdict(credentials))

    def token_ok(self, header: str | None) -> bool:
        """Reads: the read token, or the admin token (which grants everything)."""
        return self.token is None or _same(bearer(header), self.token) or self.admin_ok(header)

    def admin_ok(self, header: str | None) -> bool:
        return self.admin_token is None or _same(bearer(header), self.admin_token)

    def ingest_ok(self, key: str | None) -> bool:
        return self.ingest_key is None or _same(key, self.ingest_key)


def reach_ok(header: str | None, reach_token: str | None) -> bool:
    """Reaching into a Ray process (driving a paused worker, profiling one): the admin token a server that allows it
    has (on loopback too)."""
    return _same(bearer(header), reach_token)


def load_or_create(data_dir: Path, token: str | None, ingest_key: str | None, admin_token: str | None) -> Secrets:
    """Given secrets win; otherwise those saved in the data dir; otherwise new ones, saved there."""
    path = data_dir / SECRETS_FILE
    saved = orjson.loads(path.read_bytes()) if path.exists() else {}
    result = Secrets(
        token=token or saved.get("token") or secrets.token_urlsafe(32),
        ingest_key=ingest_key or saved.get("ingest_key") or secrets.token_urlsafe(24),
        admin_token=admin_token or saved.get("admin_token") or secrets.token_urlsafe(32),
    )
    values = list(asdict(result).values())
    if len(set(values)) < len(values):
        raise ValueError(
            "the read token, the ingest key and the admin token must all differ: Ray logs the ingest URL in clear, "
            f"and the admin token guards what the read token may not do (check the options and {path})"
        )
    if saved != asdict(result):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(orjson.dumps(asdict(result)))
    return result
