"""A Serve application for `serve deploy` (tests/test_ray_clusters.py): Ray's dashboard starts its controller, proxy
and replica, which run none of the runtime-env hooks a driver's `ray.init` would; raysight reaches them only through
Serve's exporter variable (``RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH``), which `raysight start` set for the node."""

from __future__ import annotations

from typing import Any

from ray import serve


@serve.deployment(ray_actor_options={"num_cpus": 0})
class Deployed:
    def __call__(self, request: Any) -> str:
        return "deployed"


app = Deployed.bind()
