"""What crosses the network between raysight's parts, and to and from Ray: URL paths, headers, the attribute names
spans carry, and the shapes of the agent's and `raysight run`'s payloads. Imports nothing of raysight, so the agent,
the instrumentation, the client and the server all share it.

Paths are templates in Starlette's syntax: the server's route table declares them as they are, and senders fill
them with :func:`path`, which quotes each value (``{name:path}`` keeps its slashes).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict, TypeVar, cast
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
SERVE = f"{API}/serve"
SERVE_HISTORY = f"{API}/serve/history"
SERVE_REPLICAS = f"{API}/serve/replicas"
SERVE_REQUESTS = f"{API}/serve/requests"
SERVE_REQUEST = f"{API}/serve/requests/{{request_id:path}}"  # (a client's X-Request-ID may hold a /)
SERVE_LATENCY = f"{API}/serve/latency"
TIMELINE = f"{API}/timeline"
TASK_STREAM = f"{API}/task-stream"
METRICS_TOP = f"{API}/metrics/top"
USAGE = f"{API}/usage"
DEBUG_PAUSES = f"{API}/debug/pauses"
DEBUG_PAUSE = f"{API}/debug/pauses/{{pause_id}}"
DEBUG_ATTACH = f"{API}/debug/pauses/{{pause_id}}/attach"  # a WebSocket: the client's side of a pause
PROFILE = f"{API}/profile"
CAPTURES = f"{API}/profiles"  # on-demand profiles of live processes: asked for (POST), listed
CAPTURE = f"{API}/profiles/{{capture_id}}"
CAPTURE_FILE = f"{API}/profiles/{{capture_id}}/file"  # a Serve capture's memray file
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
DEBUG_PAUSED = f"{INGEST}/debug/paused"  # a WebSocket: a paused worker's side of its pause
TASK_PROFILES = f"{INGEST}/task-profiles"  # a worker's samples of the task attempts it ran
AGENT_CAPTURES = f"{INGEST}/agent/captures"  # an agent's long poll for the on-demand profiles of its nodes' processes
AGENT_CAPTURE = f"{INGEST}/agent/captures/{{capture_id}}"  # …and what it made of one
AGENT_SERVE_CAPTURES = f"{INGEST}/agent/serve-captures"  # Serve's memray captures: shipped (POST), those kept (GET)
GZIP = "application/gzip"  # the Content-Type of a Serve capture shipped
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
RAY_SERVE_VERSION = "/api/ray/version"  # what Serve's CLI asks first
RAY_SERVE_APPLICATIONS = "/api/serve/applications/"  # Serve's state (ServeInstanceDetails), and its writes

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
CLIENT_HEADER = "x-raysight-client"  # who a debugger's client says it is (user@host), as its attaches are recorded

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
ATTR_SERVE_REQUEST_ID = "request_id"  # Ray Serve's own, on the spans of its proxies, routers and replicas
TASK_SCOPE = "raysight.ray"  # the instrumentation scope of raysight's span of each task attempt

# ── payloads: the JSON bodies of the agent's and `raysight run`'s routes, built to these shapes by the sender and read
# by these names by the route's parser (mypy checks both); the parser still checks every value: a body is what was sent


class LogColumns(TypedDict):
    """A file's records in a log batch (``signals/log_lines/parse.py`` says what each holds): a list each, as long as
    ``offsets``; a column whose values may be null may be left out, or null: all null."""

    offsets: list[int]
    texts: list[str]
    raw: NotRequired[list[str | None] | None]
    continued: list[bool]
    markers: list[bool]
    jobs: list[str | None]
    tasks: NotRequired[list[str | None]]
    actors: NotRequired[list[str | None]]


class LogFile(LogColumns):
    """A file of a log batch: which file, where the next batch of it starts (``end``), and its records."""

    session: str
    key: str
    name: str
    path: str
    stream: str  # stdout, stderr or system
    worker_id: str | None
    job_id: str | None
    pid: int | None
    end: int
    read_ns: int
    append: NotRequired[bool]  # offsets from 0, placed after what the store has of the file (the OTLP receiver's)


class LogGap(TypedDict):
    """Bytes of a file that were never read (``end`` None: to its end)."""

    session: str
    key: str
    name: str
    start: int
    end: int | None
    why: str


class AgentLogs(TypedDict):
    """``AGENT_LOGS``: a batch of a node's log lines."""

    host: str
    utc_offset_s: int
    files: list[LogFile]
    gaps: NotRequired[list[LogGap]]


class Sighting(TypedDict):
    """A change in what a node agent sees of one of its Ray processes (``agent/node_watch.py``)."""

    session: str
    process: str  # raylet or gcs_server
    node_id: str  # the raylet's node, "" for a GCS
    pid: int | None
    alive: bool
    ns: int
    last_alive_ns: int | None


class NodeLife(TypedDict):
    """``AGENT_NODE_LIFE``: a node agent's sightings."""

    host: str
    sightings: list[Sighting]


class ScrapeTarget(TypedDict):
    """What a scrape was of."""

    instance: str  # host:port
    job: str
    labels: NotRequired[dict[str, str]]  # what the agent knows of it (its node), for the series that lack them


class MetricsScrape(TypedDict):
    """``AGENT_METRICS``: one scrape of a Prometheus target, its page as it was."""

    session: str
    scraped_ms: int
    target: ScrapeTarget
    text: str


class RayStateFound(TypedDict):
    """What one poll of a live cluster's dashboard found (``agent/state_poll.py``)."""

    resources: dict[str, list[Any]]  # each resource's rows as Ray lists them; one left out was not polled
    errors: dict[str, str]  # a resource (or cluster_status, serve) → why it could not be had
    cluster_status: NotRequired[dict[str, Any]]  # the dashboard's, once the cluster's monitor has reported
    serve: NotRequired[dict[str, Any] | None]  # Serve's state (ServeInstanceDetails); null: no ServeController lives


class RayState(RayStateFound):
    """``AGENT_RAY_STATE``: a poll, of one session."""

    session: str
    polled_ns: int


class RunExit(TypedDict):
    """``AGENT_RUN_EXIT``: how `raysight run`'s driver ended."""

    run_id: str
    driver_pid: int | None
    exit_code: int
    ended_ns: int
    session: str | None  # the session the driver joined, when known


class RayMetrics(TypedDict):
    """``AGENT_RAY_METRICS``: a node's Prometheus text (its aggregator's lines suffice)."""

    text: str


class ProfiledAttempt(TypedDict):
    """A task attempt's samples in a ``TASK_PROFILES`` batch: each stack (collapsed: root first, ``;`` between
    frames) with how often it was sampled, and how often on CPU."""

    task_id: str
    attempt: int
    stacks: list[tuple[str, int, int]]


class TaskProfiles(TypedDict):
    """``TASK_PROFILES``: what a worker's sampler (``instrument/task_profile.py``) folded since its last batch, at
    ``hz`` samples a second; ``batch_id`` names the batch (a resent one is kept once), ``dropped`` counts the samples
    it could not keep since its last batch that went through."""

    batch_id: str
    session: str
    node_id: str | None
    worker_id: str | None
    pid: int
    hz: float
    dropped: int
    attempts: list[ProfiledAttempt]


class PausedFrame(TypedDict):
    """A frame of a paused worker's stack, innermost first: where it is, and its locals' reprs (bounded)."""

    file: str
    line: int
    function: str
    locals: dict[str, str]


class Pause(TypedDict):
    """``DEBUG_PAUSED``'s first message: where a worker paused (``kind``: ``breakpoint`` or ``post_mortem``) and in
    which of Ray's entities. A task's IDs are null where the worker runs none (a driver)."""

    kind: str
    session: str
    job_id: str | None
    task_id: str | None
    attempt: int | None
    actor_id: str | None
    worker_id: str | None
    node_id: str | None
    host: str
    pid: int
    paused_ns: int
    stack: list[PausedFrame]  # innermost first; its first frame is where the worker paused
    exception: NotRequired[str | None]  # a post-mortem pause's: the exception, and its traceback
    traceback: NotRequired[str | None]


# The messages of the debugger's WebSockets, JSON objects of one key each: the text a client types (``input``), the
# text the worker's debugger writes (``output``), that it waits for a line (``ready``), and how a pause ended
# (``ended``: continued, quit, timed out, worker gone); the server tells the worker its pause's ID (``pause_id``) and
# a client why it is refused (``refused``)
INPUT, OUTPUT, READY, ENDED = "input", "output", "ready", "ended"
PAUSE_ID, REFUSED = "pause_id", "refused"
# A DAP client (`raysight debug attach --dap`) attached to a pause, or gone: the server tells the worker (``dap``), and
# the client's and debugpy's bytes then travel as binary messages; the messages above are text
DAP, DAP_OPEN, DAP_CLOSED = "dap", "open", "closed"


Payload = TypeVar("Payload", bound=Mapping[str, object])


class CaptureAsked(TypedDict):
    """``POST CAPTURES``: an on-demand profile of a live process, named by its task (the attempt running, else the
    one named), its actor, or its pid and node. ``kind``: ``stack`` (py-spy dump), ``cpu`` (py-spy record) or
    ``memory`` (memray attach) for ``duration_s``."""

    kind: str
    session: NotRequired[str | None]
    task_id: NotRequired[str | None]
    actor_id: NotRequired[str | None]
    pid: NotRequired[int | None]
    node_id: NotRequired[str | None]
    duration_s: NotRequired[float | None]
    native: NotRequired[bool | None]  # native (C) frames too
    leaks: NotRequired[bool | None]  # memory: what is still allocated at the end, not the peak


class CaptureOrder(TypedDict):
    """What an agent is told to run (``AGENT_CAPTURES``' answer, a list of them)."""

    capture_id: str
    kind: str
    pid: int
    duration_s: float
    native: bool
    leaks: bool


class CaptureResult(TypedDict):
    """What an agent sends back (``POST AGENT_CAPTURE``): the stacks it found (collapsed, root first, with their
    weight in ``unit``: samples or bytes), py-spy dump's text, or why it could not."""

    error: NotRequired[str | None]
    unit: NotRequired[str | None]
    stacks: NotRequired[list[tuple[str, int]] | None]
    text: NotRequired[str | None]


class ServeCaptureShipped(TypedDict):
    """``POST AGENT_SERVE_CAPTURES``' query parameters, the file gzipped as the body (none where ``too_large``): one
    of Serve's memray captures in a session's ``logs/serve/`` as it is now; the server reads it with memray. ``GET``
    (``session=``) answers ``{"captures": [these, without session and node]}``: those it keeps, as last shipped."""

    session: str
    node: NotRequired[str]  # the node its process ran on, where the agent can tell
    file: str  # its name in logs/serve/
    bytes: str  # its size as written
    modified_ns: str
    too_large: NotRequired[str]  # over what the server takes (gzipped): only said


def shaped(value: Mapping[str, Any], payload: type[Payload]) -> Payload:
    """A JSON object as sent, to be read as ``payload`` (one of the shapes above) by subscript, whose names mypy
    checks: a key it lacks reads None. Its values are what was sent: the reader checks each one it reads."""
    return cast(Payload, {**dict.fromkeys(payload.__annotations__), **value})


_PARAM = re.compile(r"\{(\w+)(:path)?\}")


def path(template: str, /, **values: str) -> str:
    """``template`` with its ``{name}`` parts filled, each quoted (``{name:path}`` keeps its slashes); KeyError
    for one not given."""
    return _PARAM.sub(lambda m: quote(values[m[1]], safe="/" if m[2] else ""), template)


def in_session(template: str, session: str | None) -> str:
    """A Ray-compatible or Prometheus path as answered for ``session`` (None: the newest)."""
    return path(IN_SESSION, session=session) + template if session else template


def key_params(key: str | None) -> dict[str, str]:
    """The query string that carries the ingest key (none without one)."""
    return {INGEST_KEY_PARAM: key} if key else {}
