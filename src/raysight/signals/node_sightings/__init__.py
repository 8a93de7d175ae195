"""What node agents see of their hosts' Ray processes (``agent/node_watch.py``): each raylet and GCS running or gone,
evidence for reconciliation when Ray's last events about them were lost. Written at once, not journalled."""

from raysight import wire
from raysight.signals.node_sightings import parse
from raysight.signals.node_sightings.apply import write
from raysight.signals.signal import Signal, WrittenIntake

SIGNAL = Signal(
    "node_sightings",
    (parse.NODE_EVIDENCE,),
    intake=WrittenIntake(
        wire.AGENT_NODE_LIFE,
        parse.MAX_BODY,
        parse.parse,
        write,
        "node sightings",
        "the node sightings",
        answer="changed",
        rejected="bad_node_life",
    ),
)
