"""The hook paths that connect Ray to raysight's instrumentation (no imports: the CLI reads them). raysight's own
environment variables are :mod:`raysight.settings`'s."""

RAY_ENV_HOOK = "RAY_RUNTIME_ENV_HOOK"
ENV_HOOK = "raysight.instrument.runtime_env_hook"
SETUP_HOOK = "raysight.instrument.worker_setup"
SETUP_HOOK_KEY = "worker_process_setup_hook"
# Ray Serve's tracing: the function (of no arguments, returning span processors) each proxy and replica calls, and
# the share of new traces sampled (Serve's default: 0.01)
RAY_SERVE_EXPORTER = "RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH"
RAY_SERVE_SAMPLING = "RAY_SERVE_TRACING_SAMPLING_RATIO"
SERVE_EXPORTER = "raysight.instrument.serve_span_processors"
# Ray's switch that freezes a task that raises (``ray.util.pdb._post_mortem``, which raysight's worker hook answers)
RAY_POST_MORTEM = "RAY_DEBUG_POST_MORTEM"
