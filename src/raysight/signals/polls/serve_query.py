"""Ray Serve's state at any moment of a session, as `serve status` and `serve config` read it from the dashboard
(``ServeInstanceDetails``, from the poller's samples: ``serve_details``), and its changes over the session: each
application's, deployment's and replica's state, when it changed."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import duckdb
import orjson

from raysight.signals.polls.parse import SERVE_DETAILS
from raysight.store.statements import Query

# Serve's state as Ray's dashboard answers where no Serve runs (``ServeInstanceDetails.get_empty_schema_dict``)
NO_SERVE: dict[str, Any] = {"controller_info": {}, "proxies": {}, "applications": {}, "target_capacity": None}
REDACTED = "<redacted>"  # what Ray's dashboard shows a browser of a runtime env's variable

# The poller's last sample of the session's Serve at or before $at
SERVE_SAMPLE = Query(
    "serve sample",
    f"""SELECT ns, last_ns, details FROM {SERVE_DETAILS.name}
        WHERE session = $session AND ($at IS NULL OR ns <= $at) ORDER BY ns DESC LIMIT 1""",
)
SERVE_SAMPLES = Query(
    "serve samples",
    f"SELECT ns, details FROM {SERVE_DETAILS.name} WHERE session = $session ORDER BY ns",
    about="every change of the session's Serve, in order",
)


def redacted(details: Any) -> Any:
    """``details`` with the values of every runtime env's ``env_vars`` masked, their names kept, as Ray's dashboard
    shows Serve's state to a browser (``runtime_env_redaction.redact_runtime_env_deep``)."""
    if isinstance(details, list):
        return [redacted(item) for item in details]
    if not isinstance(details, dict):
        return details
    out = {key: redacted(value) for key, value in details.items()}
    env = details.get("runtime_env")
    if isinstance(env, dict) and isinstance(env.get("env_vars"), dict):
        out["runtime_env"] = {**env, "env_vars": dict.fromkeys(env["env_vars"], REDACTED)}
    return out


def serve_sample(con: duckdb.DuckDBPyConnection, session: str | None, at_ns: int | None) -> dict[str, Any]:
    """Serve's state at ``at_ns`` (default: the last sample): ``details`` as the dashboard gave it (None before the
    poller saw Serve run), ``sampled_ms`` when the poller first saw it so and ``last_polled_ms`` when last."""
    row = con.execute(SERVE_SAMPLE.sql, {"session": session, "at": at_ns}).fetchone()
    out: dict[str, Any] = {"session": session, "at_ms": None if at_ns is None else at_ns // 1_000_000}
    if row is None:
        return {**out, "sampled_ms": None, "last_polled_ms": None, "details": None}
    return {
        **out,
        "sampled_ms": row[0] // 1_000_000,
        "last_polled_ms": row[1] // 1_000_000,
        "details": orjson.loads(row[2]),
    }


def _states(details: dict[str, Any], app: str | None) -> dict[tuple[str, ...], tuple[Any, Any, Any]]:
    """Each application's, deployment's and replica's (state, trigger, message) in one sample, by what it is."""
    out: dict[tuple[str, ...], tuple[Any, Any, Any]] = {}
    for name, application in (details.get("applications") or {}).items():
        if app is not None and name != app or not isinstance(application, dict):
            continue
        out[("application", name)] = (application.get("status"), None, application.get("message"))
        for deployment_name, deployment in (application.get("deployments") or {}).items():
            trigger = deployment.get("status_trigger")
            out[("deployment", name, deployment_name)] = (deployment.get("status"), trigger, deployment.get("message"))
            for replica in deployment.get("replicas") or []:
                key = ("replica", name, deployment_name, str(replica.get("replica_id")))
                out[key] = (replica.get("state"), None, None)
    return out


def transitions(samples: Iterable[tuple[int, dict[str, Any]]], app: str | None = None) -> list[dict[str, Any]]:
    """The changes over ``samples`` (each ``(ns, ServeInstanceDetails)``, in order) of each application's status,
    each deployment's status and trigger (with its message) and each replica's state, ``app``'s alone if named: when
    first seen so, what it was (None: not yet there) and what it became (None: gone). Pure."""
    out: list[dict[str, Any]] = []
    before: dict[tuple[str, ...], tuple[Any, Any]] = {}
    for ns, details in samples:
        now = _states(details, app)
        for key in [*now, *(k for k in before if k not in now)]:
            state, trigger, message = now.get(key, (None, None, None))
            if before.get(key, (None, None)) == (state, trigger):
                continue
            kind, application, *rest = key
            out.append(
                {
                    "ts_ms": ns // 1_000_000,
                    "kind": kind,
                    "application": application,
                    "deployment": rest[0] if rest else None,
                    "replica": rest[1] if len(rest) > 1 else None,
                    "from": before.get(key, (None, None))[0],
                    "to": state,
                    "trigger": trigger,
                    "message": message or None,
                }
            )
        before = {key: (state, trigger) for key, (state, trigger, _) in now.items()}
    return out


def serve_history(con: duckdb.DuckDBPyConnection, session: str | None, app: str | None) -> dict[str, Any]:
    """The session's Serve over time, from the poller's samples: :func:`transitions`."""
    rows = con.execute(SERVE_SAMPLES.sql, {"session": session}).fetchall()
    return {"session": session, "transitions": transitions(((ns, orjson.loads(d)) for ns, d in rows), app)}
