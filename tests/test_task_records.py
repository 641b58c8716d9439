"""The OTLP hook's task records, written by shape from a task's facts (otel/task_records.py), are byte
for byte the records of the RayEvents those facts build (`log_record_wire` of `build_event`): over
generated tasks and over Ray's captured spans, compiled and not; and a task after the first of its
kind is written without building its event."""

from __future__ import annotations

import json
from functools import partial
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.trace import SpanContext, TraceFlags

from ray_otel_events.events import ids
from ray_otel_events.events.builders import EventFactory, TaskStatus, TaskType
from ray_otel_events.otel import log_records, otlp_wire, semconv
from ray_otel_events.otel.log_records import log_record_wire
from ray_otel_events.otel.task_records import TaskEventRecords
from ray_otel_events.otel.task_spans import (
    SpanEvent,
    TaskDefinition,
    TaskSpanEvents,
    TaskTransitions,
    build_event,
)
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent
from tests.helpers.examples import examples
from tests.helpers.pure_python import needs_compiled, run_pure_python
from tests.test_tracing_task_events import FIXTURES, readable

PRODUCER = otlp_wire.attributes({semconv.PRODUCER_ATTR: "test"}, otlp_wire.LOG_RECORD_ATTRIBUTES)
OBSERVED = 1_700_000_000_123_456_789
LAST_NS = 253402300800 * 1_000_000_000 - 1  # 9999-12-31T23:59:59.999999999Z, the last time JSON can write

JOBS = [ids.job_id(1), ids.job_id(7), b""]
ACTOR = b"\xac" * ids.ACTOR_ID_SIZE
NODE = b"\xab" * 28
TASK_IDS = st.binary(min_size=ids.TASK_ID_SIZE, max_size=ids.TASK_ID_SIZE)
PARENTS = st.just(b"") | TASK_IDS
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=8)  # no lone surrogates: not UTF-8
NAMES = st.sampled_from(["f", "noop", "Counter", "ünï", ""]) | TEXT
# everyday times, and edges: the epoch, whole seconds and milliseconds, OTLP's last (2**64 - 1 ns)
# and past it, JSON's last and past it (those fall back: their JSON fails as the event's does), before 1970
TIMES = (
    st.integers(1_600_000_000 * 10**9, 1_900_000_000 * 10**9)
    | st.sampled_from([0, 1, 10**9, 1_700_000_000 * 10**9, 1_700_000_000_123 * 10**6, 2**64 - 1, 2**64])
    | st.sampled_from([LAST_NS, LAST_NS + 1, -1, -(10**9), -62135596800 * 10**9 - 1])
)
TRACEBACK = "Traceback (most recent call last):\n  ValueError: ✗ böse\n"
MESSAGES = st.none() | st.just("") | TEXT | st.just(TRACEBACK)
STATES = st.sampled_from(
    [
        TaskStatus.PENDING_ARGS_AVAIL,
        TaskStatus.SUBMITTED_TO_WORKER,
        TaskStatus.RUNNING,
        TaskStatus.FINISHED,
        TaskStatus.FAILED,
    ]
)


@st.composite
def definition_kinds(draw: st.DrawFn) -> TaskDefinition:
    """A task definition's constant part: a normal, actor creation or actor task's."""
    kind = draw(st.sampled_from(["normal", "creation", "actor"]))
    module, function, class_name = draw(NAMES), draw(NAMES), draw(NAMES)
    job = draw(st.sampled_from(JOBS))
    if kind == "normal":
        return _definition(function, b"", 0, module=module, job=job)
    creation = kind == "creation"
    return TaskDefinition(
        event_type=RayEvent.TASK_DEFINITION_EVENT if creation else RayEvent.ACTOR_TASK_DEFINITION_EVENT,
        task_id=b"",
        job=job,
        actor=b"" if creation else ACTOR,
        name=f"{class_name}.{function}",
        module="",
        function=function,
        class_name=class_name,
        task_type=TaskType.ACTOR_CREATION_TASK if creation else TaskType.NORMAL_TASK,
        parent_task=b"",
        timestamp_ns=0,
    )


def _definition(
    function: str, task_id: bytes, at: int, module: str = "m", job: bytes = JOBS[0]
) -> TaskDefinition:
    """A normal task's definition."""
    return TaskDefinition(
        event_type=RayEvent.TASK_DEFINITION_EVENT,
        task_id=task_id,
        job=job,
        actor=b"",
        name=function,
        module=module,
        function=function,
        class_name="",
        task_type=TaskType.NORMAL_TASK,
        parent_task=b"",
        timestamp_ns=at,
    )


@st.composite
def transition_kinds(draw: st.DrawFn) -> TaskTransitions:
    """A lifecycle event's constant part: its states, where it ran."""
    states = draw(st.lists(STATES, min_size=1, max_size=3))
    node, worker = draw(st.sampled_from([(b"", b""), (NODE, b"\xcd" * 28)]))
    pid = draw(st.sampled_from([0, 4242, 2**31 - 1]))
    transitions = tuple((state, 0) for state in states)
    return TaskTransitions(b"", draw(st.sampled_from(JOBS)), transitions, node, worker, pid, None)


@st.composite
def tasks(draw: st.DrawFn, kinds: list[TaskDefinition | TaskTransitions]) -> TaskDefinition | TaskTransitions:
    """One event of one of `kinds`, with its own ids, parent, times and error message (or none)."""
    kind = draw(st.sampled_from(kinds))
    task_id = draw(TASK_IDS | st.just(b""))
    if type(kind) is TaskDefinition:
        return kind._replace(task_id=task_id, parent_task=draw(PARENTS), timestamp_ns=draw(TIMES))
    assert type(kind) is TaskTransitions
    transitions = tuple((state, draw(TIMES)) for state, _ in kind.transitions)
    return kind._replace(task_id=task_id, transitions=transitions, error_message=draw(MESSAGES))


def _context(index: int) -> SpanContext:
    return SpanContext(0xABC0 + index, 0x10 + index, is_remote=False, trace_flags=TraceFlags(index % 2))


def _outcome(write: Any) -> bytes | str:
    """A record, or the exception writing it raised (the same either way)."""
    try:
        result: bytes = write()
    except Exception as exc:  # compared, not swallowed
        return type(exc).__name__
    return result


def _expected(
    factory: EventFactory, facts: TaskDefinition | TaskTransitions, context: SpanContext
) -> bytes | str:
    def write() -> bytes:
        return log_record_wire(
            build_event(factory, facts),
            context.trace_id.to_bytes(16, "big"),
            context.span_id.to_bytes(8, "big"),
            OBSERVED,
            flags=int(context.trace_flags),
            extra_attributes=PRODUCER,
        )

    return _outcome(write)


@settings(max_examples=examples(300))
@given(
    st.data(), st.lists(definition_kinds() | transition_kinds(), min_size=1, max_size=4), st.integers(1, 3)
)
def test_records_by_shape_are_the_built_events_records(
    data: st.DataObject, kinds: list[TaskDefinition | TaskTransitions], max_shapes: int
) -> None:
    """Many tasks of a few kinds through one writer whose few shapes are dropped and made again."""
    factories = [EventFactory(session_name="session_2026-11-25"), EventFactory(session_name="")]
    writer = TaskEventRecords(PRODUCER, max_shapes=max_shapes)
    for index, facts in enumerate(data.draw(st.lists(tasks(kinds), min_size=1, max_size=12))):
        factory = factories[data.draw(st.integers(0, 1))]
        context = _context(index)
        item = SpanEvent(context, facts=facts, factory=factory)
        assert _outcome(partial(writer.record, item, OBSERVED)) == _expected(factory, facts, context), facts


class CountingFactory(EventFactory):
    """Counts the task events it builds."""

    built = 0

    def task_definition(self, **kwargs: Any) -> RayEvent:
        self.built += 1
        return super().task_definition(**kwargs)

    def task_lifecycle(self, **kwargs: Any) -> RayEvent:
        self.built += 1
        return super().task_lifecycle(**kwargs)


def test_a_task_after_the_first_of_its_kind_is_written_without_its_event() -> None:
    """The point of shapes: one event built per kind, not per task; a record all the same."""
    factory = CountingFactory(session_name="s")
    writer = TaskEventRecords(PRODUCER)
    for i in range(50):
        task_id = i.to_bytes(ids.TASK_ID_SIZE, "big")
        for facts in (
            _definition("f", task_id, 1_700_000_000 * 10**9 + i),
            TaskTransitions(task_id, JOBS[0], ((TaskStatus.RUNNING, 10**18 + i),), NODE, b"", 7, None),
        ):
            built = factory.built
            record = writer.record(SpanEvent(_context(i), facts=facts, factory=factory), OBSERVED)
            assert factory.built - built == (1 if i == 0 else 0)
            assert record == _expected(factory, facts, _context(i))


def test_shapes_past_the_bound_are_dropped_and_made_again() -> None:
    """At most `max_shapes` kinds are kept: a kind seen before the cache was emptied is built again."""
    factory = CountingFactory(session_name="s")
    writer = TaskEventRecords(PRODUCER, max_shapes=2)
    functions = ["a", "b", "a", "b", "c", "a", "c"]
    builds = []
    for i, function in enumerate(functions):
        facts = _definition(function, i.to_bytes(ids.TASK_ID_SIZE, "big"), 10**18 + i)
        built = factory.built
        record = writer.record(SpanEvent(_context(i), facts=facts, factory=factory), OBSERVED)
        builds.append(factory.built - built)
        assert record == _expected(factory, facts, _context(i))
    # a, b made; both kept; c empties the cache; a made again; c kept beside it
    assert builds == [1, 1, 0, 0, 1, 1, 0]


def test_a_record_is_the_event_as_mapped_whatever_a_recorder_does_to_it() -> None:
    """A recorder sink, before this one, holds the same events and stamps an id into them on its
    own thread: the records (and the shape made of the first) are the events as the spans made them."""
    factory = EventFactory(session_name="s")
    writer = TaskEventRecords(PRODUCER)
    for i in range(3):
        facts = _definition("f", i.to_bytes(ids.TASK_ID_SIZE, "big"), 10**18 + i)
        item = SpanEvent(_context(i), facts=facts, factory=factory)
        item.event.event_id = b"stamped by the recorder" + bytes([i])
        assert writer.record(item, OBSERVED) == _expected(factory, facts, _context(i))


def test_records_of_rays_captured_spans_are_the_events_records() -> None:
    """Ray's own spans (tasks, an actor, nested submissions, a failure) mapped as the processor maps
    them: every record, shaped or not, is its built event's."""
    writer = TaskEventRecords(PRODUCER)
    records = 0
    for path in sorted(FIXTURES.glob("*.txt")):
        spans = [readable(json.loads(line)) for line in path.read_text().splitlines()]
        timeline = sorted(
            [(s.start_time, 0, s) for s in spans] + [(s.end_time, 1, s) for s in spans], key=lambda t: t[:2]
        )
        mapper = TaskSpanEvents(EventFactory(session_name="session_x"))
        for _, phase, span in timeline:
            for item in mapper.started(span) if phase == 0 else mapper.ended(span):
                context = item.span_context
                expected = log_record_wire(
                    item.event,
                    context.trace_id.to_bytes(16, "big"),
                    context.span_id.to_bytes(8, "big"),
                    OBSERVED,
                    flags=int(context.trace_flags),
                    extra_attributes=PRODUCER,
                )
                assert writer.record(item, OBSERVED) == expected
                records += 1
    assert records > 20


@needs_compiled(True, "the comparison with this process's compiled walk")
def test_records_by_shape_without_the_compiled_helpers() -> None:
    """The same tests in an interpreter whose compiled helpers are off."""
    code = (
        "import sys\n"
        "sys.path.insert(0, 'tests')\n"
        "from tests import test_task_records as t\n"
        "t.test_records_by_shape_are_the_built_events_records()\n"
        "t.test_a_task_after_the_first_of_its_kind_is_written_without_its_event()\n"
        "t.test_shapes_past_the_bound_are_dropped_and_made_again()\n"
        "t.test_a_record_is_the_event_as_mapped_whatever_a_recorder_does_to_it()\n"
        "t.test_records_of_rays_captured_spans_are_the_events_records()\n"
        "print(t.log_records._walk is t.log_records._walk_python)\n"
    )
    assert run_pure_python(code) == "True"
    assert log_records._walk is not log_records._walk_python or log_records._record_walk is None
