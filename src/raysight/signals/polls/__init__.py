"""Polls of a live cluster's dashboard (``parse.py``): each resource's newest rows and their states' history, the
cluster's status, and how each poll went; the drivers polled folded into the workers table. Written at once, not
journalled (``apply.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from raysight import wire
from raysight.signals.polls import parse
from raysight.signals.signal import Signal, WrittenIntake

if TYPE_CHECKING:
    from raysight.store.store import Store


def recorded(store: Store, poll: parse.Poll) -> int:
    from raysight.signals.polls.apply import record_poll  # (it imports the store, which imports the registry)

    return record_poll(store, poll)


SIGNAL = Signal(
    "polls",
    tuple(parse.POLL_TABLES),
    intake=WrittenIntake(
        wire.AGENT_RAY_STATE,
        parse.MAX_BODY,
        parse.parse,
        recorded,
        "poll",
        "the poll",
        answer="rows",
        rejected="bad_ray_state",
    ),
)
