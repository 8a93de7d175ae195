"""raysight's instrumentation: what runs inside Ray's drivers and workers. It imports neither the server nor the store,
never raises into or blocks the code it traces, and sends its spans over OTLP/HTTP to raysight (or any OTLP
endpoint: ``RAYSIGHT_OTLP_ENDPOINT``, to which ``/v1/traces`` is appended).

How it gets there:

- ``RAY_RUNTIME_ENV_HOOK=raysight.instrument.runtime_env_hook`` (what `raysight run` and `raysight env` set): Ray
  calls it in each driver's ``ray.init``; it traces the driver and adds :func:`worker_setup` as the job's
  ``worker_process_setup_hook``, chaining the hooks that were there (a job has one setup hook; an environment hook
  set before raysight's is moved to ``RAYSIGHT_CHAINED_ENV_HOOK``). Ray skips environment hooks under ``uv run``.
- :func:`init` in a driver, before or after ``ray.init``, for programs not started by `raysight run`.
- ``RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH=raysight.instrument.serve_span_processors`` (also set by both): Ray
  Serve calls it in each proxy and replica, whose spans (proxy → router → replica, with Serve's ``request_id``)
  raysight's provider then sends, with the process's task spans; it traces the applications `serve deploy` starts,
  which no runtime-env hook reaches.
- :func:`tracing_startup_hook` for Ray's own ``--tracing-startup-hook``: Ray's wrappers then make the spans (at their
  cost) and raysight only sends them, propagating nothing itself.

A driver started inside someone else's trace (``TRACEPARENT`` in its environment) continues it.
"""

from __future__ import annotations

from typing import Any

PUBLIC = (
    "init",
    "instrument",
    "uninstrument",
    "counts",
    "worker_setup",
    "runtime_env_hook",
    "serve_span_processors",
    "tracing_startup_hook",
)


def __getattr__(name: str) -> Any:
    """The public functions, imported on first use: the CLI reads this package's settings without OpenTelemetry."""
    if name in PUBLIC:
        from raysight.instrument import hooks

        return getattr(hooks, name)
    raise AttributeError(f"module 'raysight.instrument' has no attribute {name!r}")
