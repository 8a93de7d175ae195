"""Profiles of live processes: each py-spy dump or record and memray capture a user asked of a live Ray process, run
by the agent of its node, who asked, and what came back; and the memray captures Serve's actors write of themselves
(``RAY_SERVE_ENABLE_MEMORY_PROFILING=1``), which agents ship: all kept after the cluster is gone. Written at once by
``server/capture_routes.py`` and ``server/serve_capture_routes.py`` (not journalled); every request is recorded,
refused by its agent or not."""

from raysight.signals.profile_captures import apply, parse
from raysight.signals.signal import Signal

SIGNAL = Signal(
    "profile_captures", (parse.PROFILE_CAPTURES, parse.PROFILE_CAPTURE_FILES), reopened=apply.server_stopped
)
