"""The exits of the drivers `raysight run` started (or joined), as it saw them: evidence of how a job ended when Ray's
last events about it were lost. Written at once, not journalled."""

from raysight.signals.run_exits.apply import forget
from raysight.signals.run_exits.parse import RUN_EXITS
from raysight.signals.signal import Signal

SIGNAL = Signal("run_exits", (RUN_EXITS,), forget=forget)
