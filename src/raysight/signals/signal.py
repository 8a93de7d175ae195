"""What a signal declares: its name (the kind of its journal records), its tables, and what the writer and the store do
with it. One :class:`Signal` a package of ``signals/``, listed once in :data:`raysight.signals.SIGNALS`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from raysight.tables import FoldedTable, Table

if TYPE_CHECKING:
    from raysight.settings import WriterSettings
    from raysight.store.journal import Record
    from raysight.store.store import Store
    from raysight.store.tx import Tx

# A group of the signal's journalled records into the store, in one transaction that also records the journal record
# given as folded (``store.folding``: the last before which none is left unfolded, which the writer works out, since
# the groups of different signals fold out of the journal's order); what ``prepare`` made of the same group
# beforehand, if it ran (else None)
Apply = Callable[["Store", Sequence["Record"], Any, int], Any]


def fold_linger(settings: WriterSettings) -> float:
    return settings.fold_linger_s


Forget = Callable[["Store", "Tx", str], None]  # what deleting a session deletes of a signal


def forget_by_session(tables: Sequence[Table | FoldedTable]) -> Forget:
    """What deleting a session does to ``tables`` by default: each one's rows of the session, where it has them."""
    keyed = [table.name for table in tables if "session" in table.names]

    def forget(store: Store, tx: Tx, session: str) -> None:
        for name in keyed:
            tx.run(f"DELETE FROM {name} WHERE session = ?", [session])

    return forget


@dataclass(frozen=True)
class Upkeep:
    """A pass the writer makes over a signal's rows between groups, every minute or so (a retention, a
    downsampling, a sampling), where the settings ask for it."""

    name: str  # as the server's log names it ("log retention")
    run: Callable[
        [Store, WriterSettings], str | None
    ]  # the pass, if asked for; what it did, for the log (None: naught)


@dataclass(frozen=True)
class Accepted:
    """What a signal's intake makes of a body: what is journalled, how many items it holds (the writer's groups are
    bounded by them), and the acknowledgement's fields beside ``ok``."""

    body: bytes
    items: int
    answer: dict[str, Any]


@dataclass(frozen=True)
class Intake:
    """How a signal comes in over HTTP (a route of its own, the ingest key's): each body read within the server's
    bounds, inflated, parsed off the event loop, journalled, then acknowledged."""

    path: str  # its route's template (wire's)
    parse: Callable[[bytes], Accepted]  # pure; BadIngest says what is wrong (a 400, counted as bad_<signal>)
    sender: str  # who sends it, as an answer names them ("the agent will resend")
    what: str  # what a body is, as a refusal names it ("batch of logs")


@dataclass(frozen=True)
class WrittenIntake:
    """How a signal not journalled comes in over HTTP (a route of its own, the ingest key's): each body read whole
    within its limit, parsed off the event loop, written on the writer's fold thread (in order with the groups), then
    acknowledged once committed; a write that cannot be done within the ingest deadline is a 503 (retry)."""

    path: str  # its route's template (wire's)
    limit: int  # bytes of a body (sent as it is: not inflated)
    parse: Callable[[bytes], Any]  # pure; BadIngest says what is wrong (a 400), TooMany that it holds too much (413)
    write: Callable[[Store, Any], Any]  # the parsed body into the store; harmless twice (a sender retries)
    what: str  # what a body is, as a refusal names it ("bad poll: …")
    written: str  # what is written, as an answer names it ("could not record the poll")
    answer: str | None = None  # the acknowledgement's field beside ``ok`` that holds what ``write`` returned
    rejected: str | None = None  # what a bad body counts as in raysight_ingest_rejected (None: not counted)
    # ``write`` takes the parsed bodies that wait for the fold thread together, a list, and returns a result each
    together: bool = False


@dataclass(frozen=True)
class Signal:
    """One kind of what raysight is sent, and what the writer and the store do with it."""

    name: str  # the kind of its journal records (and of their groups: a group folds one kind)
    tables: tuple[Table | FoldedTable, ...]  # made by the store, in this order
    apply: Apply | None = None  # None: not journalled (written at once through the writer's calls)
    prepare: Callable[[Store, Sequence[Record]], Any] | None = None  # a group parsed ahead, on another connection
    linger: Callable[[WriterSettings], float] = fold_linger  # how long a group waits for more of its kind
    # What deleting a session deletes of the signal (None: its tables' rows of the session); the store's own tables,
    # `sessions` among them, go after every signal's
    forget: Forget | None = None
    upkeep: tuple[Upkeep, ...] = ()
    intake: Intake | WrittenIntake | None = None  # its ingest route, where it has one of the common kinds
    # What rebuilds its folds from what it kept raw, when an upgrade drops them (schema.REFOLD_BELOW); how many it read
    refold: Callable[[Store], int] | None = None
    # What opening the store does to its rows, in a transaction of its own: what a server that stopped left unfinished
    reopened: Callable[[Tx], None] | None = None

    def forget_session(self, store: Store, tx: Tx, session: str) -> None:
        (self.forget or forget_by_session(self.tables))(store, tx, session)
