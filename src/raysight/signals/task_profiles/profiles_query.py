"""The read model of task profiles: one profile, the samples of the attempts a query names (a task's, or every
attempt of a function, an actor or a job, merged) summed by stack."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from raysight.errors import BadQuery

ACTOR_ID_HEX, JOB_ID_HEX = 32, 8  # the hex digits of Ray's actor and job IDs, which end a task's ID


@dataclass(frozen=True)
class ProfileQuery:
    """Which attempts: a task's (one attempt of it, or all), or every attempt of a function (its name as Ray lists
    it, ``f`` or ``Class.method``, or its module-qualified one), an actor's tasks, or a job's; ``cpu_only``: the
    samples on CPU alone."""

    session: str | None = None
    task_id: str | None = None
    attempt: int | None = None
    function: str | None = None
    actor_id: str | None = None
    job_id: str | None = None
    cpu_only: bool = False

    def __post_init__(self) -> None:
        named = [n for n in ("task_id", "function", "actor_id", "job_id") if getattr(self, n) is not None]
        if len(named) != 1:
            raise BadQuery("name one of task, function, actor or job")
        if self.attempt is not None and self.task_id is None:
            raise BadQuery("attempt is a task's: name the task too")


def task_session(con: Any, task_id: str) -> str | None:
    """The newest session with samples of the task."""
    found = con.execute(
        """SELECT t.session FROM task_samples t JOIN sessions s USING (session) WHERE t.task_id = ?
           ORDER BY s.first_ns DESC NULLS LAST LIMIT 1""",
        [task_id],
    ).fetchall()
    return found[0][0] if found else None


def profile(con: Any, query: ProfileQuery) -> dict[str, Any]:
    """The stacks of the attempts ``query`` names, hottest first, each ``[stack, samples, on_cpu]``; how many
    attempts they are of, and the samples and seconds they stand for (wall clock, on CPU): none where none was
    sampled."""
    which, params = _which(query)
    rows = con.execute(
        f"""WITH picked AS MATERIALIZED (SELECT * FROM task_samples t WHERE t.session = $session AND {which})
            SELECT p.stack, sum(samples)::BIGINT AS samples, sum(on_cpu)::BIGINT AS on_cpu, sum(wall_s), sum(cpu_s),
                   (SELECT count(DISTINCT (task_id, attempt)) FROM picked)
            FROM picked JOIN profile_stacks p USING (stack_id)
            GROUP BY p.stack
            ORDER BY {"on_cpu" if query.cpu_only else "samples"} DESC, p.stack""",
        params,
    ).fetchall()
    stacks = [[stack, samples, on_cpu] for stack, samples, on_cpu, *_ in rows if on_cpu or not query.cpu_only]
    return {
        "session": query.session,
        "cpu_only": query.cpu_only,
        "attempts": rows[0][5] if rows else 0,
        "samples": sum(row[1] for row in rows),
        "on_cpu": sum(row[2] for row in rows),
        "wall_s": round(sum(row[3] for row in rows), 3),
        "cpu_s": round(sum(row[4] for row in rows), 3),
        "stacks": stacks,
    }


def _which(query: ProfileQuery) -> tuple[str, dict[str, Any]]:
    """The attempts ``query`` names, in SQL over ``task_samples t``, and its parameters."""
    params: dict[str, Any] = {"session": query.session}
    if query.task_id is not None:
        params["task"] = query.task_id
        if query.attempt is None:
            return "t.task_id = $task", params
        params["attempt"] = query.attempt
        return "t.task_id = $task AND t.attempt = $attempt", params
    if query.function is not None:
        params["function"] = query.function
        attempts = (
            "SELECT task_id, attempt FROM tasks WHERE session = $session AND $function IN (name, func_or_class_name)"
        )
        return f"(t.task_id, t.attempt) IN ({attempts})", params
    # a task's ID ends with its actor's (an actor's call) and its job's: Ray's IDs say it, also for the calls of
    # actors whose task events are off (Serve's replicas), which the tasks table does not hold
    params["entity"] = query.actor_id or query.job_id
    return f"right(t.task_id, {ACTOR_ID_HEX if query.actor_id is not None else JOB_ID_HEX}) = $entity", params


def named(query: ProfileQuery) -> str:
    """What ``query`` is a profile of, as a title says it."""
    if query.task_id is not None:
        return f"task {query.task_id}" + (f" attempt {query.attempt}" if query.attempt is not None else "")
    if query.function is not None:
        return f"function {query.function}"
    return f"actor {query.actor_id}" if query.actor_id is not None else f"job {query.job_id}"
