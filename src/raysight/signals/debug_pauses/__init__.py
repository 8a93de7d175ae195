"""Debugger pauses: each pause a worker made (a breakpoint, a post-mortem freeze) and each client that drove it, kept
after the cluster is gone. Written at once by the debugger's relay (``server/debug_routes.py``), not journalled."""

from raysight.signals.debug_pauses import apply, parse
from raysight.signals.signal import Signal

SIGNAL = Signal("debug_pauses", (parse.DEBUG_PAUSES, parse.DEBUG_ATTACHES), reopened=apply.server_stopped)
