"""Polls of a live cluster's dashboard (``parse.py``): each resource's newest rows and their states' history, the
cluster's status, and how each poll went; the drivers polled folded into the workers table. Written at once, not
journalled (``apply.py``)."""

from raysight.signals.polls.parse import POLL_TABLES
from raysight.signals.signal import Signal

SIGNAL = Signal("polls", tuple(POLL_TABLES))
