"""The environment variables and hook paths that connect Ray to raysight's instrumentation (no imports: the CLI
reads them)."""

ENDPOINT_ENV = "RAYSIGHT_OTLP_ENDPOINT"  # OTLP/HTTP base URL; /v1/traces is appended
SAMPLE_RATIO_ENV = "RAYSIGHT_TRACES_SAMPLE_RATIO"  # of new traces (a parent's decision is followed)
CHAINED_ENV_HOOK = "RAYSIGHT_CHAINED_ENV_HOOK"  # the user's RAY_RUNTIME_ENV_HOOK, called first
CHAINED_SETUP_HOOK = "RAYSIGHT_CHAINED_SETUP_HOOK"  # the user's worker_process_setup_hook (a module path), called after
RAY_ENV_HOOK = "RAY_RUNTIME_ENV_HOOK"
ENV_HOOK = "raysight.instrument.runtime_env_hook"
SETUP_HOOK = "raysight.instrument.worker_setup"
SETUP_HOOK_KEY = "worker_process_setup_hook"
