"""The in-process sampler of task attempts (``instrument/task_profile.py``), without Ray: what each thread, and each
asyncio task of a loop, runs is told as the task wrappers tell it."""

from __future__ import annotations

import asyncio
import gc
import gzip
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson

from raysight import wire
from raysight.instrument import export
from raysight.instrument.hooks import profiles_path
from raysight.instrument.task_profile import Batches, Folded, Sampler, current_frames


def burn(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def nap(seconds: float) -> None:
    time.sleep(seconds)


def _leaves(folded: Folded, attempt: tuple[str, int]) -> dict[str, list[int]]:
    """The samples of ``attempt`` by the function of their stack's leaf frame."""
    leaves: dict[str, list[int]] = {}
    for stack, (samples, on_cpu) in folded.get(attempt, {}).items():
        leaf = stack.rsplit(";", 1)[-1].split(" (")[0]
        counts = leaves.setdefault(leaf, [0, 0])
        counts[0] += samples
        counts[1] += on_cpu
    return leaves


def _sampled(sampler: Sampler, *work: threading.Thread) -> Folded:
    sampler.start()
    for thread in work:
        thread.start()
    for thread in work:
        thread.join()
    sampler.stop()
    return sampler.take()


def test_a_burning_attempt_is_on_cpu_and_a_sleeping_one_is_not() -> None:
    sampler = Sampler(hz=50, boundary=threading.__file__)  # (as a task's wrapper: the frames from it down are not kept)

    def run(attempt: tuple[str, int], work: object) -> threading.Thread:
        def target() -> None:
            with sampler.running(attempt):
                work(0.6)  # type: ignore[operator]

        return threading.Thread(target=target)

    folded = _sampled(sampler, run(("burner", 0), burn), run(("sleeper", 0), nap))
    burning, sleeping = _leaves(folded, ("burner", 0)), _leaves(folded, ("sleeper", 0))
    assert burning["burn"][0] >= 10 and burning["burn"][1] >= burning["burn"][0] // 2, burning
    assert sleeping["nap"][0] >= 10 and sleeping["nap"][1] == 0, sleeping
    # each stack starts at what the thread ran (the test's `target`), with py-spy's frame names
    assert all(stack.startswith("test_a_burning") for stack in folded[("burner", 0)]), folded
    assert all(stack.count(";") == 1 for stack in folded[("burner", 0)]), folded
    assert all("(tests/test_task_profile.py:" in stack for stack in folded[("burner", 0)])


def test_attempts_run_one_after_the_other_on_one_thread_keep_their_own_samples() -> None:
    sampler = Sampler(hz=50)

    def target() -> None:
        with sampler.running(("first", 0)):
            burn(0.3)
        nap(0.3)  # between attempts: nobody's
        with sampler.running(("second", 1)):
            nap(0.3)

    folded = _sampled(sampler, threading.Thread(target=target))
    assert set(folded) == {("first", 0), ("second", 1)}
    assert set(_leaves(folded, ("first", 0))) == {"burn"}
    assert set(_leaves(folded, ("second", 1))) == {"nap"}


def test_an_event_loop_s_samples_belong_to_the_asyncio_task_running_then() -> None:
    sampler = Sampler(hz=50)

    async def call(attempt: tuple[str, int], work: object) -> None:
        with sampler.running_async(attempt):
            for _ in range(6):
                work(0.05)  # type: ignore[operator]
                await asyncio.sleep(0.05)  # the other call runs meanwhile

    async def both() -> None:
        await asyncio.gather(call(("burning call", 0), burn), call(("sleeping call", 0), nap))

    folded = _sampled(sampler, threading.Thread(target=lambda: asyncio.run(both())))
    burning, sleeping = _leaves(folded, ("burning call", 0)), _leaves(folded, ("sleeping call", 0))
    assert set(burning) == {"burn"} and set(sleeping) == {"nap"}, folded
    assert burning["burn"][1] > 0 and sleeping["nap"][1] == 0


def test_an_async_generator_closed_by_another_task_ends_its_attempt_quietly() -> None:
    """Ray Serve streams a call's answer through an async generator and, once the stream ends or the call is
    cancelled, closes it from another asyncio task: the wrapper's block ends there, in a context that never held the
    attempt. It ends without an error of raysight's (which asyncio printed to the replica's stderr, a traceback per
    cancelled call), the generator's own cleanup runs, and the loop holds no attempt any more."""
    sampler = Sampler(hz=50)
    cleaned = []

    async def streamed() -> Any:
        with sampler.running_async(("streamed call", 0)):
            try:
                while True:
                    yield "chunk"
            finally:
                cleaned.append(True)

    async def serve() -> None:
        generator = streamed()
        assert await generator.__anext__() == "chunk"
        await asyncio.create_task(generator.aclose())  # (raised ValueError: a token of another context)
        assert not sampler._tasks

    asyncio.run(serve())
    assert cleaned == [True]


def test_threads_running_no_attempt_are_not_sampled() -> None:
    sampler = Sampler(hz=100)
    folded = _sampled(sampler, threading.Thread(target=burn, args=(0.3,)))
    assert folded == {}


def test_no_garbage_is_collected_while_the_threads_frames_are_read() -> None:
    """CPython 3.11 may collect inside ``sys._current_frames()`` under its thread-list lock (gh-106883): a finalizer
    run there that waited on another thread (a Ray ObjectRef's) froze a Serve proxy for good. Collections as eager as
    they come, finalizers of cyclic garbage say where they ran: never inside the read, and the collector's state is
    the caller's after it."""
    where: list[bool] = []

    class Cycle:
        def __del__(self) -> None:
            where.append(sys._getframe(1).f_code is current_frames.__code__)

    threshold = gc.get_threshold()
    gc.collect()
    gc.set_threshold(1)
    try:
        for _ in range(100):
            garbage = Cycle()
            garbage.me = garbage  # type: ignore[attr-defined]
            del garbage
            current_frames()
    finally:
        gc.set_threshold(*threshold)
    gc.collect()
    assert len(where) == 100 and not any(where)
    assert gc.isenabled()
    gc.disable()
    try:
        assert threading.get_ident() in current_frames() and not gc.isenabled()  # (one the caller turned off stays off)
    finally:
        gc.enable()


def test_the_frames_of_internal_files_that_open_a_stack_are_left_out_unless_there_is_no_other() -> None:
    sampler = Sampler(hz=50, boundary=threading.__file__, internal=__file__)  # (this file's frames: "Ray's")
    users: dict[str, Any] = {"burn": burn}
    exec(compile("def user_code():\n    burn(0.3)\n", "user_module.py", "exec"), users)  # (another file's)

    def target(attempt: tuple[str, int], work: Any) -> threading.Thread:
        def run() -> None:
            with sampler.running(attempt):
                work()

        return threading.Thread(target=run)

    folded = _sampled(sampler, target(("user's", 0), users["user_code"]), target(("internal", 0), lambda: burn(0.3)))
    assert {stack.split(";")[0] for stack in folded[("user's", 0)]} == {"user_code (user_module.py:2)"}, folded
    assert all(stack.startswith("test_the_frames") for stack in folded[("internal", 0)]), folded


def test_a_worker_sends_its_samples_every_few_seconds_on_the_span_connection_and_the_rest_at_exit() -> None:
    """The samples ride on the span queue's thread and connection: a batch when due (every ``every_s``, not each
    second as spans go), the rest at the flush the process's exit makes; every sample in exactly one batch."""
    received: list[tuple[float, str, dict[str, Any]]] = []

    class Sink(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((time.monotonic(), self.path, orjson.loads(gzip.decompress(body))))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    queue = export.SpanQueue(f"http://127.0.0.1:{server.server_address[1]}/v1/traces", dict)
    sampler = Sampler(hz=50, nudge=queue.nudge)
    attributes = {wire.ATTR_SESSION: "session_2026-11-28_00-00-00_000000_1", wire.ATTR_PID: 1}
    queue.ride("/ingest/task-profiles?key=k", Batches(sampler, lambda: attributes, every_s=0.5))

    def task() -> None:
        with sampler.running(("t", 0)):
            burn(1.3)

    started = time.monotonic()
    try:
        sampler.start()
        thread = threading.Thread(target=task)
        thread.start()
        thread.join()
        sampler.stop()
        assert queue.force_flush(5000)  # (what the process's exit does: the samples not yet due go too)
        assert not sampler.sampled()
    finally:
        queue.shutdown()
        server.shutdown()
    assert {path for _, path, _ in received} == {"/ingest/task-profiles?key=k"}
    assert 2 <= len(received) <= 5, received
    assert received[0][0] - started >= 0.45  # (not before it was due)
    sent = sum(n for _, _, batch in received for a in batch["attempts"] for _, n, _ in a["stacks"])
    assert sent >= 40 and len({batch["batch_id"] for _, _, batch in received}) == len(received)


def test_profiles_go_to_the_server_of_the_trace_endpoint_with_the_key_it_carries() -> None:
    assert profiles_path("http://h:1/v1/traces") == "/ingest/task-profiles"
    assert profiles_path("http://h:1/ingest/otlp/a%2Fb%20c/v1/traces") == "/ingest/task-profiles?key=a%2Fb+c"
    assert profiles_path("http://h:1/base/v1/traces") == "/base/ingest/task-profiles"


def test_a_forked_child_s_sampler_starts_empty() -> None:
    sampler = Sampler(hz=50)
    with sampler.running(("parent's", 0)):
        sampler.sample()
    assert sampler.sampled() == 1
    read, write = os.pipe()
    if (pid := os.fork()) == 0:  # the child: what it inherited of the parent's sampler
        os.write(write, orjson.dumps([sampler.sampled(), sampler._thread is None, len(sampler._threads)]))
        os._exit(0)
    os.waitpid(pid, 0)
    assert orjson.loads(os.read(read, 1000)) == [0, True, 0]
