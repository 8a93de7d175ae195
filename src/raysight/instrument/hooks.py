"""The hooks and set-up behind :mod:`raysight.instrument` (which see)."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, urlencode, urlsplit

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

from raysight import wire
from raysight.instrument import debugger, ray_tracing, task_profile
from raysight.instrument.export import Counts, SpanQueue
from raysight.instrument.hook_paths import ENV_HOOK, RAY_ENV_HOOK, RAY_POST_MORTEM, SETUP_HOOK, SETUP_HOOK_KEY
from raysight.instrument.ray_ids import RayIds
from raysight.settings import (
    ENV_CHAINED_ENV_HOOK,
    ENV_CHAINED_SETUP_HOOK,
    ENV_OTLP_ENDPOINT,
    ENV_POST_MORTEM_TIMEOUT,
    ENV_PROFILE_HZ,
    ENV_TRACES_SAMPLE_RATIO,
    ENV_TRACING,
    default_server,
)

log = logging.getLogger("raysight.instrument")
_lock = threading.Lock()
_queue: SpanQueue | None = None
_own: TracerProvider | None = None  # the provider raysight set, where the process had none


def instrument(endpoint: str | None = None, propagate: bool = True) -> None:
    """Send this process's spans to ``endpoint`` (default ``$RAYSIGHT_OTLP_ENDPOINT``, else the raysight server) and
    trace its Ray calls, and sample the task attempts it runs (unless ``$RAYSIGHT_TRACING`` or
    ``$RAYSIGHT_PROFILE_HZ`` is 0); idempotent. ``propagate`` False: carry no trace context to the workers."""
    global _queue
    tracing = os.environ.get(ENV_TRACING) != "0"
    with _lock:
        if _queue is None:
            url = (endpoint or os.environ.get(ENV_OTLP_ENDPOINT) or default_server()).rstrip("/") + wire.OTLP_TRACES
            if tracing:
                provider = _provider()
                _queue = SpanQueue(url, _resource(provider))
                provider.add_span_processor(RayIds())
                provider.add_span_processor(_queue)
            else:  # (the connection the samples ride on)
                _queue = SpanQueue(url, ray_tracing.process_attributes)
            if (hz := _profile_hz()) > 0:
                sampler = task_profile.Sampler(hz, ray_tracing.__file__, _ray_package(), nudge=_queue.nudge)
                _queue.ride(profiles_path(url), task_profile.Batches(sampler, ray_tracing.process_attributes))
                ray_tracing.profile_with(sampler)
        if tracing:
            ray_tracing.instrument(_queue.add, _sample_ratio(), propagate)
        else:
            ray_tracing.receive()


def _resource(provider: TracerProvider) -> Callable[[], dict[str, Any]]:
    """The attributes of this process's task spans: its SDK resource's (service.name …) and its Ray IDs."""
    return lambda: {**provider.resource.attributes, **ray_tracing.process_attributes()}


def _ray_package() -> str:
    import ray

    return os.path.dirname(ray.__file__) + os.sep


def _profile_hz() -> float:
    return _env_number(ENV_PROFILE_HZ, task_profile.DEFAULT_HZ, task_profile.MAX_HZ)


def _env_number(name: str, default: float, high: float) -> float:
    """``$name`` as a number from 0 to ``high``; ``default`` where it is unset or no number."""
    try:
        return min(max(float(os.environ.get(name, default)), 0.0), high)
    except ValueError:
        return default


def profiles_path(traces_url: str) -> str:
    """Where task profiles go on the server of ``traces_url`` (its OTLP traces endpoint), with the ingest key that
    endpoint carries (``/ingest/otlp/{key}/v1/traces``)."""
    base = urlsplit(traces_url).path.removesuffix(wire.OTLP_TRACES)
    prefix, keyed, key = base.rpartition(wire.OTLP_KEYED.split("{")[0].rstrip("/") + "/")
    if keyed and key and "/" not in key:
        return prefix + wire.TASK_PROFILES + "?" + urlencode(wire.key_params(unquote(key)))
    return base + wire.TASK_PROFILES


def _sample_ratio() -> float:
    return _env_number(ENV_TRACES_SAMPLE_RATIO, 1.0, 1.0)


def uninstrument() -> None:
    """Stop tracing Ray calls (spans already made are still sent)."""
    ray_tracing.uninstrument()


def counts() -> Counts | None:
    """What this process's spans came to: exported, dropped because the queue was full, or because export failed."""
    return _queue.counts if _queue is not None else None


def _provider() -> TracerProvider:
    """The process's SDK tracer provider: the user's own, else a new one (sampling ``$RAYSIGHT_TRACES_SAMPLE_RATIO``
    of new traces, and whatever a parent decided), whose resource holds the process's Ray IDs where it is connected
    to Ray already (a worker: a driver learns them later)."""
    global _own
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        return current
    provider = TracerProvider(
        sampler=ParentBased(TraceIdRatioBased(_sample_ratio())),
        resource=Resource.create({"service.name": "ray", **ray_tracing.process_attributes()}),
    )
    trace.set_tracer_provider(provider)
    _own = provider
    return provider


def init(endpoint: str | None = None) -> None:
    """Trace this driver. Called before ``ray.init``, the job's workers are traced too (as `raysight run` does);
    after it, only where the job's runtime env already names :func:`worker_setup`."""
    import ray

    ray_tracing.set_base(os.environ.get("TRACEPARENT"))
    if ray.is_initialized():
        traced_workers = _job_setup_hook() == SETUP_HOOK
        if not traced_workers:
            log.warning(
                "raysight: ray.init ran before raysight.instrument.init(): the workers are not traced (call it "
                "first, or pass runtime_env={'worker_process_setup_hook': '%s'})",
                SETUP_HOOK,
            )
        instrument(endpoint, propagate=traced_workers)
        return
    if endpoint:
        os.environ[ENV_OTLP_ENDPOINT] = endpoint
    if os.environ.get(RAY_ENV_HOOK) not in (None, "", ENV_HOOK):
        os.environ[ENV_CHAINED_ENV_HOOK] = os.environ[RAY_ENV_HOOK]
    os.environ[RAY_ENV_HOOK] = ENV_HOOK
    if (uv := uv_run_skips_hooks()) is not None:
        log.warning("raysight: %s", uv)
    instrument(endpoint)


def runtime_env_hook(runtime_env: dict[str, Any] | None) -> dict[str, Any]:
    """``RAY_RUNTIME_ENV_HOOK``: the job's runtime env with :func:`worker_setup` as its setup hook (chaining the one it
    had) and raysight's endpoint; this driver traced."""
    if chained := os.environ.get(ENV_CHAINED_ENV_HOOK):
        runtime_env = _load(chained)(runtime_env)
    runtime_env = dict(runtime_env or {})
    env_vars = dict(runtime_env.get("env_vars") or {})
    for name in (ENV_OTLP_ENDPOINT, ENV_TRACING, ENV_PROFILE_HZ, RAY_POST_MORTEM, ENV_POST_MORTEM_TIMEOUT):
        if value := os.environ.get(name):
            env_vars.setdefault(name, value)
    user_hook = runtime_env.get(SETUP_HOOK_KEY)
    if user_hook is None or user_hook == SETUP_HOOK:
        runtime_env[SETUP_HOOK_KEY] = SETUP_HOOK
    elif isinstance(user_hook, str):
        env_vars[ENV_CHAINED_SETUP_HOOK] = user_hook
        runtime_env[SETUP_HOOK_KEY] = SETUP_HOOK
    else:
        runtime_env[SETUP_HOOK_KEY] = _chained_setup(user_hook)
    if env_vars:
        runtime_env["env_vars"] = env_vars
    ray_tracing.set_base(os.environ.get("TRACEPARENT"))
    try:
        instrument()
    except Exception:  # noqa: BLE001 (the driver runs untraced rather than not at all)
        log.warning("raysight: could not trace this driver", exc_info=True)
    return runtime_env


def worker_setup() -> None:
    """The job's ``worker_process_setup_hook``: trace this worker, pause its breakpoints through raysight
    (``debugger.py``), then run the user's own hook."""
    try:
        instrument()
    except Exception:  # noqa: BLE001
        log.warning("raysight: could not trace this worker", exc_info=True)
    try:
        debugger.install()
    except Exception:  # noqa: BLE001 (Ray's own debugger stays)
        log.warning("raysight: could not set this worker's breakpoint hook", exc_info=True)
    if chained := os.environ.get(ENV_CHAINED_SETUP_HOOK):
        _load(chained)()


def _chained_setup(user_hook: Callable[[], Any]) -> Callable[[], Any]:
    def setup() -> Any:
        worker_setup()
        return user_hook()

    return setup


def serve_span_processors() -> list[SpanProcessor]:
    """Ray Serve's ``RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH`` (what `raysight run` and `raysight env` set), called
    in each proxy and replica before Serve sets its tracer provider: no processor, for raysight's provider is the
    process's already (set by :func:`worker_setup`, else here: an application `serve deploy` started runs no setup
    hook, and then what the process submits carries no trace context, which its job's workers would not take
    away). Serve's own provider is refused, so its spans are made by raysight's, sent once, new traces sampled at
    Serve's ratio (``RAY_SERVE_TRACING_SAMPLING_RATIO``) where the provider is raysight's own."""
    try:
        if _queue is None:
            instrument(propagate=False)
        if _own is not None and trace.get_tracer_provider() is _own:
            from ray.serve._private.constants import RAY_SERVE_TRACING_SAMPLING_RATIO

            _own.sampler = ParentBased(TraceIdRatioBased(RAY_SERVE_TRACING_SAMPLING_RATIO))
        logging.getLogger("opentelemetry.trace").addFilter(_not_overriding)
        # what the actor's constructor starts from here on (a proxy's HTTP server, which handles every request) runs
        # in no span: each request a trace of its own, not a child of the constructor's task span
        otel_context.attach(otel_context.Context())
    except Exception:  # noqa: BLE001 (Serve runs untraced rather than not at all)
        log.warning("raysight: could not trace this Serve process", exc_info=True)
    return []


def _not_overriding(record: logging.LogRecord) -> bool:
    """Not OpenTelemetry's warning that Serve's provider was refused (as :func:`serve_span_processors` meant)."""
    return record.getMessage() != "Overriding of current TracerProvider is not allowed"


def tracing_startup_hook() -> None:
    """For ``ray start --tracing-startup-hook=raysight.instrument:tracing_startup_hook``: Ray's own wrappers make the
    spans, raysight sends them."""
    instrument(propagate=False)
    ray_tracing.uninstrument()


def _load(path: str) -> Callable[..., Any]:
    from ray._common.utils import load_class

    fn: Callable[..., Any] = load_class(path)
    return fn


def _job_setup_hook() -> str | None:
    """The setup hook the connected job's workers run, when it is a module path."""
    import ray
    from ray._private import ray_constants

    env = ray.get_runtime_context().runtime_env or {}
    value = (env.get("env_vars") or {}).get(ray_constants.WORKER_PROCESS_SETUP_HOOK_ENV_VAR)
    return value if isinstance(value, str) else None


def uv_run_skips_hooks() -> str | None:
    """Why Ray will not call ``RAY_RUNTIME_ENV_HOOK`` in this driver (it runs under ``uv run``), or None."""
    from ray._private import ray_constants

    if not ray_constants.RAY_ENABLE_UV_RUN_RUNTIME_ENV:
        return None
    from ray._private.runtime_env.uv_runtime_env_hook import _get_uv_run_cmdline

    if not _get_uv_run_cmdline():
        return None
    return (
        "this driver runs under `uv run`, where Ray ignores RAY_RUNTIME_ENV_HOOK: its workers are not traced. Set "
        f"RAY_ENABLE_UV_RUN_RUNTIME_ENV=0, or pass runtime_env={{'{SETUP_HOOK_KEY}': '{SETUP_HOOK}'}} to ray.init"
    )
