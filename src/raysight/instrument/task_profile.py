"""Continuous profiles of the task attempts a Ray worker runs, sampled in-process: no ptrace, no root, no py-spy.

A daemon thread wakes :data:`DEFAULT_HZ` times a second and reads the Python stack of each thread that runs a task
attempt now (``sys._current_frames``), attributing it to that attempt: the task wrappers (``ray_tracing.py``) say
which attempt each thread runs (:meth:`Sampler.running`) for sampled and unsampled traces alike. An async actor runs
every call on its event loop's thread, each call an asyncio task of its own: a sample of that thread belongs to the
attempt whose asyncio task runs at that moment, none while the loop waits (:meth:`Sampler.running_async`). A threaded
actor (``max_concurrency`` > 1) runs each call on a thread of its pool: each thread's samples are its own call's.
Threads that run no attempt (Ray's, the worker's idle main thread, threads a task started and left running) are not
sampled at all: the profiler costs nothing while a worker is idle.

A sample is on CPU when its thread runs right then: its CPU time (Linux's clock of the thread) grows by at least a
quarter of a short probe (:data:`PROBE_S`) the sampler waits, without the GIL, once it has read the stacks, and the
thread still runs the attempt sampled (not one that began meanwhile: another call of an async actor). A task
sleeping, waiting on I/O, on ``ray.get`` or on a lock is sampled off CPU; one that wants the CPU but waits for it (a
busy machine) may be too. (CPU time between two samples would not tell: an async actor switches calls between them,
and a worker's next task would inherit its last one's.)

A stack starts at the task's own function (the wrapper's frames and Ray's below and around it are left out) and names
each frame as py-spy does, ``function (file:line)``; samples are folded in memory per attempt and stack, counted (all,
and on CPU), and sent in batches (:class:`Batches`) every :data:`SEND_EVERY_S` and when the worker exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import gzip
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from types import CodeType, FrameType
from typing import Any

import orjson

from raysight import wire

DEFAULT_HZ = 20.0
MAX_HZ = 1000.0  # (what the server takes: signals/task_profiles/parse.py)
SEND_EVERY_S = 5.0  # how often a worker sends its samples (and when it exits): each batch costs the server a fold
MAX_STACKS = 20_000  # distinct (attempt, stack) pairs held between two takes: past it, samples are dropped, counted
MAX_DEPTH = 128  # frames of a stack kept, from the task's function (deeper ones are cut, marked; the server's too)
MAX_LABELS = 10_000  # code objects whose names are kept ready
SEND_AT_STACKS = 1_000  # distinct (attempt, stack) pairs that make a batch due at once (bounding its size)
PROBE_S = 0.002  # how long the sampler watches each sampled thread's CPU time, after reading the stacks
ON_CPU = 0.25  # the share of the probe a thread must have run for its sample to be on CPU

Attempt = tuple[str, int]  # a task's ID (hex) and its attempt number
Folded = dict[Attempt, dict[str, list[int]]]  # attempt → collapsed stack → [samples, samples on CPU]

# The attempt an async actor's call runs, in its context: the asyncio tasks it starts (gather, create_task) copy it,
# and their samples are its own where Python lets another thread read a task's context (3.12 on: Task.get_context)
_ATTEMPT: contextvars.ContextVar[Attempt | None] = contextvars.ContextVar("raysight_attempt", default=None)


class Sampler:
    """Samples the threads that run task attempts, ``hz`` times a second, from a daemon thread started by
    :meth:`start`; ``boundary`` is the file whose frames (the task wrapper's) and those below them are left out of
    each stack."""

    def __init__(
        self,
        hz: float = DEFAULT_HZ,
        boundary: str | None = None,
        internal: str | None = None,
        nudge: Callable[[], None] | None = None,
    ) -> None:
        """``internal``: the directory of the frames that open a stack before the task's own (Ray's); ``nudge`` is
        called with the first sample after each take (the sender's cue)."""
        self.hz, self.boundary, self.internal, self.nudge = hz, boundary, internal, nudge
        self.dropped = 0  # samples not kept: MAX_STACKS reached
        self._threads: dict[int, Attempt] = {}  # thread ident → the attempt it runs
        self._tasks: weakref.WeakKeyDictionary[asyncio.Task[Any], Attempt] = weakref.WeakKeyDictionary()
        self._loops: dict[int, asyncio.AbstractEventLoop] = {}  # an event loop's thread ident → the loop
        self._folded: Folded = {}
        self._stacks = 0
        self._labels: dict[CodeType, tuple[str, str]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        """A forked child runs none of its parent's attempts: it starts empty (a thread of its own, if it runs one)."""
        self._threads, self._loops, self._tasks = {}, {}, weakref.WeakKeyDictionary()
        self._folded, self._stacks, self.dropped = {}, 0, 0
        self._lock, self._stop, self._thread = threading.Lock(), threading.Event(), None

    def start(self) -> None:
        """Sample from now on (idempotent; a forked child starts a thread of its own)."""
        if self._thread is None and self.hz > 0:
            self._thread = threading.Thread(target=self._run, name="raysight-profile", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Sample no more: returns once the last sample is in."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0)

    @contextlib.contextmanager
    def running(self, attempt: Attempt) -> Iterator[None]:
        """The calling thread runs ``attempt`` within the block."""
        ident = threading.get_ident()
        before = self._threads.get(ident)
        self._threads[ident] = attempt
        try:
            yield
        finally:
            if before is None:
                self._threads.pop(ident, None)
            else:
                self._threads[ident] = before

    @contextlib.contextmanager
    def running_async(self, attempt: Attempt) -> Iterator[None]:
        """The calling asyncio task (an async actor's call) runs ``attempt`` within the block. An async generator's
        block may end in another task (Ray Serve closes a streamed call's generator from the task that cancels it),
        whose context never held the attempt: it is left as it is."""
        task = asyncio.current_task()
        if task is None:  # (a coroutine driven by hand, not by a loop: its thread is its own)
            with self.running(attempt):
                yield
            return
        self._loops[threading.get_ident()] = task.get_loop()
        self._tasks[task] = attempt
        token = _ATTEMPT.set(attempt)
        try:
            yield
        finally:
            with contextlib.suppress(ValueError):  # (another context's: the task that set it is done with it)
                _ATTEMPT.reset(token)
            self._tasks.pop(task, None)

    def sampled(self) -> int:
        """How many distinct stacks of attempts wait to be taken."""
        return self._stacks

    def take(self) -> Folded:
        """The samples folded since the last take."""
        with self._lock:
            folded, self._folded, self._stacks = self._folded, {}, 0
        return folded

    def _run(self) -> None:
        interval = 1.0 / self.hz
        due = time.monotonic() + interval
        while not self._stop.wait(max(0.0, due - time.monotonic())):
            with contextlib.suppress(Exception):  # (a profile missing a sample, never a worker broken)
                self.sample()
            # on a clock of its own: the GIL and the probe delay a sample, not the ones after it (a sample stands
            # for 1/hz s); one missed altogether is not made up
            due = max(due + interval, time.monotonic())

    def sample(self) -> None:
        """Take one sample of each thread that runs an attempt now."""
        frames = current_frames()
        taken: list[tuple[int, Attempt, str]] = []
        for ident, frame in frames.items():
            if (attempt := self._attempt_of(ident)) is not None:
                taken.append((ident, attempt, self._stack(frame)))
        for gone in self._loops.keys() - frames.keys():  # (a loop's thread that has ended)
            del self._loops[gone]
        del frames, frame  # (they hold the threads' frames alive)
        if not taken:
            return
        native = {thread.ident: thread.native_id for thread in threading.enumerate()}
        started, before = time.monotonic_ns(), [_cpu_ns(native.get(ident)) for ident, _, _ in taken]
        time.sleep(PROBE_S)
        after, elapsed = [_cpu_ns(native.get(ident)) for ident, _, _ in taken], time.monotonic_ns() - started
        for (ident, attempt, stack), was, now in zip(taken, before, after):
            # on CPU where it ran through the probe, still in the attempt sampled (not another that began meanwhile)
            ran = was is not None and now is not None and now - was >= ON_CPU * elapsed
            self._add(attempt, stack, ran and self._attempt_of(ident) == attempt)

    def _attempt_of(self, ident: int) -> Attempt | None:
        """The attempt a thread runs now: its own, or its event loop's running asyncio task's (or the call's that
        started that task)."""
        attempt = self._threads.get(ident)
        if attempt is None and (loop := self._loops.get(ident)) is not None:
            task = asyncio.current_task(loop)
            if task is not None:
                attempt = self._tasks.get(task)
                if attempt is None and hasattr(task, "get_context"):
                    attempt = task.get_context().get(_ATTEMPT)
        return attempt

    def _add(self, attempt: Attempt, stack: str, on_cpu: bool) -> None:
        with self._lock:
            first = not self._folded
            counts = self._folded.get(attempt, {}).get(stack)
            if counts is None:
                if self._stacks >= MAX_STACKS:
                    self.dropped += 1
                    return
                self._stacks += 1
                counts = self._folded.setdefault(attempt, {})[stack] = [0, 0]
            counts[0] += 1
            counts[1] += on_cpu
        if first and self.nudge is not None:  # (once the sample can be taken: a take meanwhile leaves none behind)
            self.nudge()

    def _stack(self, frame: FrameType | None) -> str:
        """``frame``'s stack, collapsed (root first, ``;`` between frames), from the task's own function: less the
        wrapper's frames and those below, and the frames of ``internal`` files that open it (Ray's executor of an
        actor's method, its tracing wrappers, Serve's replica) unless the stack has no other."""
        frames: list[tuple[CodeType, int | None]] = []
        while frame is not None:
            code = frame.f_code
            if code.co_filename == self.boundary:
                break
            frames.append((code, frame.f_lineno))
            frame = frame.f_back
        frames.reverse()
        if self.internal:
            outer = next((i for i, (code, _) in enumerate(frames) if not code.co_filename.startswith(self.internal)), 0)
            frames = frames[outer:]
        labels = [self._label(code, line) for code, line in frames]
        if len(labels) > MAX_DEPTH:
            labels = [*labels[: MAX_DEPTH - 1], "[deeper frames cut]"]
        return ";".join(labels)

    def _label(self, code: CodeType, line: int | None) -> str:
        known = self._labels.get(code)
        if known is None:
            if len(self._labels) >= MAX_LABELS:  # (code made at run time: kept alive no longer than this)
                self._labels.clear()
            name = getattr(code, "co_qualname", code.co_name).replace(";", ":")
            known = self._labels[code] = (name, short_path(code.co_filename).replace(";", ":"))
        return f"{known[0]} ({known[1]}:{line or 0})"


def current_frames() -> dict[int, FrameType]:
    """``sys._current_frames()`` with the cyclic garbage collector held off meanwhile (where it was on). CPython before
    3.12 may collect inside it, while it holds the runtime's lock of the thread list, and run finalizers there
    (gh-106883): a Ray ``ObjectRef``'s waits on Ray's reference counter, whose holder may wait on that lock, and the
    worker froze for good (a Serve proxy under load, its requests with it)."""
    if not gc.isenabled():
        return sys._current_frames()
    gc.disable()
    try:
        return sys._current_frames()
    finally:
        gc.enable()


def _cpu_ns(native_id: int | None) -> int | None:
    """The CPU time a thread of this process (its kernel ID) has run; None once it has ended, or off Linux. The clock
    is named as Linux names a thread's (what glibc's pthread_getcpuclockid returns): for a thread gone, the kernel
    answers EINVAL, where pthread_getcpuclockid of a thread that has ended may crash the process."""
    if native_id is None or not sys.platform.startswith("linux"):
        return None
    try:
        return time.clock_gettime_ns((~native_id << 3) | 6)  # MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)
    except OSError:
        return None


def short_path(filename: str) -> str:
    """A source file's path as py-spy shows it: less the longest ``sys.path`` entry it is under."""
    best = ""
    for entry in sys.path:
        if entry and filename.startswith(entry.rstrip("/") + "/") and len(entry) > len(best):
            best = entry.rstrip("/") + "/"
    return filename[len(best) :]


class Batches:
    """What the export thread (``export.py``) sends of a sampler: its samples since the last batch, as a
    ``wire.TaskProfiles`` body (gzipped JSON), every ``every_s`` (and at exit), and what was lost (samples dropped,
    batches whose export failed)."""

    def __init__(self, sampler: Sampler, process: Callable[[], dict[str, Any]], every_s: float = SEND_EVERY_S) -> None:
        """``process``: this process's Ray IDs (``ray_tracing.process_attributes``)."""
        self.sampler, self.process, self.every_s = sampler, process, every_s
        self._forked()
        os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        """Batches of a process of their own (a forked child's start anew, named apart from its parent's)."""
        self._prefix, self._taken = f"{os.getpid()}-{time.time_ns():x}", time.monotonic()
        self._batches, self._lost, self._reported, self._reporting = 0, 0, 0, 0
        self._pending = 0  # the samples of the batch being sent

    def due(self) -> float | None:
        """Seconds until the next batch is due (at once past :data:`SEND_AT_STACKS`), None while nothing was
        sampled."""
        held = self.sampler.sampled()
        if not held:
            return None
        return 0.0 if held >= SEND_AT_STACKS else max(0.0, self._taken + self.every_s - time.monotonic())

    def take(self) -> bytes | None:
        """The next batch's body, None when nothing was sampled (or the process is not yet Ray's)."""
        self._taken = time.monotonic()
        attributes = self.process()
        session = attributes.get(wire.ATTR_SESSION)
        folded = self.sampler.take()
        samples = sum(n for stacks in folded.values() for n, _ in stacks.values())
        if not folded or session is None:
            self._lost += samples
            return None
        self._batches, self._pending = self._batches + 1, samples
        lost = self.sampler.dropped + self._lost
        batch: wire.TaskProfiles = {
            "batch_id": f"{self._prefix}-{self._batches}",
            "session": session,
            "node_id": attributes.get(wire.ATTR_NODE_ID),
            "worker_id": attributes.get(wire.ATTR_WORKER_ID),
            "pid": os.getpid(),
            "hz": self.sampler.hz,
            "dropped": lost - self._reported,  # (since the last batch that went through)
            "attempts": [
                {"task_id": task_id, "attempt": attempt, "stacks": [(s, n, c) for s, (n, c) in stacks.items()]}
                for (task_id, attempt), stacks in folded.items()
            ],
        }
        self._reporting = lost
        return gzip.compress(orjson.dumps(batch), compresslevel=1)

    def sent(self, ok: bool) -> None:
        """The batch :meth:`take` made went through, or was lost."""
        if ok:
            self._reported = self._reporting
        else:
            self._lost += self._pending
        self._pending = 0
