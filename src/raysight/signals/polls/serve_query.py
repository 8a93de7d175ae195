"""Ray Serve's state at any moment of a session, as `serve status` and `serve config` read it from the dashboard
(``ServeInstanceDetails``, from the poller's samples: ``serve_details``), and its changes over the session: each
application's, deployment's and replica's state, when it changed; and each replica the session had, with its actor,
worker, pid, node and log file, and how it ended (its actor's death, from Ray's events)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import duckdb
import orjson

from raysight.signals.polls.parse import SERVE_DETAILS
from raysight.signals.ray_events.failures_query import CRASHED_REPLICA
from raysight.store.statements import Query, dict_rows

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
    f"""SELECT ns, last_ns, details FROM {SERVE_DETAILS.name}
        WHERE session = $session AND ($at IS NULL OR ns <= $at) ORDER BY ns""",
    about="every change of the session's Serve until $at, in order, each with when it was last polled so",
)
# The actors of Serve's replicas $ids: their worker, and how each ended (``crashed``: a failure, as `raysight errors`
# has it; else stopped by Serve, or, Ray never having sent its death, with the session)
REPLICA_ACTORS = Query(
    "serve replica actors",
    f"""SELECT a.actor_id, a.worker_id, a.state = 'DEAD' AS reported_dead,
              coalesce(a.end_ns, a.inferred_end_ns) // 1000000 AS end_ms,
              coalesce(a.death_message, a.inferred_reason) AS death_message, c.actor_id IS NOT NULL AS crashed
       FROM actors a LEFT JOIN (SELECT actor_id FROM actor_steps($session) WHERE {CRASHED_REPLICA}) c USING (actor_id)
       WHERE a.session = $session AND list_contains($ids, a.actor_id)""",
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


def _deployments(details: dict[str, Any], app: str | None) -> Iterator[tuple[str, dict[str, Any], str, dict[str, Any]]]:
    """(application's name, application, deployment's name, deployment) of one sample, ``app``'s alone if named; an
    application with no deployments once, with an empty name and deployment."""
    for name, application in (details.get("applications") or {}).items():
        if app is not None and name != app or not isinstance(application, dict):
            continue
        deployments = application.get("deployments") or {}
        for deployment_name, deployment in deployments.items() or [("", {})]:
            yield name, application, deployment_name, deployment


def _states(details: dict[str, Any], app: str | None) -> dict[tuple[str, ...], tuple[Any, Any, Any]]:
    """Each application's, deployment's and replica's (state, trigger, message) in one sample, by what it is."""
    out: dict[tuple[str, ...], tuple[Any, Any, Any]] = {}
    for name, application, deployment_name, deployment in _deployments(details, app):
        out[("application", name)] = (application.get("status"), None, application.get("message"))
        if not deployment_name:
            continue
        trigger = deployment.get("status_trigger")
        out[("deployment", name, deployment_name)] = (deployment.get("status"), trigger, deployment.get("message"))
        for replica in deployment.get("replicas") or []:
            key = ("replica", name, deployment_name, str(replica.get("replica_id")))
            out[key] = (replica.get("state"), None, None)
    return out


def _decisions(details: dict[str, Any], app: str | None) -> Iterator[dict[str, Any]]:
    """The autoscaler's recent decisions of each deployment in one sample (``autoscaling_detail.decisions``: when,
    why, from how many replicas to how many, by which policy), as changes."""
    for name, _, deployment_name, deployment in _deployments(details, app):
        for decision in (deployment.get("autoscaling_detail") or {}).get("decisions") or []:
            yield {
                "ts_ms": round(decision["timestamp_s"] * 1000),
                "kind": "autoscaling",
                "application": name,
                "deployment": deployment_name,
                "replica": None,
                "from": decision.get("prev_num_replicas"),
                "to": decision.get("curr_num_replicas"),
                "trigger": decision.get("policy"),
                "message": decision.get("reason") or None,
            }


def transitions(samples: Iterable[tuple[int, dict[str, Any]]], app: str | None = None) -> list[dict[str, Any]]:
    """The changes over ``samples`` (each ``(ns, ServeInstanceDetails)``, in order) of each application's status,
    each deployment's status and trigger (with its message) and each replica's state, ``app``'s alone if named: when
    first seen so, what it was (None: not yet there) and what it became (None: gone); and each autoscaling decision
    once, at the time Serve made it (from how many replicas to how many, its policy and reason). In time order.
    Pure."""
    out: list[dict[str, Any]] = []
    before: dict[tuple[str, ...], tuple[Any, Any]] = {}
    decided: set[tuple[Any, ...]] = set()
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
        for decision in _decisions(details, app):
            if (key := (decision["application"], decision["deployment"], decision["ts_ms"])) not in decided:
                decided.add(key)
                out.append(decision)
    return sorted(out, key=lambda change: change["ts_ms"])  # (a decision is older than the sample that showed it)


def serve_history(con: duckdb.DuckDBPyConnection, session: str | None, app: str | None) -> dict[str, Any]:
    """The session's Serve over time, from the poller's samples: :func:`transitions`."""
    rows = con.execute(SERVE_SAMPLES.sql, {"session": session, "at": None}).fetchall()
    return {"session": session, "transitions": transitions(((ns, orjson.loads(d)) for ns, _, d in rows), app)}


_REPLICA_FIELDS = ("actor_id", "pid", "node_id", "log_file_path")  # what a replica's entry in Serve's state says of it


def replica_lives(
    samples: Iterable[tuple[int, int, dict[str, Any]]], app: str | None = None, deployment: str | None = None
) -> list[dict[str, Any]]:
    """Each replica that ``samples`` (each ``(ns, last polled ns, ServeInstanceDetails)``, in order) show, ``app``'s
    and ``deployment``'s alone if named, in the order first seen: its application, deployment and ID, its actor, pid,
    node and log file, when it started (Serve's ``start_time_s``), when it was first and last seen, each state it was
    seen in and when, its last state, and when it was first seen gone (None: in the last sample). Pure."""
    lives: dict[tuple[str, str, str], dict[str, Any]] = {}
    for ns, last_ns, details in samples:
        seen = set()
        for name, _, deployment_name, shown in _deployments(details, app):
            if deployment is not None and deployment_name != deployment:
                continue
            for replica in shown.get("replicas") or []:
                key = (name, deployment_name, str(replica.get("replica_id")))
                seen.add(key)
                life = lives.setdefault(
                    key,
                    {
                        "application": name,
                        "deployment": deployment_name,
                        "replica_id": key[2],
                        "state": None,
                        "states": [],
                        "first_seen_ms": ns // 1_000_000,
                        "gone_ms": None,
                    },
                )
                life.update({field: replica.get(field) for field in _REPLICA_FIELDS})
                started = replica.get("start_time_s")
                life["start_time_ms"] = None if started is None else round(started * 1000)
                life["last_seen_ms"] = last_ns // 1_000_000
                if life["state"] != replica.get("state"):
                    life["state"] = replica.get("state")
                    life["states"].append({"state": life["state"], "ts_ms": ns // 1_000_000})
        for key, life in lives.items():
            if key not in seen and life["gone_ms"] is None:
                life["gone_ms"] = ns // 1_000_000
    return list(lives.values())


def serve_replicas(
    con: duckdb.DuckDBPyConnection,
    session: str | None,
    app: str | None = None,
    deployment: str | None = None,
    at_ns: int | None = None,
) -> dict[str, Any]:
    """Every replica of the session's Serve until ``at_ns`` (default: all its samples), :func:`replica_lives`, each
    with its actor's worker and how it ended by then (``ended``: None while it ran)."""
    rows = con.execute(SERVE_SAMPLES.sql, {"session": session, "at": at_ns}).fetchall()
    lives = replica_lives(((ns, last_ns, orjson.loads(d)) for ns, last_ns, d in rows), app, deployment)
    params = {"session": session, "ids": [life["actor_id"] for life in lives if life["actor_id"]]}
    actors = {row["actor_id"]: row for row in dict_rows(con.execute(REPLICA_ACTORS.sql, params))}
    for life in lives:
        actor = actors.get(life["actor_id"])
        life["worker_id"] = actor and actor["worker_id"]
        life["ended"] = None if actor is None else ending(actor, None if at_ns is None else at_ns // 1_000_000)
    return {"session": session, "replicas": lives}


def ending(actor: dict[str, Any], at_ms: int | None = None) -> dict[str, Any] | None:
    """How a replica's actor (a row of :data:`REPLICA_ACTORS`) ended by ``at_ms`` (default: at all): ``crashed`` (a
    failure), ``stopped`` (by Serve), or ``with its session`` (Ray never sent its death); None while it ran. Pure."""
    if actor["end_ms"] is None or at_ms is not None and actor["end_ms"] > at_ms:
        return None
    how = "crashed" if actor["crashed"] else "stopped" if actor["reported_dead"] else "with its session"
    return {"how": how, "time_ms": actor["end_ms"], "message": actor["death_message"]}
