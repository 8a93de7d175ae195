"""A worker's batch of task profiles (``wire.TaskProfiles``, what ``instrument/task_profile.py`` samples): checked,
and the tables the store keeps of them. Pure."""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from typing import Any

from raysight import wire
from raysight.errors import BadIngest
from raysight.ingest.fields import hex_id_field, int_field, json_dict, session_field, text_field
from raysight.tables import Table, columns

MAX_STACK = 32 * 1024  # characters of a collapsed stack
MAX_FRAMES = 129  # frames of one: the sampler keeps 128 (instrument/task_profile.py's MAX_DEPTH) and marks a cut
MAX_HZ = 1000.0  # (instrument/task_profile.py's too)
_BATCH_ID = re.compile(r"[0-9A-Za-z_-]{1,64}")
INT32_MAX = 2**31 - 1

# Each stack once, by its ID (``stack_id``: 16 hex digits of its BLAKE2b), however many attempts were sampled in it
PROFILE_STACKS = Table("profile_stacks", columns(stack_id="VARCHAR", stack="VARCHAR"), key=("stack_id",))
# A task attempt's samples by stack, summed over the batches they came in: how often it was sampled in the stack, how
# often on CPU, and the seconds these stand for (samples over the sampler's rate)
TASK_SAMPLES = Table(
    "task_samples",
    columns(
        session="VARCHAR",
        task_id="VARCHAR",
        attempt="INTEGER",
        stack_id="VARCHAR",
        samples="BIGINT",
        on_cpu="BIGINT",
        wall_s="DOUBLE",
        cpu_s="DOUBLE",
    ),
    key=("session", "task_id", "attempt", "stack_id"),
)
# Each batch kept (once: a sender that resends one it was not answered for adds nothing), from which worker
PROFILE_BATCHES = Table(
    "profile_batches",
    columns(
        batch_id="VARCHAR",
        session="VARCHAR",
        node_id="VARCHAR",
        worker_id="VARCHAR",
        pid="BIGINT",
        hz="DOUBLE",
        samples="BIGINT",
        dropped="BIGINT",
        received_ns="BIGINT",
    ),
    key=("batch_id",),
)
PROFILE_TABLES = (PROFILE_STACKS, TASK_SAMPLES, PROFILE_BATCHES)


@dataclass(frozen=True)
class Batch:
    """A batch checked: its row of PROFILE_BATCHES (less received_ns) and its samples, one tuple a stack of an
    attempt: (task_id, attempt, stack_id, stack, samples, on_cpu)."""

    batch: tuple[str, str, str | None, str | None, int, float, int, int]
    samples: list[tuple[str, int, str, str, int, int]]


def stack_id(stack: str) -> str:
    return hashlib.blake2b(stack.encode(), digest_size=8).hexdigest()


def _count(value: Any, what: str, high: int = INT32_MAX, low: int = 0) -> int:
    count = int_field(value, what, low=low, high=high)
    assert count is not None
    return count


def parse(body: bytes) -> Batch:
    """A batch's fields and samples (a sample count a stack of at least one, never fewer on CPU than sampled);
    BadIngest says what is wrong."""
    found = wire.shaped(json_dict(body, '{"batch_id", "session", "hz", "attempts": [...]}'), wire.TaskProfiles)
    batch_id = found["batch_id"]
    if not (isinstance(batch_id, str) and _BATCH_ID.fullmatch(batch_id)):
        raise BadIngest("batch_id must be 1 to 64 letters, digits, - or _")
    session = session_field(found["session"], "session")
    hz = found["hz"]
    if not (isinstance(hz, int | float) and not isinstance(hz, bool) and 0 < hz <= MAX_HZ and math.isfinite(hz)):
        raise BadIngest(f"hz must be a number of samples a second, above 0 and at most {MAX_HZ:g}")
    pid = _count(found["pid"], "pid", high=2**63 - 1)
    dropped = _count(found["dropped"] or 0, "dropped", high=2**63 - 1)
    attempts = found["attempts"]
    if not isinstance(attempts, list):
        raise BadIngest("attempts must be a list of {task_id, attempt, stacks}")
    samples: list[tuple[str, int, str, str, int, int]] = []
    for i, sent in enumerate(attempts):
        if not isinstance(sent, dict):
            raise BadIngest(f"attempts[{i}] must be an object {{task_id, attempt, stacks}}")
        attempt = wire.shaped(sent, wire.ProfiledAttempt)
        task_id = hex_id_field(attempt["task_id"], f"attempts[{i}].task_id")
        assert task_id is not None
        number = _count(attempt["attempt"], f"attempts[{i}].attempt")
        stacks = attempt["stacks"]
        if not isinstance(stacks, list):
            raise BadIngest(f"attempts[{i}].stacks must be a list of [stack, samples, on_cpu]")
        for j, row in enumerate(stacks):
            what = f"attempts[{i}].stacks[{j}]"
            if not (isinstance(row, list) and len(row) == 3):
                raise BadIngest(f"{what} must be [stack, samples, on_cpu]")
            stack = text_field(row[0], f"{what}'s stack", limit=MAX_STACK)
            assert stack is not None
            if stack.count(";") >= MAX_FRAMES:
                raise BadIngest(f"{what}'s stack must be of at most {MAX_FRAMES} frames")
            count = _count(row[1], f"{what}'s samples", low=1)
            on_cpu = _count(row[2], f"{what}'s samples on CPU", high=count)
            samples.append((task_id, number, stack_id(stack), stack, count, on_cpu))
    node_id = hex_id_field(found["node_id"], "node_id", optional=True)
    worker_id = hex_id_field(found["worker_id"], "worker_id", optional=True)
    total = sum(row[4] for row in samples)
    return Batch((batch_id, session, node_id, worker_id, pid, float(hz), total, dropped), samples)
