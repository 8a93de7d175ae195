"""OpenTelemetry for Ray: a span for each task attempt and actor method run, children of the span that submitted them.

Submission: a task, actor creation or actor method submitted while a span is current carries that span's W3C trace
context (:func:`carrier`) in Ray's flattened arguments, put there after Ray has checked the call against the
function's signature: in place of the first positional argument's marker, else as one element more; the worker's
``recover_args`` hands it on as the keyword argument :data:`CARRIER`. Execution: each function a worker loads from
Ray's function table is wrapped once so that it takes the carrier away before the user's code sees its arguments,
and runs inside a span whose parent is the submitter's, for plain, async, generator and async-generator functions
alike; an exception leaves the wrapper without its frames (:class:`Unwrapped`). A carrier goes only where it will be
taken away: to tasks and to the actors of the submitting job, whose workers run this same hook; never to another
language's, to Ray's internal methods, to Ray Serve's actors (Serve traces its own calls), nor when Ray's own tracing
(``--tracing-startup-hook``) propagates already.

``ray.get`` and ``ray.wait`` get spans of their own inside a traced span. Nothing here raises into the user's code:
an error of the instrumentation leaves the call untraced.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

from raysight import wire
from raysight.instrument.task_spans import TaskSpan, new_id

if TYPE_CHECKING:
    from raysight.instrument.task_profile import Sampler

CARRIER = "__raysight_trace__"
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
TRACER = "raysight.ray"
log = logging.getLogger("raysight.instrument")

_patches: list[tuple[Any, str, Any]] = []  # (owner, attribute, original), to undo
_base: bytes | None = None  # a driver's incoming context (TRACEPARENT): the parent of what it submits outside a span
_sink: Any = None  # where ended task spans go (``export.SpanQueue.add``)
_sampler: Sampler | None = None  # what samples the attempts this worker runs (``task_profile.py``), if any
_ratio = 1.0  # of new traces sampled
_tracing_helper: Any = None  # Ray's own tracing (ray.util.tracing.tracing_helper), once instrumented
_receiving = False  # whether this process's functions take the carrier away (installed once, never undone)
VERSION = b"\x00"  # a carrier's first byte (W3C trace context's version 00): Ray's positional marker begins otherwise


def traceparent(span_context: SpanContext) -> str:
    """W3C ``traceparent`` (and ``tracestate``, after a space, when there is one)."""
    value = f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-{span_context.trace_flags:02x}"
    state = span_context.trace_state.to_header() if span_context.trace_state else ""
    return f"{value} {state}" if state else value


def parse_traceparent(value: object) -> SpanContext | None:
    """A remote span context from ``traceparent[ tracestate]``; None when it is not one."""
    if not isinstance(value, str):
        return None
    parent, _, state = value.strip().partition(" ")
    if (match := _TRACEPARENT.fullmatch(parent)) is None or match[1] == "ff":
        return None
    trace_id, span_id, flags = int(match[2], 16), int(match[3], 16), int(match[4], 16)
    if not trace_id or not span_id:
        return None
    trace_state = TraceState.from_header([state]) if state else None
    return SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags), trace_state=trace_state)


def carrier(span_context: SpanContext) -> bytes:
    """What a submission carries: W3C trace context in binary (a Ray task argument of bytes costs Ray less than
    text): version 0, trace ID, span ID, flags, then any ``tracestate`` header."""
    state = span_context.trace_state.to_header().encode() if span_context.trace_state else b""
    return (
        VERSION
        + span_context.trace_id.to_bytes(16, "big")
        + span_context.span_id.to_bytes(8, "big")
        + bytes((span_context.trace_flags & 0xFF,))
        + state
    )


def parse_carrier(value: object) -> SpanContext | None:
    """The remote parent a task was submitted under, from :func:`carrier`'s bytes; None when there is none."""
    if not isinstance(value, bytes) or len(value) < 26 or value[:1] != VERSION:
        return None
    trace_id, span_id = int.from_bytes(value[1:17], "big"), int.from_bytes(value[17:25], "big")
    if not trace_id or not span_id:
        return None
    state = TraceState.from_header([value[26:].decode(errors="replace")]) if len(value) > 26 else None
    return SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(value[25]), trace_state=state)


_last: tuple[SpanContext | None, bytes | None] = (None, None)  # a driver submits many tasks under one span


def outgoing() -> bytes | None:
    """What a submission made now carries: the current span's context, else a driver's incoming one."""
    global _last
    span_context = trace.get_current_span().get_span_context()
    if not span_context.is_valid:
        return _base
    if _last[0] is not span_context:
        _last = (span_context, carrier(span_context))
    return _last[1]


def set_base(value: str | None) -> None:
    """Continue a driver's incoming trace (its ``TRACEPARENT``): the calling thread's spans and what the driver
    submits outside any span become its children. None or not a trace context: each top-level call starts a trace."""
    global _base
    incoming = parse_traceparent(value)
    _base = carrier(incoming) if incoming is not None else None
    if incoming is not None and not trace.get_current_span().get_span_context().is_valid:
        otel_context.attach(trace.set_span_in_context(NonRecordingSpan(incoming)))


def instrument(sink: Any, ratio: float = 1.0, propagate: bool = True) -> None:
    """Trace this process's Ray calls (idempotent), their spans going to ``sink``, ``ratio`` of new traces sampled;
    ``propagate`` False: its spans only, carrying nothing to the workers (whose functions would not take the carrier
    away)."""
    global _sink, _ratio
    _sink, _ratio = sink, ratio
    if _patches:
        return
    import ray
    from ray import actor, remote_function
    from ray._common import signature

    receive()
    _patch(signature, "flatten_args", _flatten_with_carrier)
    if propagate:
        _patch(remote_function.RemoteFunction, "_remote", _submitting_task)
        _patch(actor.ActorClass, "_remote", _submitting_creation)
        _patch(actor.ActorHandle, "_actor_method_call", _submitting_method)
    _patch(ray, "get", _waiting("ray.get"))
    _patch(ray, "wait", _waiting("ray.wait"))
    _patch(logging, "_logRecordFactory", _with_span_ids)  # (what logging.setLogRecordFactory sets)


def receive() -> None:
    """Wrap each task this process runs (idempotent; for good: a worker must take away what other processes'
    submissions carry), for its span once :func:`instrument` has run, and for its samples (:func:`profile_with`)."""
    global _tracing_helper, _receiving
    if _receiving:
        return
    from ray._common import signature
    from ray._private import function_manager
    from ray.util.tracing import tracing_helper

    _tracing_helper = tracing_helper
    manager = function_manager.FunctionActorManager
    setattr(manager, "get_execution_info", _wrap_loaded(manager.get_execution_info))  # noqa: B010 (a method)
    signature.recover_args = _recover_with_carrier(signature.recover_args, signature.DUMMY_TYPE)
    _receiving = True


def profile_with(sampler: Sampler) -> None:
    """Tell ``sampler`` which attempt each task wrapper runs, from now on; it starts with the first."""
    global _sampler
    _sampler = sampler


def _profiled(is_async: bool) -> AbstractContextManager[None]:
    """The attempt the caller runs, told to the sampler for the block (nothing without one)."""
    sampler = _sampler
    if sampler is None:
        return contextlib.nullcontext()
    try:
        worker = core_worker()
        attempt = (worker.get_current_task_id().hex(), worker.get_current_task_attempt_number())
        sampler.start()
    except Exception:  # noqa: BLE001 (unsampled rather than in the user's way)
        return contextlib.nullcontext()
    return sampler.running_async(attempt) if is_async else sampler.running(attempt)


def uninstrument() -> None:
    """Undo :func:`instrument`, but for taking the carrier away (what other processes submit may still carry it):
    nothing new is traced."""
    while _patches:
        owner, name, original = _patches.pop()
        setattr(owner, name, original)


def instrumented() -> bool:
    return bool(_patches)


def _patch(owner: Any, name: str, make: Callable[[Any], Any]) -> None:
    original = getattr(owner, name)
    _patches.append((owner, name, original))
    setattr(owner, name, make(original))


def _ray_tracing_on() -> bool:
    """Whether Ray's own tracing propagates and makes spans (``--tracing-startup-hook``: known once the process is
    connected)."""
    return bool(_tracing_helper is not None and _tracing_helper._global_is_tracing_enabled)


def core_worker() -> Any:
    """This process's Ray core worker."""
    import ray

    return ray._private.worker.global_worker.core_worker  # type: ignore[attr-defined]


# --- submission --------------------------------------------------------------------------------------------------


def _flatten_with_carrier(original: Callable[..., list[Any]]) -> Callable[..., list[Any]]:
    """Ray's flattened arguments with the carrier in them at no cost in arguments where there is a positional one
    (it takes the place of the first one's marker, ``DUMMY_TYPE``), else as one element more (an odd count, which
    Ray never makes): each argument is one Ray serializes, ships and checks on its own."""

    @functools.wraps(original)
    def flatten_args(signature_parameters: Any, args: Any, kwargs: Any) -> list[Any]:
        if not kwargs or CARRIER not in kwargs:
            return original(signature_parameters, args, kwargs)
        if len(kwargs) == 1 and not args and not signature_parameters:  # f(): nothing else to check
            return [kwargs[CARRIER]]
        kwargs = dict(kwargs)
        carrier = kwargs.pop(CARRIER)
        flat = original(signature_parameters, args, kwargs)
        if args:
            flat[0] = carrier
        else:
            flat.append(carrier)
        return flat

    return flatten_args


def _recover_with_carrier(original: Callable[..., Any], marker: bytes) -> Callable[..., Any]:
    """Ray's arguments back from their flattened list, the carrier :func:`_flatten_with_carrier` put in them (in
    the first positional ``marker``'s place, or last of an odd count) handed on as the keyword argument the executor
    takes away."""

    @functools.wraps(original)
    def recover_args(flattened_args: list[Any]) -> tuple[list[Any], dict[str, Any]]:
        carrier = None
        if len(flattened_args) % 2:
            carrier, flattened_args = flattened_args[-1], flattened_args[:-1]
        elif flattened_args and type(first := flattened_args[0]) is bytes and first[:1] == VERSION:
            carrier, flattened_args = first, [marker, *flattened_args[1:]]
        args, kwargs = original(flattened_args)
        if carrier is not None:
            kwargs[CARRIER] = carrier
        return args, kwargs

    return recover_args


def _with_carrier(kwargs: dict[str, Any] | None) -> dict[str, Any] | None:
    try:
        carrier = None if _ray_tracing_on() else outgoing()
    except Exception:  # noqa: BLE001 (never in the user's way)
        return kwargs
    return kwargs if carrier is None else {**(kwargs or {}), CARRIER: carrier}


def _submitting_task(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def _remote(self: Any, args: Any = None, kwargs: Any = None, *rest: Any, **options: Any) -> Any:
        if not getattr(self, "_is_cross_language", False):
            kwargs = _with_carrier(kwargs)
        return original(self, args, kwargs, *rest, **options)

    return _remote


def _submitting_creation(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def _remote(self: Any, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        if not getattr(self.__ray_metadata__, "is_cross_language", False):
            kwargs = _with_carrier(kwargs)
        return original(self, args, kwargs, **options)

    return _remote


def _submitting_method(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def _actor_method_call(self: Any, method_name: str, args: Any = None, kwargs: Any = None, **rest: Any) -> Any:
        if not (self._ray_is_cross_language or method_name.startswith("__ray")) and _carried_to(self):
            kwargs = _with_carrier(kwargs)
        return original(self, method_name, args, kwargs, **rest)

    return _actor_method_call


def _carried_to(handle: Any) -> bool:
    """Whether a call of the actor carries the trace context: it belongs to this process's job, whose workers take
    the carrier away (another job's may not), and is none of Ray Serve's own (:func:`serves`)."""
    import ray

    try:
        return bool(
            handle._ray_actor_id.job_id == ray._private.worker.global_worker.current_job_id
            and not serves(handle._ray_actor_creation_function_descriptor.module_name)
        )
    except Exception:  # noqa: BLE001
        return False


def serves(module_name: str) -> bool:
    """Whether a class of this module is one of Ray Serve's actors (controller, proxy, replica): their calls are
    Serve's plumbing, traced by Serve's own spans (proxy → router → replica, linked by the request's metadata), which
    Ray keeps out of its task events (``RAY_SERVE_ENABLE_TASK_EVENTS=0``); so does raysight: no task span, no
    carrier. A replica's user code runs in Serve's replica span, under which what it submits nests."""
    return module_name.startswith("ray.serve.")


# --- execution ---------------------------------------------------------------------------------------------------


def _wrap_loaded(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def get_execution_info(self: Any, job_id: Any, function_descriptor: Any) -> Any:
        info = original(self, job_id, function_descriptor)
        if getattr(info.function, "__raysight__", False):
            return info
        try:
            info = info._replace(function=_traced(info.function, function_descriptor))
            self._function_execution_info[function_descriptor.function_id] = info
        except Exception:  # noqa: BLE001 (untraced rather than broken)
            log.debug("raysight: could not trace %s", function_descriptor, exc_info=True)
        return info

    return get_execution_info


def _traced(executor: Callable[..., Any], descriptor: Any) -> Callable[..., Any]:
    """``executor`` (a task's function, or Ray's executor of an actor method, which carries ``name`` and ``method``)
    taking the carrier away and running in a span."""
    method = getattr(executor, "method", None)
    user_fn = method if method is not None else executor
    class_name = descriptor.class_name
    method_name = getattr(executor, "name", descriptor.function_name)
    if class_name:
        kind = "actor_creation" if method_name == "__init__" else "actor_task"
        name = f"{class_name}.{method_name}"
    else:
        kind, name = "task", descriptor.function_name
    attributes = {wire.ATTR_FUNCTION: f"{descriptor.module_name}.{name}", wire.ATTR_TASK_KIND: kind}
    silent = method_name.startswith("__ray") or serves(descriptor.module_name)

    def start(kwargs: dict[str, Any]) -> Running | None:
        parent = kwargs.pop(CARRIER, None)
        if silent or not _patches or _ray_tracing_on():  # Ray's own wrappers trace this task: never twice
            return None
        try:
            return Running.begin(name, parent, attributes)
        except Exception:  # noqa: BLE001 (untraced rather than in the user's way)
            return None

    if inspect.isasyncgenfunction(user_fn):

        async def traced(*args: Any, **kwargs: Any) -> Any:
            running = start(kwargs)
            with UNWRAPPED, _profiled(is_async=True):
                if running is None:
                    async for item in executor(*args, **kwargs):
                        yield item
                    return
                with running.ended():
                    with running.current():
                        generator = executor(*args, **kwargs)
                    while True:
                        with running.current():
                            try:
                                item = await generator.__anext__()
                            except StopAsyncIteration:
                                break
                        yield item

    elif inspect.iscoroutinefunction(user_fn):

        async def traced(*args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
            with start(kwargs) or UNWRAPPED, _profiled(is_async=True):
                return await executor(*args, **kwargs)

    elif inspect.isgeneratorfunction(user_fn):

        def traced(*args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
            running = start(kwargs)
            with UNWRAPPED, _profiled(is_async=False):
                if running is None:
                    return (yield from executor(*args, **kwargs))
                return (yield from _iterate_in(running, lambda: executor(*args, **kwargs)))

    else:

        def traced(*args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
            with start(kwargs) or UNWRAPPED, _profiled(is_async=False):
                return executor(*args, **kwargs)

    functools.update_wrapper(traced, executor)
    traced.__raysight__ = True  # type: ignore[attr-defined]
    if method is not None:  # what Ray's task executor reads of an actor method's executor
        traced.name, traced.method = executor.name, method  # type: ignore[attr-defined]
    return traced


class Unwrapped:
    """The block of a task's wrapper: an exception leaves it as the user's code left it, without the wrapper's frames
    at the head of its traceback (:func:`unwrapped`), which would otherwise open the traceback Ray formats from it in
    the worker (the driver's error, raysight's, the dashboard's). The ``with`` statement re-raises it with the
    traceback it then has, adding no frame of its own (CPython 3.11 on; 3.10 re-raises with the one it caught)."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, traceback: TracebackType | None) -> None:
        if exc is not None:
            unwrapped(exc)


UNWRAPPED = Unwrapped()


def unwrapped(exc: BaseException) -> BaseException:
    """``exc`` without the frames of this module (a task's wrapper) that begin its traceback: known by their code's
    file, not by the text of any frame."""
    traceback = exc.__traceback__
    while traceback is not None and traceback.tb_frame.f_code.co_filename == __file__:
        traceback = traceback.tb_next
    return exc.with_traceback(traceback)


def _iterate_in(running: Running, make: Callable[[], Iterator[Any]]) -> Iterator[Any]:
    """A generator's items, each produced inside the task's span, which ends with the generator."""
    with running.ended():
        with running.current():
            generator = make()
        while True:
            with running.current():
                try:
                    item = next(generator)
                except StopIteration as stop:
                    return stop.value
            yield item


_LOW64 = 2**64 - 1
_FLAGS = (TraceFlags(TraceFlags.DEFAULT), TraceFlags(TraceFlags.SAMPLED))
_last_parent: tuple[object, SpanContext | None] = (None, None)  # a worker runs many tasks of one submitter's span


class Running:
    """A task attempt being traced: its light span (None when not sampled) and its span context. As a context
    manager, the span context is current within the block (the user's spans and the tasks it submits nest under it)
    and the span ends with it, failed if it raised; the exception leaves it as from :class:`Unwrapped`."""

    __slots__ = ("context", "span", "_token")

    def __init__(self, span: TaskSpan | None, context: otel_context.Context) -> None:
        self.span, self.context = span, context

    @classmethod
    def begin(cls, name: str, parent_carrier: object, attributes: dict[str, Any]) -> Running:
        global _last_parent
        if parent_carrier == _last_parent[0]:
            parent = _last_parent[1]
        else:
            parent = parse_carrier(parent_carrier)
            _last_parent = (parent_carrier, parent)
        trace_id = parent.trace_id if parent is not None else new_id(128)
        sampled = parent.trace_flags.sampled if parent is not None else (trace_id & _LOW64) < _ratio * 2**64
        span_context = SpanContext(
            trace_id,
            new_id(64),
            is_remote=False,
            trace_flags=_FLAGS[sampled],
            trace_state=parent.trace_state if parent is not None else None,
        )
        context = trace.set_span_in_context(NonRecordingSpan(span_context))
        if not sampled:
            return cls(None, context)
        worker = core_worker()
        task = {
            **attributes,
            wire.ATTR_TASK_ID: worker.get_current_task_id().hex(),
            wire.ATTR_ATTEMPT: worker.get_current_task_attempt_number(),
        }
        if not (actor_id := worker.get_actor_id()).is_nil():
            task[wire.ATTR_ACTOR_ID] = actor_id.hex()
        parent_id = parent.span_id if parent is not None else None
        return cls(TaskSpan(trace_id, span_context.span_id, parent_id, name, time.time_ns(), task), context)

    def __enter__(self) -> None:
        self._token = otel_context.attach(self.context)

    def __exit__(self, kind: object, exc: BaseException | None, traceback: object) -> None:
        otel_context.detach(self._token)
        self.end(None if exc is None else unwrapped(exc))

    def end(self, exc: BaseException | None = None) -> None:
        """End the span (once), failed by ``exc``, and hand it on to be sent."""
        span = self.span
        if span is None or span.end_ns:
            return
        now = time.time_ns()
        if exc is not None:
            span.fail(exc, now)
        span.end_ns = now
        if _sink is not None:
            _sink(span)

    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        """The span context is current within the block (each step of a generator)."""
        token = otel_context.attach(self.context)
        try:
            yield
        finally:
            otel_context.detach(token)

    @contextlib.contextmanager
    def ended(self) -> Iterator[None]:
        """The span ends with the block (a generator's whole run), failed if it raised (its traceback recorded without
        the wrapper's frames; the exception leaves with them, for the wrapper's :class:`Unwrapped` to take away)."""
        try:
            yield
        except BaseException as exc:
            self.end(unwrapped(exc))
            raise
        self.end()


def _with_span_ids(original: Callable[..., logging.LogRecord]) -> Callable[..., logging.LogRecord]:
    """Log records made inside a span carry its ``trace_id`` and ``span_id`` (hex): Ray's JSON logging writes them,
    and raysight's log store links each such line to its span; a format may name them too."""

    @functools.wraps(original)
    def record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        made = original(*args, **kwargs)
        span_context = trace.get_current_span().get_span_context()
        if span_context.is_valid:
            made.trace_id, made.span_id = f"{span_context.trace_id:032x}", f"{span_context.span_id:016x}"
        return made

    return record


def _waiting(what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def waiting(*args: Any, **kwargs: Any) -> Any:
            if not trace.get_current_span().get_span_context().trace_flags.sampled:
                return original(*args, **kwargs)
            refs = args[0] if args else kwargs.get("object_refs")
            count = len(refs) if isinstance(refs, (list, tuple)) else 1
            with trace.get_tracer(TRACER).start_as_current_span(what, attributes={"ray.object_refs": count}):
                return original(*args, **kwargs)

        return waiting

    return wrap


_process: dict[str, Any] = {}  # this process's Ray IDs, once connected


def process_attributes() -> dict[str, Any]:
    """This process's Ray IDs, once it is connected to Ray (else its pid alone); worked out once (per process: a
    forked child has its own pid)."""
    import ray

    if _process.get(wire.ATTR_PID) == os.getpid():
        return _process
    worker = ray._private.worker.global_worker
    attributes: dict[str, Any] = {wire.ATTR_PID: os.getpid()}
    if not getattr(worker, "connected", False):
        return attributes
    attributes[wire.ATTR_SESSION] = worker.node.session_name
    attributes[wire.ATTR_JOB_ID] = worker.current_job_id.hex()
    attributes[wire.ATTR_NODE_ID] = worker.current_node_id.hex()
    attributes[wire.ATTR_WORKER_ID] = worker.worker_id.hex() if isinstance(worker.worker_id, bytes) else None
    _process.clear()
    _process.update({k: v for k, v in attributes.items() if v is not None})
    return _process
