"""On-demand profiles: each py-spy dump or record and memray capture a user asked of a live Ray process, run by the
agent of its node, who asked, and what came back, kept after the cluster is gone. Written at once by
``server/capture_routes.py`` (not journalled); every request is recorded, refused by its agent or not."""

from raysight.signals.profile_captures import apply, parse
from raysight.signals.signal import Signal

SIGNAL = Signal("profile_captures", (parse.PROFILE_CAPTURES,), reopened=apply.server_stopped)
