"""Polls of a live cluster's dashboard (``ingest/ray_state.py``): each resource's newest rows and their states'
history, the cluster's status, and how each poll went. Written at once, not journalled."""

from raysight.ingest.ray_state import POLL_TABLES
from raysight.signals.signal import Signal

SIGNAL = Signal("polls", tuple(POLL_TABLES))
