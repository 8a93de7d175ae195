"""The exits of the drivers `raysight run` started (or joined), as it saw them: evidence of how a job ended when Ray's
last events about it were lost. Written at once, not journalled."""

from raysight import wire
from raysight.signals.run_exits import parse
from raysight.signals.run_exits.apply import forget, write
from raysight.signals.signal import Signal, WrittenIntake

SIGNAL = Signal(
    "run_exits",
    (parse.RUN_EXITS,),
    forget=forget,
    intake=WrittenIntake(wire.AGENT_RUN_EXIT, parse.MAX_BODY, parse.parse, write, "run exit", "the run exit"),
)
