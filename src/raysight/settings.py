"""raysight's settings, each written once: the options of `raysight server` (:data:`SERVER`: name, type, default,
environment variable, help; `raysight server`'s options are made from it), the environment variables its clients read
(:data:`CLIENT_ENVIRONMENT`), the names of the data dir's files, and the frozen settings a server runs with
(:class:`Settings`, parsed once from the options and passed down in parts: the store's, the writer's, the HTTP
limits, the queries', forwarding's, the secrets and the Host names served). docs/settings.md documents them all.

Imports nothing of raysight but :mod:`raysight.units`: the CLI, the instrumentation (inside Ray's workers) and the
server all read it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raysight import units

# ── the data dir's files ────────────────────────────────────────────────────────────────────────────────────────────
DB_FILE = "raysight.duckdb"  # the store
JOURNAL_DIR = "journal"  # ingest bodies acknowledged, until folded (``store/journal.py``)
SECRETS_FILE = "secrets.json"  # a server's secrets beyond loopback, made once unless given (``server/auth.py``)
LOCK_FILE = "server.lock"  # held by the server running on the data dir, and naming it

# ── environment variables ───────────────────────────────────────────────────────────────────────────────────────────
ENV_DATA = "RAYSIGHT_DATA"
ENV_SERVER = "RAYSIGHT_SERVER"
ENV_TOKEN = "RAYSIGHT_TOKEN"
ENV_INGEST_KEY = "RAYSIGHT_INGEST_KEY"
ENV_ADMIN_TOKEN = "RAYSIGHT_ADMIN_TOKEN"
ENV_TRACES_FORWARD = "RAYSIGHT_TRACES_FORWARD"
ENV_METRICS_KEEP = "RAYSIGHT_METRICS_KEEP"
ENV_METRICS_DROP = "RAYSIGHT_METRICS_DROP"
ENV_OTLP_ENDPOINT = "RAYSIGHT_OTLP_ENDPOINT"  # OTLP/HTTP base URL; /v1/traces is appended
ENV_TRACES_SAMPLE_RATIO = "RAYSIGHT_TRACES_SAMPLE_RATIO"  # of new traces (a parent's decision is followed)
ENV_PROFILE_HZ = "RAYSIGHT_PROFILE_HZ"  # task attempts' samples a second (instrument/task_profile.py); 0: none
ENV_TRACING = "RAYSIGHT_TRACING"  # 0: the workers' hook makes no span (it samples the task attempts alone)
ENV_CHAINED_ENV_HOOK = "RAYSIGHT_CHAINED_ENV_HOOK"  # the user's RAY_RUNTIME_ENV_HOOK, called first
ENV_CHAINED_SETUP_HOOK = "RAYSIGHT_CHAINED_SETUP_HOOK"  # the user's worker_process_setup_hook (a module), called after
ENV_POST_MORTEM_TIMEOUT = (
    "RAYSIGHT_POST_MORTEM_TIMEOUT"  # seconds a post-mortem freeze lasts (`raysight run --post-mortem`)
)
ENV_RAY_SYSTEM_CONFIG = "RAYSIGHT_RAY_SYSTEM_CONFIG"  # what `raysight env` exports for `ray start --head`

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8271
POST_MORTEM_TIMEOUT_S = 600.0  # how long a post-mortem freeze waits for a client to drive it, by default


def default_data_dir() -> Path:
    """``$RAYSIGHT_DATA``, else ``$XDG_DATA_HOME/raysight``, else ``~/.local/share/raysight``."""
    if os.environ.get(ENV_DATA):
        return Path(os.environ[ENV_DATA]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "raysight"


def default_server() -> str:
    return os.environ.get(ENV_SERVER) or f"http://{DEFAULT_HOST}:{DEFAULT_PORT}"


# ── the parts of a server's settings ────────────────────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Limits:
    """The HTTP limits: how long the server waits for a request's headers, then for its body, how many connections it
    holds, and how large an ingest body may be, in bytes and in events. Ray's aggregator gives up on a POST after 3 s,
    so the waits leave it room. Ray's aggregator sends at most RAY_DASHBOARD_AGGREGATOR_AGENT_MAX_EVENT_SEND_BATCH_SIZE
    (1,000) events per POST, and never more than its buffer holds (RAY_DASHBOARD_AGGREGATOR_AGENT_MAX_EVENT_BUFFER_SIZE,
    100,000); folding takes ~800 bytes of memory an event, so a body of [0,0,…] must not carry millions."""

    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_connections: int = 1000
    max_body: int = 16 * 1024 * 1024
    max_events: int = 100_000


@dataclass(frozen=True)
class QueryLimits:
    """What one query may spend (server options): samples held, counted as Prometheus counts them (each loaded from
    the store, and each point an expression's answer holds at a step; here summed over the query's expressions, and
    each series found as ``promql/budget.py``'s ``SERIES_COST``), and seconds; and how many queries are evaluated at
    once.

    As Prometheus's --query.max-samples and --query.timeout (50M, 2 min) but sized for this server's memory: a sample
    loaded costs up to ~70 bytes while it is sorted, a point 8 bytes and ~30 of JSON, each point is rendered in Python
    (~1 us). At 5M, 2,000 series' 2.3M samples and 2.7M points answered peaked the server at 0.4-0.5 GB in 2-3.5 s.
    Grafana's data source proxy gives up on a request after 30 s. Each query evaluated at once may hold up to its
    samples budget (~0.5 GB at the default), and threads under the GIL gain little from more: Grafana's ten panels
    queue behind two."""

    max_samples: int = 5_000_000
    timeout_s: float = 30.0
    max_concurrency: int = 2


@dataclass(frozen=True)
class Retention:
    """How long, and how much of, something to keep (None: no bound), as given (`raysight server --log-retention 30d
    --log-max-size 50GB`, ``--metrics-retention``, ``--metrics-max-size``). What each bound drops is the business of
    ``signals/log_lines/log_retention.py`` and ``signals/scrapes/metric_retention.py``."""

    max_age: str | None = None  # 30d
    max_size: str | None = None  # 50GB

    def __bool__(self) -> bool:
        return bool(self.max_age or self.max_size)

    @property
    def age_s(self) -> float | None:
        return units.duration_s(self.max_age) if self.max_age else None

    @property
    def size_bytes(self) -> int | None:
        return units.size_bytes(self.max_size) if self.max_size else None

    def why(self, what: str) -> str:
        """The marker's words for what ``what`` retention (``log``, ``metrics``) dropped."""
        bounds = [f"older than {self.max_age}"] if self.max_age else []
        bounds += [f"past {self.max_size}"] if self.max_size else []
        return f"dropped by the server's {what} retention ({' or '.join(bounds)})"


@dataclass(frozen=True)
class Downsampling:
    """After how long raw metric samples become one a minute, and after how long one each 10 minutes (None: never;
    ``signals/scrapes/metric_downsample.py``)."""

    raw_for: str | None = "7d"
    minutes_for: str | None = "90d"

    @classmethod
    def parse(cls, text: str) -> Downsampling:
        """``7d,90d``, or ``off``; ValueError otherwise."""
        if text.strip().lower() == "off":
            return cls(None, None)
        raw, comma, minutes = (part.strip() for part in text.partition(","))
        if not comma or not raw or not minutes or "," in minutes:
            raise ValueError(f"{text!r} is not RAW,MINUTES such as 7d,90d, or off")
        if units.duration_s(age(minutes)) <= units.duration_s(age(raw)):
            raise ValueError(f"{text!r}: the 10-minute part must begin after the 1-minute part ({minutes} > {raw})")
        return cls(raw, minutes)

    def __bool__(self) -> bool:
        return self.raw_for is not None and self.minutes_for is not None

    def __str__(self) -> str:
        return f"{self.raw_for},{self.minutes_for}" if self else "off"


@dataclass(frozen=True)
class TailSampling:
    """Which complete traces the store keeps (``signals/spans/trace_sampling.py``)."""

    keep: float = 1.0  # of the traces neither failed nor slow
    slow_ns: int | None = None  # a trace this long is always kept
    wait_s: float = 30.0  # with no new span for this long, a trace is decided

    @property
    def active(self) -> bool:
        return self.keep < 1.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.keep <= 1.0:
            raise ValueError(f"the fraction of traces kept is 0 to 1, not {self.keep}")


@dataclass(frozen=True)
class Forwarding:
    """Where the receiver's spans go (``server/forward.py``): ``url`` (an OTLP/HTTP endpoint, ``/v1/traces`` appended
    unless given), with ``headers`` (an API key, say); ``store`` False: forwarded only."""

    url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    store: bool = True


@dataclass(frozen=True)
class Credentials:
    """The read token, the write-only ingest key and the admin token (``server/auth.py``): as given to `raysight
    server` (None: not given), or those a server asks for (None: not asked, as on loopback)."""

    token: str | None = None
    ingest_key: str | None = None
    admin_token: str | None = None


# Folding a group costs a fixed amount of CPU (DuckDB plans its statements: 0.05-0.25 s) plus tens of µs an event.
# A group waits this long after its first POST was journalled for others arriving with it (each node's aggregator
# sends about once a second, at its own moment); it adds to how stale queries are on a quiet server
# (benchmarks/freshness.py).
FOLD_LINGER_S = 0.05
# Spans linger longer: each traced Ray process sends an export up to once a second (and after each burst of tasks),
# each at its own moment, and a fold's fixed cost (~15 ms of DuckDB statements and a commit) paid for every one of
# them was most of what the server cost a busy Ray (benchmarks/tracing.py). A trace shows this much later.
SPANS_LINGER_S = 1.0
# After each round of groups (every signal's that arrived meanwhile) the fold thread rests this many times as long as
# the round took (wall clock, so a busy machine, which stretches a fold at niceness 19, lengthens the rest), up to the
# writer's MAX_REST_S: folding takes at most a quarter of the time, and under load groups grow instead of their fixed
# cost being paid back to back beside a busy Ray (benchmarks/ray_task_throughput.py, benchmarks/serve.py). A batch
# arriving once the rest is over folds after its signal's linger.
FOLD_REST = 3.0
# Beyond a burst of FOLD_BURST_S of folding, the rests keep folding to FOLD_SHARE of the time (store/writer.py's
# FoldBudget): under Serve's steady trickle of every signal, resting 3 times a round kept the server folding a quarter
# of the time (1.2-1.6 ms of its CPU a request in benchmarks/serve.py); a job's burst still shows within a second.
FOLD_SHARE = 0.05
FOLD_BURST_S = 5.0


@dataclass(frozen=True)
class Reaches:
    """What of Ray's live processes the server lets its clients reach into: debugging (``--allow-debug``: a client
    drives a paused worker, which runs code in it) and on-demand profiling (``--allow-profiling``: py-spy and memray
    read a worker's memory). Each then needs the admin token, on loopback too: `raysight server` sets it
    (``reach_token`` None: neither is allowed)."""

    debug: bool = False
    profiling: bool = False
    reach_token: str | None = None


@dataclass(frozen=True)
class StoreSettings:
    """The store's part: DuckDB's memory limit (its notation: ``1GB``; folding a full group of 48 MB takes ~500 MB,
    and a larger group is split), and the series a session may hold (``signals/scrapes/metric_retention.py``)."""

    memory_limit: str = "1GB"
    metrics_max_series: int = 1_000_000


@dataclass(frozen=True)
class WriterSettings:
    """The writer's part (``store/writer.py``): how long a group waits for more, how long folding rests, and what it
    does every minute besides: the retentions, the metrics' downsampling, the traces' tail sampling."""

    fold_linger_s: float = FOLD_LINGER_S
    fold_rest: float = FOLD_REST
    fold_share: float = FOLD_SHARE
    fold_burst_s: float = FOLD_BURST_S
    spans_linger_s: float = SPANS_LINGER_S
    log_retention: Retention = Retention()
    metrics_retention: Retention = Retention()
    metrics_downsampling: Downsampling = Downsampling()
    trace_sampling: TailSampling = TailSampling()


@dataclass(frozen=True)
class Settings:
    """What a server runs with, in parts. ``secrets`` and ``allowed_hosts`` are as given until `raysight server`
    completes them for its bind: beyond loopback the secrets saved in the data dir (or new ones) fill those not
    given; on loopback none is asked, and the Host names served are the loopback names, the bind's own and those
    given. The app takes them as they are: no credentials asked where None, any Host served where None."""

    data_dir: Path
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    store: StoreSettings = StoreSettings()
    writer: WriterSettings = WriterSettings()
    http: Limits = Limits()
    queries: QueryLimits = QueryLimits()
    forwarding: Forwarding = Forwarding()
    secrets: Credentials = Credentials()
    allowed_hosts: frozenset[str] | None = None
    reaches: Reaches = Reaches()

    @classmethod
    def from_options(cls, given: Mapping[str, Any]) -> Settings:
        """The settings of `raysight server`'s options (keyed as :data:`SERVER`'s; text is read by its setting's
        ``parse``, other values are taken as they are)."""
        o = {s.key: s.read(given[s.key]) for s in SERVER}
        return cls(
            data_dir=o["data_dir"] or default_data_dir(),
            host=o["host"],
            port=o["port"],
            store=StoreSettings(o["memory_limit"], o["metrics_max_series"]),
            writer=WriterSettings(
                log_retention=Retention(o["log_retention"], o["log_max_size"]),
                metrics_retention=Retention(o["metrics_retention"], o["metrics_max_size"]),
                metrics_downsampling=o["metrics_downsample"],
                trace_sampling=TailSampling(o["traces_keep"], o["traces_keep_slow"]),
            ),
            http=Limits(o["header_timeout"], o["body_timeout"], o["max_connections"], o["max_body"], o["max_events"]),
            queries=QueryLimits(o["query_max_samples"], o["query_timeout"], o["query_max_concurrency"]),
            forwarding=Forwarding(o["traces_forward"], o["traces_forward_header"], o["traces_store"]),
            secrets=Credentials(o["token"], o["ingest_key"], o["admin_token"]),
            allowed_hosts=frozenset(o["allowed_host"]) or None,
            reaches=Reaches(o["allow_debug"], o["allow_profiling"]),
        )

    def replace(self, **changes: Any) -> Settings:
        """A copy with ``changes``, each a part (``queries=QueryLimits(…)``) or a field of one part (``fold_rest=0``,
        ``max_body=1024``, ``metrics_max_series=3``)."""
        tops = {f.name for f in dataclasses.fields(self)}
        parts: dict[str, Any] = {name: value for name, value in changes.items() if name in tops}
        for name, value in changes.items():
            if name in tops:
                continue
            owners = [p for p in _PARTS if name in {f.name for f in dataclasses.fields(getattr(self, p))}]
            if len(owners) != 1:
                raise TypeError(f"no part of the settings has one field named {name!r}")
            parts[owners[0]] = dataclasses.replace(parts.get(owners[0], getattr(self, owners[0])), **{name: value})
        return dataclasses.replace(self, **parts)


_PARTS = ("store", "writer", "http", "queries", "forwarding", "secrets", "reaches")


# ── readers of the options' text (ValueError says what is wrong) ─────────────────────────────────────────────────────


def age(text: str) -> str:
    """A retention's age, kept as given for the marker's words (``30d``, ``12h``, ``500ms``): more than none."""
    if units.duration_ns(text) <= 0:
        raise ValueError(f"{text!r} is not a duration such as 30d, 12h, 90m or 500ms: it keeps nothing")
    return text.strip()


def amount(text: str) -> str:
    """A retention's size, kept as given (``500MB``, ``50GB``): more than none."""
    if units.size_bytes(text) <= 0:
        raise ValueError(f"{text!r} is not a size such as 500MB or 50GB: it keeps nothing")
    return text.strip()


def memory_limit(text: str) -> str:
    """A size as DuckDB's memory_limit takes it (512MB, 2GB, 1.5GiB), kept as given."""
    try:
        units.size_bytes(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a memory size such as 512MB or 2GB") from None
    return text.strip()


def seconds(text: str) -> float:
    """A wait (``30``: seconds, ``500ms``, ``2m``): more than none."""
    value = units.duration_s(text, bare=units.S)
    if value <= 0:
        raise ValueError(f"{text!r} is no time to wait: give more than 0")
    return value


def body_size(text: str) -> int:
    """An ingest body's largest size (``16MiB``, or bytes)."""
    return units.size_bytes(text, bare=True)


def header(text: str) -> tuple[str, str]:
    """``NAME=VALUE``."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise ValueError(f"{text!r} is not NAME=VALUE")
    return name.strip(), value


# ── the table ──────────────────────────────────────────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Setting:
    """One option of `raysight server`, ``--name`` (a ``bool``: ``--name/--no-name``; ``repeat``: given any number
    of times): its help, its default (``shown`` in its stead where it is worked out at start or means none), its type
    (``int`` or ``float`` within ``bounds``; ``parse`` reads text with units, ValueError saying what is wrong), the
    environment variable that gives it, and what its value is called in the help (``metavar``)."""

    name: str
    help: str
    default: object = None
    kind: type = str
    parse: Callable[[str], object] | None = None
    env: str | None = None
    metavar: str | None = None
    bounds: tuple[int | None, int | None] = (None, None)
    repeat: bool = False
    shown: str | None = None

    @property
    def key(self) -> str:
        return self.name.replace("-", "_")

    def read(self, value: Any) -> Any:
        """The value of an option as given: text (each text given, where repeated) read by ``parse``; any other value
        (a default, a number click has read) as it is."""
        if self.repeat:
            return tuple(map(self._read_one, value))
        return self._read_one(value)

    def _read_one(self, value: Any) -> Any:
        return self.parse(value) if self.parse and isinstance(value, str) else value


_KEEP_LINES, _KEEP_SAMPLES = "keep every line", "keep every sample"
SERVER: tuple[Setting, ...] = (
    Setting("host", "Address to bind. Anything but loopback turns on the read token and the ingest key.", DEFAULT_HOST),
    Setting("port", "Port to listen on.", DEFAULT_PORT, int, bounds=(0, 65535)),
    Setting(
        "data-dir",
        "Where the store lives.",
        kind=Path,
        env=ENV_DATA,
        metavar="PATH",
        shown="$XDG_DATA_HOME/raysight, else ~/.local/share/raysight",
    ),
    Setting("max-body", "Largest ingest body (16MiB, or bytes).", Limits.max_body, parse=body_size, metavar="SIZE"),
    Setting(
        "max-events",
        "Most events in one ingest body (Ray sends up to RAY_DASHBOARD_AGGREGATOR_AGENT_MAX_EVENT_SEND_BATCH_SIZE, "
        "1,000 by default); more is refused with 413.",
        Limits.max_events,
        int,
        bounds=(1, None),
    ),
    Setting(
        "memory-limit",
        "The store's (DuckDB's) memory limit, e.g. 512MB or 2GB.",
        StoreSettings.memory_limit,
        parse=memory_limit,
        metavar="SIZE",
    ),
    Setting("token", "Read token (when bound beyond loopback).", env=ENV_TOKEN),
    Setting("ingest-key", "Write-only ingest key (idem).", env=ENV_INGEST_KEY),
    Setting("admin-token", "Token for deleting sessions and reindexing (idem).", env=ENV_ADMIN_TOKEN),
    Setting(
        "allow-debug",
        "Let `raysight debug attach` drive paused tasks (it runs code in them): it then needs the admin token, on "
        "loopback too, and each attach is recorded.",
        False,
        bool,
    ),
    Setting(
        "allow-profiling",
        "Let `raysight profile stack|cpu|memory` have a node's agent run py-spy or memray on a live Ray process (they "
        "read its memory): each then needs the admin token, on loopback too, and each request is recorded.",
        False,
        bool,
    ),
    Setting(
        "allowed-host",
        "On loopback, serve this Host name too (a proxy's), beside localhost, 127.0.0.1 and [::1]. Repeatable.",
        metavar="NAME",
        repeat=True,
    ),
    Setting(
        "header-timeout",
        "How long a client has to send a request's headers (seconds, or 500ms, 1m).",
        Limits.header_timeout_s,
        parse=seconds,
        metavar="TIME",
    ),
    Setting(
        "body-timeout",
        "How long a client has to send a request's body (seconds, or 500ms, 1m).",
        Limits.body_timeout_s,
        parse=seconds,
        metavar="TIME",
    ),
    Setting(
        "max-connections",
        "Connections held at once; more are answered 503 and closed.",
        Limits.max_connections,
        int,
        bounds=(1, None),
    ),
    Setting(
        "log-retention",
        "Drop log lines older than this (30d, 12h, 90m); a marker says what went.",
        parse=age,
        metavar="AGE",
        shown=_KEEP_LINES,
    ),
    Setting(
        "log-max-size",
        "Drop the oldest log lines past this much text (500MB, 50GB); idem.",
        parse=amount,
        metavar="SIZE",
        shown=_KEEP_LINES,
    ),
    Setting(
        "metrics-max-series",
        "Series a session may hold; a scrape's new series past it are refused, counted by `raysight doctor`.",
        StoreSettings.metrics_max_series,
        int,
        bounds=(1, None),
    ),
    Setting(
        "metrics-retention",
        "Drop metric samples older than this (15d, 12h); a marker says what went.",
        parse=age,
        metavar="AGE",
        shown=_KEEP_SAMPLES,
    ),
    Setting(
        "metrics-max-size",
        "Drop the oldest metric samples past this much storage (500MB, 20GB); idem.",
        parse=amount,
        metavar="SIZE",
        shown=_KEEP_SAMPLES,
    ),
    Setting(
        "metrics-downsample",
        "Metric samples older than RAW become one a minute, older than MINUTES one each 10 minutes; or off.",
        str(Downsampling()),
        parse=Downsampling.parse,
        metavar="RAW,MINUTES",
    ),
    Setting(
        "query-max-samples",
        "Samples one PromQL query may hold (those loaded, its expressions' points at each step, 128 for each series "
        "found), as Prometheus's --query.max-samples; more is refused (422).",
        QueryLimits.max_samples,
        int,
        bounds=(1, None),
    ),
    Setting(
        "query-timeout",
        "How long one PromQL query may run (seconds, or 2m), as Prometheus's --query.timeout; a longer one stops "
        "(503).",
        QueryLimits.timeout_s,
        parse=seconds,
        metavar="TIME",
    ),
    Setting(
        "query-max-concurrency",
        "PromQL queries evaluated at once, as Prometheus's --query.max-concurrency; the others wait their turn "
        "within their --query-timeout. Each may hold up to --query-max-samples.",
        QueryLimits.max_concurrency,
        int,
        bounds=(1, None),
    ),
    Setting(
        "traces-forward",
        "Send the spans received on to this OTLP/HTTP endpoint too (Jaeger, Tempo, a Collector…; /v1/traces is "
        "appended).",
        env=ENV_TRACES_FORWARD,
        metavar="URL",
    ),
    Setting(
        "traces-forward-header",
        "A header for --traces-forward (an API key, say); repeatable.",
        parse=header,
        metavar="NAME=VALUE",
        repeat=True,
    ),
    Setting(
        "traces-store",
        "Keep the spans received; --no-traces-store with --traces-forward only forwards them.",
        Forwarding.store,
        bool,
    ),
    Setting(
        "traces-keep",
        "Tail sampling: the fraction of complete traces kept whole; traces with a failed span, or as slow as "
        "--traces-keep-slow, are always kept.",
        TailSampling.keep,
        float,
        bounds=(0, 1),
    ),
    Setting(
        "traces-keep-slow",
        "With --traces-keep: always keep traces this long or longer (250ms, 1.5s, 2m, 1d).",
        parse=units.duration_ns,
        metavar="TIME",
    ),
)


@dataclass(frozen=True)
class Variable:
    """An environment variable raysight's clients read (or `raysight env` exports), and what it gives."""

    name: str
    help: str


CLIENT_ENVIRONMENT: tuple[Variable, ...] = (
    Variable(ENV_SERVER, f"The server the CLI's commands talk to [default http://{DEFAULT_HOST}:{DEFAULT_PORT}]."),
    Variable(ENV_TOKEN, "The read token the CLI sends (a server beyond loopback asks for it)."),
    Variable(ENV_ADMIN_TOKEN, "The admin token the CLI sends to delete sessions and reindex, and `debug attach`."),
    Variable(ENV_INGEST_KEY, "The ingest key `raysight run`, `env`, `agent`, `poll` and `traces import` send."),
    Variable(ENV_DATA, "The data dir of the server `raysight run` starts, and of `raysight server stop`."),
    Variable(ENV_METRICS_KEEP, "`raysight run` and `raysight agent`: send only the metrics this regex matches."),
    Variable(ENV_METRICS_DROP, "`raysight run` and `raysight agent`: send no metric this regex matches."),
    Variable(ENV_OTLP_ENDPOINT, "Where a traced Ray process sends its spans (/v1/traces is appended)."),
    Variable(ENV_TRACES_SAMPLE_RATIO, "The fraction of new traces a traced Ray process samples [default 1]."),
    Variable(ENV_PROFILE_HZ, "How often a Ray worker samples the task attempts it runs, a second; 0: never [20]."),
    Variable(ENV_TRACING, "0: a Ray worker raysight's hook reached makes no span, and samples its tasks alone."),
    Variable(
        ENV_POST_MORTEM_TIMEOUT,
        "Seconds a task that raised stays frozen for `raysight debug attach` where RAY_DEBUG_POST_MORTEM=1 [600].",
    ),
    Variable(ENV_CHAINED_ENV_HOOK, "The RAY_RUNTIME_ENV_HOOK raysight's hook calls first (set by raysight)."),
    Variable(ENV_CHAINED_SETUP_HOOK, "The worker_process_setup_hook raysight's calls after its own (set by raysight)."),
    Variable(ENV_RAY_SYSTEM_CONFIG, "`raysight env`'s --system-config for `ray start --head` (set by raysight)."),
)
