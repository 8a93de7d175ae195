"""What node agents see of their hosts' Ray processes (``agent/node_watch.py``): each raylet and GCS running or gone,
evidence for reconciliation when Ray's last events about them were lost. Written at once, not journalled."""

from raysight.signals.node_sightings.parse import NODE_EVIDENCE
from raysight.signals.signal import Signal

SIGNAL = Signal("node_sightings", (NODE_EVIDENCE,))
