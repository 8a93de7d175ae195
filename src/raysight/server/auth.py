"""Secrets for a server bound beyond loopback: a read token for queries and a write-only key for ingest.

Ray's aggregator sends no headers and logs its export URL in clear, so the ingest key travels in the URL and
grants nothing but writes. Both are generated once per data directory (mode 0600) unless given.
"""

from __future__ import annotations

import hmac
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import orjson

SECRETS_FILE = "secrets.json"


@dataclass(frozen=True)
class Secrets:
    token: str | None  # None: reads are open (loopback)
    ingest_key: str | None

    def token_ok(self, header: str | None) -> bool:
        if self.token is None:
            return True
        scheme, _, value = (header or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(value.strip(), self.token)

    def ingest_ok(self, key: str | None) -> bool:
        return self.ingest_key is None or (key is not None and hmac.compare_digest(key, self.ingest_key))


def load_or_create(data_dir: Path, token: str | None, ingest_key: str | None) -> Secrets:
    """Given secrets win; otherwise those saved in the data dir; otherwise new ones, saved there."""
    path = data_dir / SECRETS_FILE
    saved = orjson.loads(path.read_bytes()) if path.exists() else {}
    result = Secrets(
        token=token or saved.get("token") or secrets.token_urlsafe(32),
        ingest_key=ingest_key or saved.get("ingest_key") or secrets.token_urlsafe(24),
    )
    if saved != {"token": result.token, "ingest_key": result.ingest_key}:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(orjson.dumps({"token": result.token, "ingest_key": result.ingest_key}))
    return result
