"""A node agent's sightings of its Ray processes (``POST /ingest/agent/node-life``): checked, and turned into rows.
Pure.

The agent (``agent/node_watch.py``) sends JSON (``wire.NodeLife``), one object a change it saw::

    {"host": "node-1",
     "sightings": [{"session": "session_…", "process": "raylet", "node_id": "<56 hex digits>", "pid": 997,
                    "alive": false, "ns": 1795288476000000000, "last_alive_ns": 1795288475000000000}]}

``process`` is ``raylet`` (of the node ``node_id``) or ``gcs_server`` (``node_id`` ""). Of several sightings of one
process, the newest is kept; so is it in the store, which makes a resent batch harmless.
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa

from raysight import wire
from raysight.errors import BadIngest
from raysight.ingest.fields import agent_batch, int_field, session_field
from raysight.tables import Table, arrow_rows, columns

PROCESSES = ("raylet", "gcs_server")
MAX_BODY = 4 * 1024 * 1024
MAX_SIGHTINGS = 10_000
_NODE_ID = re.compile(r"[0-9a-f]{56}")
# What node agents last saw of each raylet (``node_id``) and GCS (``node_id`` '') of a session on their host: running
# with ``pid``, or gone (``alive`` false; ``last_alive_ns``: when last known running). Raw input.
NODE_EVIDENCE = Table(
    "node_evidence",
    columns(
        session="VARCHAR",
        host="VARCHAR",
        process="VARCHAR",
        node_id="VARCHAR",
        pid="BIGINT",
        alive="BOOLEAN",
        ns="BIGINT",
        last_alive_ns="BIGINT",
    ),
    key=("session", "host", "process", "node_id"),
)
SCHEMA = NODE_EVIDENCE.arrow_schema(omit=("host",))  # a batch's sightings (all of its one host)


def _sighting(sent: Any, where: str) -> dict[str, Any]:
    if not isinstance(sent, dict):
        raise BadIngest(f"{where} must be an object")
    value = wire.shaped(sent, wire.Sighting)
    process, node_id, alive = value["process"], value["node_id"], value["alive"]
    if process not in PROCESSES:
        raise BadIngest(f"{where}: process must be one of {', '.join(PROCESSES)}")
    if not (node_id == "" if process == "gcs_server" else isinstance(node_id, str) and _NODE_ID.fullmatch(node_id)):
        raise BadIngest(f'{where}: node_id must be a raylet\'s node ID (56 hex digits), or "" for the GCS')
    if type(alive) is not bool:
        raise BadIngest(f"{where}: alive must be true or false")
    return {
        "session": session_field(value["session"], f"{where}: session"),
        "process": process,
        "node_id": node_id,
        "pid": int_field(value["pid"], f"{where}: pid", optional=True, high=2**31 - 1),
        "alive": alive,
        "ns": int_field(value["ns"], f"{where}: ns"),
        "last_alive_ns": int_field(value["last_alive_ns"], f"{where}: last_alive_ns", optional=True),
    }


def parse(body: bytes) -> tuple[str, pa.Table]:
    """The host and its sightings (the newest of each process); BadIngest says what is wrong with a body that is not
    well formed."""
    sent, host = agent_batch(body, "sightings", '{"host", "sightings": [...]}')
    batch = wire.shaped(sent, wire.NodeLife)
    if len(batch["sightings"]) > MAX_SIGHTINGS:
        raise BadIngest(f"over {MAX_SIGHTINGS} sightings in one batch")
    newest: dict[tuple[str, str, str], dict[str, Any]] = {}
    for i, value in enumerate(batch["sightings"]):
        row = _sighting(value, f"sightings[{i}]")
        key = (row["session"], row["process"], row["node_id"])
        if key not in newest or row["ns"] > newest[key]["ns"]:
            newest[key] = row
    return host, arrow_rows(list(newest.values()), SCHEMA)
