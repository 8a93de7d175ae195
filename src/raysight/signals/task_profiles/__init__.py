"""Task profiles: what each worker's in-process sampler (``instrument/task_profile.py``) folded of the task attempts
it ran, a batch at a time (``parse.py``, which declares their tables), kept per attempt and stack. The store's side
(``apply.py``, the read model ``profiles_query.py``) is loaded when first used."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from raysight import wire
from raysight.signals.signal import Accepted, Intake, Signal, forget_by_session
from raysight.signals.task_profiles import parse

if TYPE_CHECKING:
    from raysight.settings import WriterSettings
    from raysight.store.journal import Record
    from raysight.store.store import Store
    from raysight.store.tx import Tx


def applied(store: Store, records: Sequence[Record], parsed: None, folded: int) -> None:
    from raysight.signals.task_profiles.apply import apply_profiles

    apply_profiles(store, [record.body for record in records], journal_seq=folded)


def accept(body: bytes) -> Accepted:
    """A worker's batch (``POST /ingest/task-profiles``: JSON, gzipped or not), journalled as it came."""
    samples = len(parse.parse(body).samples)
    return Accepted(body, samples, {"stacks": samples})


def linger(settings: WriterSettings) -> float:
    """As spans do: each worker sends its samples every few seconds, each at its own moment."""
    return settings.spans_linger_s


def forgotten(store: Store, tx: Tx, session: str) -> None:
    """A session's samples and batches, and the stacks no sample is in any more."""
    forget_by_session((parse.TASK_SAMPLES, parse.PROFILE_BATCHES))(store, tx, session)
    tx.run("DELETE FROM profile_stacks WHERE stack_id NOT IN (SELECT DISTINCT stack_id FROM task_samples)")


SIGNAL = Signal(
    "task_profiles",
    parse.PROFILE_TABLES,
    apply=applied,
    linger=linger,
    forget=forgotten,
    intake=Intake(wire.TASK_PROFILES, accept, "the worker", "batch of task profiles"),
)
