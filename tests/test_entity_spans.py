"""The converter's compiled core (native/_entity_spans.c) against its Python twin (RayEventsToOtel with
compiled=False), run with the other compiled readers on and off: random interleavings of pieces
(out of order, duplicated, split over batches, retries, failures, evictions, time limits, flushes,
restarts' emitted keys) give the same spans, records, held pieces, counters and open bytes."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterator
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ray_otel_events.encoding.ray_json import RayEventJsonEncoder
from ray_otel_events.events import ids
from ray_otel_events.events.builders import (
    ActorState,
    EventFactory,
    JobState,
    TaskStatus,
    TaskType,
    python_function,
)
from ray_otel_events.otel import event_heads, from_ray_events
from ray_otel_events.otel.from_ray_events import Emitted, RayEventsToOtel
from ray_otel_events.otel.posted_events import EventParts, event_parts, read_posted_events
from ray_otel_events.protobuf import common_pb2
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent
from tests.helpers.examples import examples
from tests.helpers.pure_python import needs_compiled

try:
    from ray_otel_events.native import _entity_spans
except ImportError:
    _entity_spans = None  # type: ignore[assignment]

needs_core = needs_compiled(from_ray_events._compiled, "the compiled converter core")

SESSION = "session_é_2026"
JOB = ids.job_id(1)
T0 = 1_795_311_449_000_000_000


def _task_id(n: int) -> bytes:
    return bytes([n]) * 16 + ids.nil_id(4) + JOB


def _events() -> Iterator[RayEvent]:
    """Tasks (retried, failed with and without error info, actor tasks, an actor's creation, a driver,
    odd names and ids, unknown states, a negative attempt), an actor, a job, and events of no span."""
    f = EventFactory(session_name=SESSION)
    node, worker = b"\x11" * 28, b"\x22" * 28
    actor = b"\x33" * 12 + JOB
    a, b, c, d, e, g, h = (_task_id(n) for n in range(1, 8))
    short = b"\x44" * 10  # an id without its job: the pieces' job is used
    error = common_pb2.RayErrorInfo(
        error_type=common_pb2.ErrorType.TASK_EXECUTION_EXCEPTION,
        error_message="Traceback (most recent call last):\n  \x1b[31mFile x\x1b[0m\nValueError: bad é\n",
    )

    def life(task: bytes, state: int, ns: int, attempt: int = 0, **kw: Any) -> RayEvent:
        return f.task_lifecycle(
            task_id=task, job_id=JOB, state=state, attempt=attempt, timestamp_ns=T0 + ns, **kw
        )

    def define(task: bytes, name: str, attempt: int = 0, **kw: Any) -> RayEvent:
        return f.task_definition(
            task_id=task,
            job_id=JOB,
            name=name,
            function=python_function("mod", name),
            attempt=attempt,
            timestamp_ns=T0,
            **kw,
        )

    yield define(a, "f", required_resources={"CPU": 1.0})
    yield define(a, "f", attempt=1)
    yield life(a, TaskStatus.PENDING_ARGS_AVAIL, 1)
    yield life(a, TaskStatus.RUNNING, 5, node_id=node, worker_id=worker, worker_pid=4242)
    yield life(a, TaskStatus.FAILED, 9, error=error)
    yield life(a, TaskStatus.RUNNING, 12, attempt=1, worker_pid=-3)
    yield life(a, TaskStatus.FINISHED, 15, attempt=1)
    yield f.actor_task_definition(
        task_id=b,
        job_id=JOB,
        actor_id=actor,
        name="Counter.incr",
        function=python_function("m", "incr", "Counter"),
        parent_task_id=a,
        timestamp_ns=T0 + 2,
    )
    yield life(b, TaskStatus.SUBMITTED_TO_WORKER, 3)
    yield life(b, TaskStatus.RUNNING_IN_RAY_GET, 4)
    yield life(b, TaskStatus.FINISHED, 8)
    yield define(c, "Counter.__init__", task_type=TaskType.ACTOR_CREATION_TASK, parent_task_id=ids.nil_id(24))
    yield life(c, TaskStatus.FINISHED, 20)
    yield define(d, "", task_type=TaskType.DRIVER_TASK, placement_group_id=b"\x55" * 18)
    yield life(d, TaskStatus.RUNNING, 1)
    yield life(e, 99, 30)
    yield life(e, TaskStatus.FAILED, 31)
    yield life(e, TaskStatus.FAILED, 40)  # a terminal state sent again, later
    yield define(short, "pkg:mod.Cls.meth", parent_task_id=b)
    yield life(short, TaskStatus.RUNNING, 2)
    yield life(short, TaskStatus.RUNNING, 2)  # the same transition twice
    yield life(g, TaskStatus.RUNNING, 3, attempt=-1)
    yield life(g, TaskStatus.FINISHED, 4, attempt=-1)
    yield define(h, "child", parent_task_id=a, attempt=2)
    yield life(h, TaskStatus.FINISHED, 50, attempt=2)
    yield f.actor_definition(actor_id=actor, job_id=JOB, class_name="Counter", name="c", timestamp_ns=T0)
    yield f.actor_lifecycle(actor_id=actor, state=ActorState.ALIVE, node_id=node, pid=7, timestamp_ns=T0 + 3)
    died = common_pb2.ActorDeathCause()
    died.actor_died_error_context.reason = common_pb2.ActorDiedErrorContext.NODE_DIED
    died.actor_died_error_context.error_message = "node gone"
    yield f.actor_lifecycle(actor_id=actor, state=ActorState.DEAD, death_cause=died, timestamp_ns=T0 + 60)
    yield f.job_definition(job_id=JOB, driver_pid=1, entrypoint="python x.py", timestamp_ns=T0)
    yield f.job_lifecycle(job_id=JOB, state=JobState.CREATED, timestamp_ns=T0)
    yield f.job_lifecycle(job_id=JOB, state=JobState.FINISHED, timestamp_ns=T0 + 70)
    yield f.node_lifecycle(node_id=node, state=1, timestamp_ns=T0)
    yield f.task_profile(task_id=a, job_id=JOB, event_name="task:execute", start_ns=T0, end_ns=T0 + 5)


def _pool() -> list[EventParts]:
    """Every event twice: as the compiled pass reads its POST (its record's body read) and as the
    Python path gives it (the body walked from the event); one event without an id."""
    encoder = RayEventJsonEncoder()
    pool: list[EventParts] = []
    for n, event in enumerate(_events()):
        event.event_id = hashlib.sha256(b"%d" % n).digest()[:28]
        pool.append(event_parts(event))
        posted, errors = read_posted_events(encoder.encode([event]))
        assert not errors and len(posted) == 1
        pool.append(posted[0])
    anonymous = RayEvent()
    anonymous.CopyFrom(next(_events()))
    anonymous.ClearField("event_id")
    pool.append(event_parts(anonymous))
    return pool


POOL = _pool()
KEYS = [("task", SESSION, _task_id(n), 0) for n in range(1, 4)] + [
    ("job", SESSION, JOB, 0),
    ("actor", "x", b"", 0),
]


class _Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class _Counter:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        self.now += 7
        return self.now


def _seen(out: Emitted, converter: RayEventsToOtel) -> tuple[Any, ...]:
    return (
        [(s.session_name, s.event_type, s.item, s.at, s.wire, s.entity) for s in out.spans],
        [(r.session_name, r.event_type, r.item, r.at, r.wire) for r in out.logs],
        [(key, id(parts)) for key, parts in out.taken],
        converter.counters.snapshot(),
        converter.open_entities,
        converter.open_bytes,
    )


def _envelope(session: str) -> tuple[bytes, bytes]:
    """A resource and scope per session, as OtlpItemEncoder.envelope_of gives them."""
    return b"\x0a\x05" + session.encode()[:5].ljust(5, b"."), b"\x0a\x01s"


def _run(bounds: dict[str, Any], ops: list[tuple[Any, ...]], compiled: bool) -> list[Any]:
    clock = _Clock(100.0)
    converter = RayEventsToOtel(clock=clock, observed_clock_ns=_Counter(), compiled=compiled, **bounds)
    assert converter.compiled == compiled
    seen: list[Any] = []
    for op in ops:
        try:
            if op[0] == "add":
                _, picked, logs, assemble, later = op
                clock.now += later
                out = converter.add_parts([POOL[i] for i in picked], logs, assemble)
            elif op[0] == "expire":
                clock.now += op[1]
                out = converter.expire()
            elif op[0] == "flush":
                out = converter.flush()
            else:
                converter.remember_emitted(KEYS[i] for i in op[1])
                out = Emitted()
        except Exception as exc:  # both must fail alike; what follows is not compared
            seen.append(("raised", type(exc).__name__))
            break
        seen.append(_seen(out, converter))
    return seen


def _python_readers_off() -> Any:
    """The Python twin with the compiled readers it uses turned off (upb and the Python filter)."""
    saved = (
        from_ray_events._read_transitions,
        from_ray_events._read_task_parts,
        from_ray_events._DEFINITION_KEEPERS,
    )
    from_ray_events._read_transitions = None
    from_ray_events._read_task_parts = None
    from_ray_events._DEFINITION_KEEPERS = {
        event_type: None if keep is None else functools.partial(event_heads._kept_fields_python, cls, fields)
        for (event_type, keep), cls in (
            ((t, k), from_ray_events._DEFINITION_CLASSES[t]) for t, k in saved[2].items()
        )
        for fields in [from_ray_events._TASK_SPAN_FIELDS.get(cls, ())]
    }
    return saved


def _restore(saved: Any) -> None:
    (
        from_ray_events._read_transitions,
        from_ray_events._read_task_parts,
        from_ray_events._DEFINITION_KEEPERS,
    ) = saved


_later = st.sampled_from([0.0, 0.05, 0.3, 1.5, 3.0, 700.0])
_ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("add"),
            st.lists(st.integers(0, len(POOL) - 1), max_size=14),
            st.booleans(),
            st.booleans(),
            _later,
        ),
        st.tuples(st.just("expire"), _later),
        st.tuples(st.just("flush")),
        st.tuples(st.just("remember"), st.lists(st.integers(0, len(KEYS) - 1), max_size=3)),
    ),
    max_size=10,
)
_bounds = st.fixed_dictionaries(
    {
        "max_open_entities": st.sampled_from([1, 2, 3, 1000]),
        "max_open_bytes": st.sampled_from([500, 1500, 4000, 1 << 40]),
        "entity_ttl_s": st.sampled_from([0.2, 2.0, 600.0]),
        "terminal_grace_s": st.sampled_from([0.0, 0.25, 2.0]),
        "dedup_window": st.sampled_from([1, 3, 1000]),
        "envelope": st.sampled_from([None, _envelope]),
    }
)


@needs_core
@settings(max_examples=examples(400), deadline=None)
@given(_bounds, _ops)
def test_the_core_does_what_the_python_does(bounds: dict[str, Any], ops: list[tuple[Any, ...]]) -> None:
    compiled = _run(bounds, ops, compiled=True)
    assert compiled == _run(bounds, ops, compiled=False)
    saved = _python_readers_off()
    try:
        assert compiled == _run(bounds, ops, compiled=False)
    finally:
        _restore(saved)


@needs_core
def test_every_piece_in_every_order_gives_the_same_output() -> None:
    """The whole pool in one batch, one piece a batch, and in reverse, each ended by a flush."""
    every = list(range(len(POOL)))
    runs: list[list[tuple[Any, ...]]] = [
        [("add", every, True, True, 0.1), ("flush",)],
        [*(("add", [i], True, True, 0.1) for i in every), ("expire", 1.0), ("flush",)],
        [("add", every[::-1], True, True, 0.1), ("expire", 700.0), ("flush",)],
    ]
    for ops in runs:
        for bounds in (
            {},
            {"max_open_entities": 2, "envelope": _envelope},
            {"max_open_bytes": 1500, "dedup_window": 2},
        ):
            compiled = _run(bounds, ops, compiled=True)
            assert not any(step[0] == "raised" for step in compiled)
            assert compiled == _run(bounds, ops, compiled=False)
            spans = [span for step in compiled for span in step[0]]
            assert len(spans) >= 10


@needs_core
@settings(max_examples=examples(200), deadline=None)
@given(
    st.sampled_from([1, 2, 3, 4]),
    st.text(max_size=12),
    st.binary(max_size=40),
    st.integers(-(2**63), 2**63 - 1),  # every attempt number the core keeps (int64)
)
def test_span_ids_are_the_python_digests(what: int, session: str, ident: bytes, attempt: int) -> None:
    assert _entity_spans is not None
    try:
        session.encode()
    except UnicodeEncodeError:
        return
    python = {
        1: lambda: from_ray_events.trace_id_for_job(session, ident),
        2: lambda: from_ray_events.job_span_id(session, ident),
        3: lambda: from_ray_events.task_span_id(session, ident, attempt),
        4: lambda: from_ray_events.actor_span_id(session, ident),
    }[what]()
    assert _entity_spans.digest(what, session, ident, attempt) == python
    assert _entity_spans.digest(what, session, ident, attempt) == python  # cached


@needs_core
@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.integers(0, len(POOL) - 1), max_size=20), st.integers(1, 5))
def test_events_are_routed_to_their_owner_as_the_python_routes_them(picked: list[int], workers: int) -> None:
    """Each event with the worker owning its trace (an event of no span: its event id), in order."""
    events = [POOL[i] for i in picked]
    groups = from_ray_events.routing_groups(events, workers)
    assert len(groups) == workers
    for owner, group in enumerate(groups):
        assert group == [
            p
            for p in events
            if int.from_bytes(from_ray_events.head_routing_key(p.head)[:8], "big") % workers == owner
        ]
