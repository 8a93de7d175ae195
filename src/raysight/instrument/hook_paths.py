"""The hook paths that connect Ray to raysight's instrumentation (no imports: the CLI reads them). raysight's own
environment variables are :mod:`raysight.settings`'s."""

RAY_ENV_HOOK = "RAY_RUNTIME_ENV_HOOK"
ENV_HOOK = "raysight.instrument.runtime_env_hook"
SETUP_HOOK = "raysight.instrument.worker_setup"
SETUP_HOOK_KEY = "worker_process_setup_hook"
