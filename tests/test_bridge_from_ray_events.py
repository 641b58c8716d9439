"""RayEvent stream -> spans and log records, on the real Ray 2.60 captures (run E)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from helpers.bridge_capture import run_e_posts
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from ray_otel_events.events import ids
from ray_otel_events.events.builders import EventFactory, TaskStatus, python_function
from ray_otel_events.otel import semconv
from ray_otel_events.otel.from_ray_events import (
    Emitted,
    RayEventsToOtel,
    job_span_id,
    routing_key,
    task_span_id,
    trace_id_for_job,
)
from ray_otel_events.otel.plain_records import any_value_to_python
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent

SESSION = "session_2026-11-22_01-37-25_288381_8892"
JOB = bytes.fromhex("01000000")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def replay(batches: list[list[RayEvent]], **kwargs: Any) -> tuple[RayEventsToOtel, Emitted, Clock]:
    clock = Clock()
    converter = RayEventsToOtel(clock=clock, **kwargs)
    out = Emitted()
    for batch in batches:
        out.extend(converter.add(batch))
        clock.now += 0.1
    return converter, out, clock


def attrs(span: Span) -> dict[str, Any]:
    return {kv.key: any_value_to_python(kv.value) for kv in span.attributes}


def by_name(spans: list[Span]) -> dict[str, list[Span]]:
    out: dict[str, list[Span]] = {}
    for span in spans:
        out.setdefault(span.name, []).append(span)
    return out


def all_spans(converter: RayEventsToOtel, out: Emitted) -> list[Span]:
    out.extend(converter.flush())
    return [s.span for s in out.spans]


def test_one_trace_per_job_with_every_parent_present() -> None:
    converter, out, _ = replay(run_e_posts())
    spans = all_spans(converter, out)
    assert len(spans) == 28  # 22 task attempts (driver included), 4 actors, 1 job... and the retry
    assert {s.trace_id for s in spans} == {trace_id_for_job(SESSION, JOB)}
    ids_present = {s.span_id for s in spans}
    assert len(ids_present) == len(spans)
    roots = [s for s in spans if not s.parent_span_id]
    assert [r.name for r in roots] == ["job python workload.py"]
    assert roots[0].span_id == job_span_id(SESSION, JOB)
    for span in spans:
        assert not span.parent_span_id or span.parent_span_id in ids_present, span.name
        assert span.start_time_unix_nano <= span.end_time_unix_nano
        assert attrs(span)[semconv.PRODUCER_ATTR] == "bridge"


def test_nested_tasks_hang_under_their_parent_task() -> None:
    converter, out, _ = replay(run_e_posts())
    named = by_name(all_spans(converter, out))
    (parent,) = named["parent"]
    children = named["child"]
    assert len(children) == 3
    assert all(child.parent_span_id == parent.span_id for child in children)
    (driver,) = named["driver"]
    assert parent.parent_span_id == driver.span_id  # submitted by the driver
    assert driver.parent_span_id == job_span_id(SESSION, JOB)


def test_start_end_and_events_come_from_sorted_transitions() -> None:
    converter, out, _ = replay(run_e_posts())
    named = by_name(all_spans(converter, out))
    (boom,) = named["boom"]
    names = [e.name for e in boom.events]
    assert names == [
        "PENDING_ARGS_AVAIL",
        "PENDING_NODE_ASSIGNMENT",
        "SUBMITTED_TO_WORKER",
        "RUNNING",
        "FAILED",
        "exception",
    ]
    times = [e.time_unix_nano for e in boom.events]
    assert times == sorted(times)
    assert boom.start_time_unix_nano == times[0]
    assert boom.end_time_unix_nano == times[4]  # the FAILED transition
    a = attrs(boom)
    assert a[semconv.RAY_TASK_ID] == bytes.fromhex(a[semconv.RAY_TASK_ID]).hex()
    assert len(a[semconv.RAY_TASK_ID]) == 48 and a[semconv.RAY_JOB_ID] == "01000000"
    assert len(a[semconv.RAY_NODE_ID]) == 56 and len(a[semconv.RAY_WORKER_ID]) == 56
    assert a[semconv.RAY_TASK_ATTEMPT] == 0 and a[semconv.RAY_PID] == "9316"
    # Counter.__init__: FINISHED (owner, POST 33) arrived before RUNNING (executor, POST 34).
    (init,) = named["Counter.__init__"]
    assert [e.name for e in init.events] == [
        "PENDING_ARGS_AVAIL",
        "PENDING_NODE_ASSIGNMENT",
        "RUNNING",
        "FINISHED",
    ]


def test_failures_set_error_status_and_exception_details() -> None:
    converter, out, _ = replay(run_e_posts())
    named = by_name(all_spans(converter, out))
    (boom,) = named["boom"]
    assert boom.status.code == 2
    assert boom.status.message == "ValueError: intentional failure from boom()"
    exception = {kv.key: any_value_to_python(kv.value) for kv in boom.events[-1].attributes}
    assert exception["exception.type"] == "ValueError"
    assert "raise ValueError" in exception["exception.stacktrace"]
    assert "\x1b[" not in exception["exception.stacktrace"]  # Ray's ANSI colours are stripped
    assert attrs(boom)["ray.error_type"] == "TASK_EXECUTION_EXCEPTION"
    (bad_actor,) = named["actor BadInit"]
    assert bad_actor.status.code == 2  # constructor failed
    (victim,) = named["actor Victim"]
    assert victim.status.code == 0  # ray.kill is how the workload ends it: not an error
    pings = named["Victim.ping"]
    assert sorted(p.status.code for p in pings) == [0, 2]  # the call after the kill failed (ACTOR_DIED)


def test_retry_is_a_second_attempt_span_linked_to_the_first() -> None:
    converter, out, _ = replay(run_e_posts())
    named = by_name(all_spans(converter, out))
    flaky = sorted(named["flaky"], key=lambda s: attrs(s)[semconv.RAY_TASK_ATTEMPT])
    assert [attrs(s)[semconv.RAY_TASK_ATTEMPT] for s in flaky] == [0, 1]
    assert [s.status.code for s in flaky] == [2, 0]
    task_id = bytes.fromhex(attrs(flaky[0])[semconv.RAY_TASK_ID])
    assert flaky[1].span_id == task_span_id(SESSION, task_id, 1)
    assert [link.span_id for link in flaky[1].links] == [flaky[0].span_id]


def test_actor_tasks_link_to_their_actor_and_detached_actor_is_incomplete() -> None:
    converter, out, _ = replay(run_e_posts())
    named = by_name(all_spans(converter, out))
    actors = {
        attrs(s)[semconv.RAY_ACTOR_ID]: s
        for name, spans in named.items()
        if name.startswith("actor ")
        for s in spans
    }
    for call in named["Counter.inc"]:
        a = attrs(call)
        assert a[semconv.RAY_ACTOR_CLASS] == "Counter" and a[semconv.RAY_ACTOR_METHOD] == "inc"
        assert [link.span_id for link in call.links] == [actors[a[semconv.RAY_ACTOR_ID]].span_id]
    detached = [s for s in actors.values() if attrs(s).get("ray.actor_name") == "detached_counter"]
    assert len(detached) == 1 and attrs(detached[0])[semconv.INCOMPLETE_ATTR] is True
    complete = [s for s in actors.values() if s is not detached[0]]
    assert all(semconv.INCOMPLETE_ATTR not in attrs(s) for s in complete)


def test_every_event_is_a_log_record_with_its_span_context() -> None:
    converter, out, _ = replay(run_e_posts())
    spans = {s.span.span_id for s in (*out.spans, *converter.flush().spans)}
    total = sum(len(batch) for batch in run_e_posts())
    assert len(out.logs) == total == 120
    for log in out.logs:
        record = log.record
        body = any_value_to_python(record.body)
        assert record.event_name == "ray." + body["eventType"].lower()
        if body["eventType"].startswith(("NODE_", "WORKER_")):
            assert not record.trace_id and not record.span_id
        else:
            assert record.trace_id == trace_id_for_job(SESSION, JOB)
            assert record.span_id in spans, body["eventType"]


def test_duplicates_and_reordering_change_nothing() -> None:
    batches = run_e_posts()
    _, _, _ = replay(batches)
    reference = _span_summary(*replay(batches)[:2])
    twice = replay(batches + batches)
    assert _span_summary(*twice[:2]) == reference
    assert twice[0].counters.get("duplicate_events") == 120
    assert len(twice[1].logs) == 120  # a duplicate makes no second log record
    shuffled = [list(batch) for batch in batches]
    rng = random.Random(7)
    rng.shuffle(shuffled)
    for batch in shuffled:
        rng.shuffle(batch)
    converter, out, _ = replay(shuffled)
    assert _span_summary(converter, out) == reference


def _span_summary(converter: RayEventsToOtel, out: Emitted) -> dict[bytes, tuple[Any, ...]]:
    spans = [*out.spans, *converter.flush().spans]
    return {
        s.span.span_id: (
            s.span.parent_span_id,
            s.span.start_time_unix_nano,
            s.span.status.code,
            tuple(e.name for e in s.span.events),
        )
        for s in spans
        if semconv.INCOMPLETE_ATTR not in attrs(s.span)
    }


def _task(factory: EventFactory, task_id: bytes, state: int, ns: int) -> RayEvent:
    event = factory.task_lifecycle(task_id=task_id, job_id=JOB, state=state, timestamp_ns=ns)
    event.event_id = ids.new_unique_id()
    return event


def _definition(factory: EventFactory, task_id: bytes, name: str) -> RayEvent:
    event = factory.task_definition(
        task_id=task_id, job_id=JOB, name=name, function=python_function("m", name), timestamp_ns=1
    )
    event.event_id = ids.new_unique_id()
    return event


def test_terminal_without_running_waits_for_the_grace_then_emits() -> None:
    factory = EventFactory(session_name="s")
    clock = Clock()
    converter = RayEventsToOtel(clock=clock, terminal_grace_s=2.0)
    task = ids.new_task_id(JOB)
    out = converter.add([_definition(factory, task, "f"), _task(factory, task, TaskStatus.FINISHED, 10)])
    assert not out.spans and converter.open_entities == 1
    clock.now = 1.9
    assert not converter.expire().spans
    clock.now = 2.0
    (emitted,) = converter.expire().spans
    assert semconv.INCOMPLETE_ATTR not in attrs(emitted.span)  # terminal: complete, just no RUNNING
    # The executor's RUNNING arriving late is a log record, not a second span.
    late = converter.add([_task(factory, task, TaskStatus.RUNNING, 5)])
    assert not late.spans and len(late.logs) == 1 and late.logs[0].record.span_id == emitted.span.span_id
    assert converter.counters.get("late_events") == 1


def test_ttl_and_eviction_emit_incomplete_spans() -> None:
    factory = EventFactory(session_name="s")
    clock = Clock()
    converter = RayEventsToOtel(clock=clock, entity_ttl_s=10.0, max_open_entities=3)
    tasks = [ids.new_task_id(JOB) for _ in range(4)]
    out = Emitted()
    for i, task in enumerate(tasks):
        out.extend(converter.add([_task(factory, task, TaskStatus.RUNNING, 100 + i)]))
        clock.now += 1
    (evicted,) = out.spans  # the 4th open entity pushed out the least recently updated one
    assert attrs(evicted.span)[semconv.RAY_TASK_ID] == tasks[0].hex()
    assert attrs(evicted.span)[semconv.INCOMPLETE_ATTR] is True
    assert converter.open_entities == 3
    clock.now = 12.5  # tasks[1] last updated at 1.0, tasks[2] at 2.0, tasks[3] at 3.0
    expired = converter.expire().spans
    assert [attrs(s.span)[semconv.RAY_TASK_ID] for s in expired] == [tasks[1].hex(), tasks[2].hex()]
    assert converter.open_entities == 1
    (last,) = converter.flush().spans
    assert attrs(last.span)[semconv.INCOMPLETE_ATTR] is True
    assert attrs(last.span)[semconv.RAY_STATE] == "RUNNING"
    assert converter.open_entities == 0


def test_byte_bound_evicts_the_least_recently_updated_as_incomplete_and_counts_it() -> None:
    factory = EventFactory(session_name="s")
    one = RayEventsToOtel()
    one.add([_task(factory, ids.new_task_id(JOB), TaskStatus.RUNNING, 100)])
    per_entity = one.open_bytes
    assert 0 < per_entity <= 1024  # what an open task attempt is charged
    converter = RayEventsToOtel(max_open_bytes=per_entity * 3 + per_entity // 2)
    tasks = [ids.new_task_id(JOB) for _ in range(5)]
    out = Emitted()
    for i, task in enumerate(tasks):
        out.extend(converter.add([_task(factory, task, TaskStatus.RUNNING, 100 + i)]))
    assert [attrs(s.span)[semconv.RAY_TASK_ID] for s in out.spans] == [tasks[0].hex(), tasks[1].hex()]
    assert all(attrs(s.span)[semconv.INCOMPLETE_ATTR] is True for s in out.spans)
    assert converter.open_entities == 3 and converter.open_bytes <= converter.max_open_bytes
    assert converter.counters.get("evicted_open_entities", reason="bytes") == 2
    converter.flush()
    assert converter.open_bytes == 0  # the accounting returns to zero


def test_an_open_attempt_holds_only_what_its_span_reads() -> None:
    """A definition's runtime env and resources can be kilobytes: the open attempt keeps the fields
    the span reads, and the span is the same as one built from the whole definition."""
    factory = EventFactory(session_name="s")
    task = ids.new_task_id(JOB)
    lean = _definition(factory, task, "f")
    heavy = RayEvent()
    heavy.CopyFrom(lean)
    heavy.event_id = ids.new_unique_id()
    heavy.task_definition_event.serialized_runtime_env = "x" * 10_000
    heavy.task_definition_event.required_resources["CPU"] = 1.0
    spans = []
    for definition in (lean, heavy):
        converter = RayEventsToOtel(terminal_grace_s=0.0)
        converter.add([definition, _task(factory, task, TaskStatus.RUNNING, 5)])
        assert converter.open_bytes <= 1024
        (emitted,) = converter.add([_task(factory, task, TaskStatus.FINISHED, 9)]).spans
        spans.append(emitted.span)
    assert spans[0] == spans[1]
    assert attrs(spans[1])[semconv.RAY_TASK_NAME] == "f"
    assert attrs(spans[1])[semconv.RAY_FUNCTION].endswith("f")


def test_routing_key_is_the_trace_id_for_every_piece_of_an_entity() -> None:
    batches = run_e_posts()
    converter, out, _ = replay(batches)
    traces = {span.trace_id for span in all_spans(converter, out)}
    et = RayEvent.EventType
    no_span = {et.NODE_DEFINITION_EVENT, et.NODE_LIFECYCLE_EVENT, et.WORKER_DEFINITION_EVENT}
    no_span.add(et.WORKER_LIFECYCLE_EVENT)
    for event in (e for batch in batches for e in batch):
        key = routing_key(event)
        if event.event_type in no_span:
            assert key == event.event_id  # no span: spread by event id
        else:
            assert key in traces


@pytest.mark.parametrize("session", ["", "session_a"])
def test_trace_ids_are_deterministic_and_session_scoped(session: str) -> None:
    assert trace_id_for_job(session, JOB) == trace_id_for_job(session, JOB)
    assert trace_id_for_job(session, JOB) != trace_id_for_job(session + "x", JOB)
    assert len(trace_id_for_job(session, JOB)) == 16 and len(job_span_id(session, JOB)) == 8


def test_times_otlp_cannot_carry_become_unknown_not_a_crash() -> None:
    """RayEvent timestamps run from year 1 to 9999; OTLP's are unsigned nanoseconds since 1970
    (to 2554). Such a task still gets its span and records, with those times 0 ("unknown"), and
    each record's body keeps the event's own timestamp."""
    factory = EventFactory(SESSION)
    task = bytes(range(20)) + JOB
    before_1970 = -315_619_200 * 10**9  # 1960-01-01
    after_2554 = 20_000_000_000 * 10**9  # year 2603
    common: dict[str, Any] = {"task_id": task, "job_id": JOB}
    events = [
        factory.task_definition(
            **common, name="f", function=python_function("m", "f"), timestamp_ns=before_1970
        ),
        factory.task_lifecycle(**common, state=TaskStatus.RUNNING, timestamp_ns=before_1970),
        factory.task_lifecycle(**common, state=TaskStatus.FINISHED, timestamp_ns=after_2554),
    ]
    out = RayEventsToOtel(terminal_grace_s=0.0).add(events)
    (emitted,) = out.spans
    assert (emitted.span.start_time_unix_nano, emitted.span.end_time_unix_nano) == (0, 0)
    assert [(e.name, e.time_unix_nano) for e in emitted.span.events] == [("RUNNING", 0), ("FINISHED", 0)]
    assert len(out.logs) == 3
    records = [LogRecord.FromString(log.wire) for log in out.logs]
    assert [r.time_unix_nano for r in records[:2]] == [0, 0]
    assert any_value_to_python(records[0].body)["timestamp"] == "1960-01-01T00:00:00Z"
