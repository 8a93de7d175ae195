"""What crosses the network between raysight's parts, and to and from Ray: URL paths, headers, the attribute names
spans carry, and the shapes of the agent's and `raysight run`'s payloads. Imports nothing of raysight, so the agent,
the instrumentation, the client and the server all share it.

Paths are templates in Starlette's syntax: the server's route table declares them as they are, and senders fill
them with :func:`path`, which quotes each value (``{name:path}`` keeps its slashes).
"""

from __future__ import annotations

import re
from urllib.parse import quote

# ── raysight's own API (``/api/raysight/…``): named routes before the generic ones ─────────────────────────────
API = "/api/raysight"
PING = f"{API}/ping"
SESSIONS = f"{API}/sessions"
SESSION = f"{API}/sessions/{{session:path}}"
DOCTOR = f"{API}/doctor"
REINDEX = f"{API}/reindex"
SUMMARY = f"{API}/summary/{{resource}}"
LOGS = f"{API}/logs"
ERRORS = f"{API}/errors"
ERROR = f"{API}/errors/{{failure_id}}"
ACTIVITY = f"{API}/activity"
STATUS = f"{API}/status"
TIMELINE = f"{API}/timeline"
TASK_STREAM = f"{API}/task-stream"
METRICS_TOP = f"{API}/metrics/top"
TRACES = f"{API}/traces"
TRACE = f"{API}/traces/{{trace_id}}"
RESOURCE = f"{API}/{{resource}}"
ENTITY = f"{API}/{{resource}}/{{entity_id}}"

# ── ingest: Ray's aggregators, node agents and `raysight run`, OTLP exporters ───────────────────────────────────
INGEST = "/ingest"
RAY_EVENTS = f"{INGEST}/ray-events"
RAY_EVENTS_KEYED = f"{INGEST}/ray-events/{{key}}"  # Ray's aggregator sends no headers: the key rides in the URL
AGENT_LOGS = f"{INGEST}/agent/logs"
AGENT_RUN_EXIT = f"{INGEST}/agent/run-exit"
AGENT_RAY_METRICS = f"{INGEST}/agent/ray-metrics"
AGENT_NODE_LIFE = f"{INGEST}/agent/node-life"
AGENT_RAY_STATE = f"{INGEST}/agent/ray-state"
AGENT_METRICS = f"{INGEST}/agent/metrics"
OTLP_TRACES = "/v1/traces"  # OTLP/HTTP's standard paths, which exporters append to the endpoint they are given
OTLP_LOGS = "/v1/logs"
OTLP_KEYED = f"{INGEST}/otlp/{{key}}"  # an endpoint that carries the ingest key, for exporters that send no header
OTLP_TRACES_KEYED = OTLP_KEYED + OTLP_TRACES
OTLP_LOGS_KEYED = OTLP_KEYED + OTLP_LOGS

# ── Ray's dashboard API, which raysight answers as Ray does and which the agent polls on Ray's own dashboard ────
RAY_VERSION = "/api/version"
RAY_JOBS = "/api/jobs/"
RAY_JOB = "/api/jobs/{job_id}"
RAY_JOB_STOP = "/api/jobs/{job_id}/stop"
RAY_PACKAGE = "/api/packages/{package:path}"
RAY_STATE = "/api/v0/{resource}"
RAY_SUMMARY = "/api/v0/{resource}/summarize"
RAY_CLUSTER_STATUS = "/api/cluster_status"

# ── Prometheus's HTTP API (Grafana's data source) and exposition ────────────────────────────────────────────────
PROM_API = "/api/v1"
PROM_QUERY = f"{PROM_API}/query"
PROM_QUERY_RANGE = f"{PROM_API}/query_range"
PROM_SERIES = f"{PROM_API}/series"
PROM_LABELS = f"{PROM_API}/labels"
PROM_LABEL_VALUES = f"{PROM_API}/label/{{name}}/values"
PROM_METADATA = f"{PROM_API}/metadata"
METRICS = "/metrics"

# ── any session's Ray-compatible and Prometheus routes, beside the newest session's at the root ─────────────────
IN_SESSION = "/sessions/{session}"

# ── the dashboard ───────────────────────────────────────────────────────────────────────────────────────────────
HOME = "/"
UI = "/ui"
UI_PAGE = "/ui/{page:path}"
UI_STATIC = "/ui/static"
UI_VENDOR = "/ui/vendor/{name}"

# ── headers ─────────────────────────────────────────────────────────────────────────────────────────────────────
INGEST_KEY_HEADER = "x-raysight-ingest-key"  # where a sender can set headers (OTLP exporters, the agent)
SPANS_DROPPED_HEADER = "x-raysight-spans-dropped"  # spans the instrumentation dropped since its last export
INGEST_KEY_PARAM = "key"  # …or the ingest key in the query string (Ray's aggregator's URL)

# ── the attributes raysight puts on spans and their resources, so that a span leads to its task, worker and logs:
# written by the instrumentation, read by the receiver. Ray's IDs are hex, as Ray's CLI and raysight show them ──────
ATTR_SESSION = "ray.session_name"
ATTR_JOB_ID = "ray.job_id"
ATTR_NODE_ID = "ray.node_id"
ATTR_WORKER_ID = "ray.worker_id"
ATTR_PID = "process.pid"  # OpenTelemetry's own
ATTR_TASK_ID = "ray.task_id"
ATTR_ATTEMPT = "ray.task.attempt"
ATTR_ACTOR_ID = "ray.actor_id"
ATTR_FUNCTION = "ray.function"  # module.qualname of the task's function, or Class.method
ATTR_TASK_KIND = "ray.task.kind"  # "task", "actor_task" or "actor_creation"
ATTR_SERVE_REQUEST_ID = "ray.serve.request_id"
TASK_SCOPE = "raysight.ray"  # the instrumentation scope of raysight's span of each task attempt

_PARAM = re.compile(r"\{(\w+)(:path)?\}")


def path(template: str, /, **values: str) -> str:
    """``template`` with its ``{name}`` parts filled, each quoted (``{name:path}`` keeps its slashes); KeyError
    for one not given."""
    return _PARAM.sub(lambda m: quote(values[m[1]], safe="/" if m[2] else ""), template)


def in_session(template: str, session: str | None) -> str:
    """A Ray-compatible or Prometheus path as answered for ``session`` (None: the newest)."""
    return path(IN_SESSION, session=session) + template if session else template
