"""A poll of a live cluster's dashboard into the store, its drivers folded into the workers table as their events
would be."""

from __future__ import annotations

from typing import TYPE_CHECKING

from raysight.signals.polls.parse import CLUSTER_STATUS, KINDS, POLLED, POLLS, SERVE_DETAILS, Poll
from raysight.signals.ray_events.apply import upsert_patches
from raysight.signals.ray_events.parse import Key, Patch
from raysight.signals.ray_events.reconcile import reconcile
from raysight.store.tx import Tx

if TYPE_CHECKING:
    from raysight.store.store import Store

# A sampled resource polled since this poll: its rows in this poll are out of date
STALE = f"""SELECT DISTINCT resource FROM {POLLED.name}
    WHERE session = $1 AND list_contains($2, resource) AND last_ns > $3"""
# Each entity's newest row, its state's changes appended to its history
KEEP_ROWS = f"""INSERT INTO {POLLED.name}
    SELECT $1, resource, id, $2, $2, state, row, [{{'ts': $2, 'state': state}}] FROM staged_poll
    WHERE NOT list_contains($3, resource)
    ON CONFLICT DO UPDATE SET
        first_ns = least(polled.first_ns, excluded.first_ns),
        last_ns = greatest(polled.last_ns, excluded.last_ns),
        row = CASE WHEN excluded.last_ns >= polled.last_ns THEN excluded.row ELSE polled.row END,
        state = CASE WHEN excluded.last_ns >= polled.last_ns THEN excluded.state
                     ELSE polled.state END,
        history = CASE WHEN excluded.last_ns > polled.last_ns
                            AND excluded.state IS DISTINCT FROM polled.state
                       THEN list_append(polled.history, excluded.history[1])
                       ELSE polled.history END"""
# How each resource's poll went
KEEP_OUTCOMES = f"""INSERT INTO {POLLS.name}
    SELECT $1, r.resource, CASE WHEN r.ok THEN $2 END, CASE WHEN r.ok THEN coalesce(c.n, 0) END,
           r.error, CASE WHEN r.ok THEN NULL ELSE $2 END
    FROM (SELECT unnest($3::VARCHAR[]) AS resource, true AS ok, NULL::VARCHAR AS error
          UNION ALL SELECT unnest($4::VARCHAR[]), false, unnest($5::VARCHAR[])) r
    LEFT JOIN (SELECT resource, count(*) AS n FROM staged_poll GROUP BY resource) c USING (resource)
    ON CONFLICT DO UPDATE SET
        last_ok_ns = coalesce(greatest(polls.last_ok_ns, excluded.last_ok_ns), polls.last_ok_ns),
        rows = CASE WHEN excluded.last_ok_ns >= coalesce(polls.last_ok_ns, 0) THEN excluded.rows
                    ELSE polls.rows END,
        last_error = coalesce(excluded.last_error, polls.last_error),
        last_error_ns = coalesce(excluded.last_error_ns, polls.last_error_ns)"""

# Serve's state polled as the sample before it had it: that sample stands longer; else a new sample
SERVE_SAME = f"""UPDATE {SERVE_DETAILS.name} SET last_ns = greatest(last_ns, $3)
    WHERE session = $1 AND ns = (SELECT max(ns) FROM {SERVE_DETAILS.name} WHERE session = $1 AND ns <= $3)
      AND details::VARCHAR = $2::VARCHAR
    RETURNING ns"""


def record_poll(store: Store, poll: Poll) -> int:
    """Keep what a poll of a live cluster's dashboard found (``parse.py``), in one transaction: each entity's newest
    row, its state's changes appended to its history (a poll older than what is kept changes nothing), a sampled
    resource's rows replaced by the newest poll's; Serve's state when it changed; and how each resource's poll went.
    Returns the rows kept."""
    sampled = [r for r in poll.polled if r in KINDS and KINDS[r].sample]
    with store.transaction() as tx:
        stale = [row[0] for row in tx.run(STALE, [poll.session, sampled, poll.polled_ns]).fetchall()]
        tx.run(  # else only this poll's rows of it stand
            f"DELETE FROM {POLLED.name} WHERE session = $1 AND list_contains($2, resource)",
            [poll.session, [r for r in sampled if r not in stale]],
        )
        with tx.registered("staged_poll", poll.rows):
            tx.run(KEEP_ROWS, [poll.session, poll.polled_ns, stale])
            tx.run(
                KEEP_OUTCOMES,
                [poll.session, poll.polled_ns, poll.polled, list(poll.errors), list(poll.errors.values())],
            )
        if poll.cluster_status is not None:
            tx.run(
                f"INSERT OR REPLACE INTO {CLUSTER_STATUS.name} VALUES (?, ?, ?)",
                [poll.session, poll.polled_ns, poll.cluster_status],
            )
        if poll.serve is not None and not tx.run(SERVE_SAME, [poll.session, poll.serve, poll.polled_ns]).fetchall():
            tx.run(
                f"INSERT OR REPLACE INTO {SERVE_DETAILS.name} VALUES (?, ?, ?, ?)",
                [poll.session, poll.polled_ns, poll.polled_ns, poll.serve],
            )
        tx.run("INSERT INTO sessions (session) VALUES (?) ON CONFLICT DO NOTHING", [poll.session])
        if changed := _changed_drivers(tx, poll):  # workers, as their events would be (a driver outliving its
            upsert_patches(store, tx, changed)  # session is inferred dead)
            reconcile(tx.run, [poll.session])
    return poll.rows.num_rows


def _changed_drivers(tx: Tx, poll: Poll) -> list[tuple[str, Key, Patch]]:
    """The drivers of ``poll`` that would change what is kept (a driver lives once: alive, then dead). One polled
    again as it was changes nothing, and costs no re-derivation of its session."""
    ids = [key[1] for _, key, _ in poll.drivers]
    kept = {
        worker_id: (node_id, pid, {h["state"] for h in history or []})
        for worker_id, node_id, pid, history in tx.run(
            "SELECT worker_id, node_id, pid, history FROM workers WHERE session = ? AND list_contains(?, worker_id)",
            [poll.session, ids],
        ).fetchall()
    }

    def known(key: Key, patch: Patch) -> bool:
        node_id, pid, states = kept.get(key[1], (None, None, set()))
        return (node_id, pid) == (patch["node_id"], patch["pid"]) and states >= {
            h["state"] for h in patch["history"] or []
        }

    return [(table, key, patch) for table, key, patch in poll.drivers if not known(key, patch)]
