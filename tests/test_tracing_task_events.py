"""Task and actor spans -> RayEvents: Ray's own captured spans, merging equal to the recorder's, and
events from a traced pool reaching a real aggregator and sink."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from helpers.agg_procs import CliServer, read_jsonl
from helpers.tracing_procs import LOCAL_HOOK, run_pool, script_env
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from ray_otel_events.config import RecorderConfig
from ray_otel_events.events import ids
from ray_otel_events.events.builders import EventFactory, TaskStatus, python_function
from ray_otel_events.otel import semconv
from ray_otel_events.otel.from_ray_events import RayEventsToOtel
from ray_otel_events.otel.task_spans import TaskSpanEvents, derive_task_id
from ray_otel_events.producer import RayEventRecorder
from ray_otel_events.protobuf import events_event_aggregator_service_pb2 as svc
from ray_otel_events.protobuf import events_event_aggregator_service_pb2_grpc as svc_grpc
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent
from ray_otel_events.tracing import RecorderSink, TaskEventSpanProcessor
from ray_otel_events.tracing.span_files import _iso_to_ns

FIXTURES = Path(__file__).parent / "fixtures" / "ray-2.60-spans"
ET = RayEvent.EventType
KINDS = {f"SpanKind.{k.name}": k for k in SpanKind}


def readable(obj: dict[str, Any]) -> ReadableSpan:
    """A ReadableSpan rebuilt from one line of Ray's span file."""
    ctx = obj["context"]
    trace_id = int(ctx["trace_id"], 16)
    parent = obj["parent_id"]
    return ReadableSpan(
        name=obj["name"],
        context=SpanContext(trace_id, int(ctx["span_id"], 16), True, TraceFlags(1)),
        parent=SpanContext(trace_id, int(parent, 16), True, TraceFlags(1)) if parent else None,
        kind=KINDS[obj["kind"]],
        attributes=obj["attributes"],
        events=[Event(e["name"], e["attributes"], _iso_to_ns(e["timestamp"])) for e in obj["events"]],
        status=Status(StatusCode[obj["status"]["status_code"]], obj["status"].get("description")),
        start_time=_iso_to_ns(obj["start_time"]),
        end_time=_iso_to_ns(obj["end_time"]),
    )


def events_of_process(pid: int) -> list[RayEvent]:
    """Feed one process's spans to a mapper as its processor would see them: starts and ends in time order."""
    spans = [readable(json.loads(line)) for line in (FIXTURES / f"{pid}.txt").read_text().splitlines()]
    timeline = sorted(
        [(s.start_time, 0, s) for s in spans] + [(s.end_time, 1, s) for s in spans],
        key=lambda t: (t[0], t[1]),
    )
    mapper = TaskSpanEvents(EventFactory(session_name="s"))
    out: list[RayEvent] = []
    for _, phase, span in timeline:
        out.extend(item.event for item in (mapper.started(span) if phase == 0 else mapper.ended(span)))
    return out


def of_type(events: list[RayEvent], event_type: int) -> list[RayEvent]:
    return [e for e in events if e.event_type == event_type]


def lifecycle_states(events: list[RayEvent]) -> dict[bytes, list[str]]:
    out: dict[bytes, list[str]] = {}
    for e in of_type(events, ET.TASK_LIFECYCLE_EVENT):
        p = e.task_lifecycle_event
        out.setdefault(p.task_id, []).extend(TaskStatus.Name(t.state) for t in p.state_transitions)
    return out


def test_rays_captured_spans_map_to_joined_task_and_actor_events() -> None:
    driver, tasks, actor = events_of_process(12444), events_of_process(12464), events_of_process(12538)
    definitions = {
        e.task_definition_event.task_id: e.task_definition_event
        for e in of_type(driver, ET.TASK_DEFINITION_EVENT)
    }
    job = ids.job_id(1)
    # Submit side: a definition per PRODUCER span; the driver-root INTERNAL span gives nothing.
    names = sorted(d.task_name for d in definitions.values())
    assert names == sorted(["leaf", "leaf", "leaf", "mid", "boom", "Acc.__init__"])
    assert all(
        states == ["PENDING_ARGS_AVAIL", "SUBMITTED_TO_WORKER"]
        for states in lifecycle_states(driver).values()
    )
    assert all(d.parent_task_id == ids.driver_task_id(job) for d in definitions.values())
    # Execute side in the task worker: the same derived ids, so both halves join into one task.
    executed = lifecycle_states(tasks)
    for task_id, states in executed.items():
        if task_id in definitions:
            assert states[0] == "RUNNING" and states[-1] in ("FINISHED", "FAILED")
    by_name = {definitions[t].task_name: t for t in executed if t in definitions}
    assert set(by_name) == {"leaf", "mid", "boom"}
    assert executed[by_name["boom"]] == ["RUNNING", "FAILED"]
    failed = [
        e.task_lifecycle_event
        for e in of_type(tasks, ET.TASK_LIFECYCLE_EVENT)
        if e.task_lifecycle_event.ray_error_info.error_message
    ]
    assert len(failed) == 1 and "ValueError: traced failure" in failed[0].ray_error_info.error_message
    assert failed[0].worker_pid == 12464 and failed[0].node_id.hex().startswith("d81bb597")
    # The leaf submitted from inside `mid` (a worker's PRODUCER span carries the *parent's* Ray task id):
    # its parent is mid's derived id, not the driver.
    [nested] = [e.task_definition_event for e in of_type(tasks, ET.TASK_DEFINITION_EVENT)]
    assert nested.task_name == "leaf" and nested.parent_task_id == by_name["mid"]
    # Actors: definition and creation task from the driver, ALIVE from the actor's worker, method
    # calls joined by (trace, producer span, actor id).
    actor_id = bytes.fromhex("8120f6171da3a1b94ae0b91a01000000")
    [adef] = of_type(driver, ET.ACTOR_DEFINITION_EVENT)
    assert (
        adef.actor_definition_event.actor_id == actor_id and adef.actor_definition_event.class_name == "Acc"
    )
    creation = definitions[ids.actor_creation_task_id(actor_id)]
    assert creation.task_type == 1  # ACTOR_CREATION_TASK
    alive = [
        t for e in of_type(actor, ET.ACTOR_LIFECYCLE_EVENT) for t in e.actor_lifecycle_event.state_transitions
    ]
    assert [(t.state, t.pid) for t in alive] == [(2, 12538)]  # ALIVE
    method_ids = {
        e.actor_task_definition_event.task_id for e in of_type(driver, ET.ACTOR_TASK_DEFINITION_EVENT)
    }
    assert len(method_ids) == 2 and all(t.endswith(actor_id) for t in method_ids)
    assert set(lifecycle_states(actor)) == method_ids | {ids.actor_creation_task_id(actor_id)}


def test_events_from_rays_spans_give_an_actor_lifetime_span() -> None:
    """No single process's spans see an actor's whole life (Ray kills actors without exit hooks), so
    the lifetime span is built from the event stream: the same converter the bridge runs."""
    events = events_of_process(12444) + events_of_process(12464) + events_of_process(12538)
    converter = RayEventsToOtel()
    emitted = converter.add(events)
    emitted.extend(converter.flush())
    [actor] = [e.span for e in emitted.spans if e.span.name == "actor Acc"]
    attrs = {kv.key: kv.value for kv in actor.attributes}
    assert attrs[semconv.RAY_ACTOR_ID].string_value == "8120f6171da3a1b94ae0b91a01000000"
    assert attrs[semconv.RAY_PID].string_value == "12538"  # where it lives, from its ALIVE transition
    assert [e.name for e in actor.events] == ["DEPENDENCIES_UNREADY", "PENDING_CREATION", "ALIVE"]
    # Ray's spans never show the death of a healthy actor: the span says it is incomplete.
    assert attrs[semconv.INCOMPLETE_ATTR].bool_value is True
    tasks = {e.span.name: e.span for e in emitted.spans}
    assert actor.trace_id == tasks["boom"].trace_id  # one trace per job


class Capture(svc_grpc.EventAggregatorServiceServicer):
    def __init__(self) -> None:
        self.events: list[RayEvent] = []
        self.lock = threading.Lock()

    def AddEvents(self, request: svc.AddEventsRequest, context: grpc.ServicerContext) -> svc.AddEventsReply:
        with self.lock:
            self.events.extend(request.events_data.events)
        return svc.AddEventsReply()


@pytest.fixture
def capture_servers() -> Iterator[list[tuple[Capture, str]]]:
    made: list[tuple[Capture, str, grpc.Server]] = []
    for _ in range(2):
        capture = Capture()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        svc_grpc.add_EventAggregatorServiceServicer_to_server(capture, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        made.append((capture, f"127.0.0.1:{port}", server))
    yield [(c, a) for c, a, _ in made]
    for _, _, server in made:
        server.stop(None)


def test_processor_output_equals_what_the_recorder_makes_of_the_same_events(
    capture_servers: list[tuple[Capture, str]],
) -> None:
    """Spans -> processor -> recorder gives exactly the recorder's merge of the raw events."""
    (got, got_addr), (want, want_addr) = capture_servers
    config = RecorderConfig(report_interval_ms=60_000, rpc_timeout_s=5.0)
    node = ids.node_id_for_host("test-node")
    recorder = RayEventRecorder.to_aggregator(got_addr, config=config, node_id=node)
    processor = TaskEventSpanProcessor([RecorderSink(recorder)], factory=EventFactory(session_name="sess"))
    provider = TracerProvider(resource=Resource.create({}))
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("test")
    job = ids.job_id(3)
    attrs = {
        "ray.remote": "function",
        "ray.function": "pkg.mod.work",
        "ray.pid": "4242",
        "ray.job_id": job.hex(),
        "ray.node_id": node.hex(),
        "ray.worker_id": "ab" * 28,
    }
    producer = tracer.start_span(
        "pkg.mod.work ray.remote", kind=SpanKind.PRODUCER, attributes=attrs, start_time=1_000
    )
    producer.end(end_time=2_000)
    parent_ctx = producer.get_span_context()
    from opentelemetry import trace

    consumer = tracer.start_span(
        "pkg.mod.work ray.remote_worker",
        kind=SpanKind.CONSUMER,
        attributes=attrs,
        context=trace.set_span_in_context(trace.NonRecordingSpan(parent_ctx)),
        start_time=3_000,
    )
    consumer.end(end_time=4_000)
    assert provider.force_flush()  # maps, hands to the recorder and flushes it

    task_id = derive_task_id(parent_ctx.trace_id, parent_ctx.span_id, ids.nil_actor_id(job))
    f = EventFactory(session_name="sess")
    raw = [
        f.task_definition(
            task_id=task_id,
            job_id=job,
            name="work",
            function=python_function("pkg.mod", "work"),
            parent_task_id=ids.driver_task_id(job),
            timestamp_ns=1_000,
        ),
        f.task_lifecycle(
            task_id=task_id, job_id=job, state=TaskStatus.PENDING_ARGS_AVAIL, timestamp_ns=1_000
        ),
        f.task_lifecycle(
            task_id=task_id, job_id=job, state=TaskStatus.SUBMITTED_TO_WORKER, timestamp_ns=2_000
        ),
    ]
    execute = {"node_id": node, "worker_id": bytes.fromhex("ab" * 28), "worker_pid": 4242}
    raw.append(
        f.task_lifecycle(task_id=task_id, job_id=job, state=TaskStatus.RUNNING, timestamp_ns=3_000, **execute)
    )
    raw.append(
        f.task_lifecycle(
            task_id=task_id, job_id=job, state=TaskStatus.FINISHED, timestamp_ns=4_000, **execute
        )
    )
    reference = RayEventRecorder.to_aggregator(want_addr, config=config, node_id=node)
    reference.add_many(raw)
    assert reference.flush(10)

    def comparable(events: list[RayEvent]) -> list[dict[str, Any]]:
        out = []
        for event in events:
            copy = RayEvent()
            copy.CopyFrom(event)
            copy.ClearField("event_id")  # fresh per export by design
            out.append(json_format.MessageToDict(copy))
        return out

    assert len(want.events) == 2  # one definition, one lifecycle with 4 merged transitions
    assert comparable(got.events) == comparable(want.events)
    states = [TaskStatus.Name(t.state) for t in got.events[1].task_lifecycle_event.state_transitions]
    assert states == ["PENDING_ARGS_AVAIL", "SUBMITTED_TO_WORKER", "RUNNING", "FINISHED"]
    stats = processor.stats()
    assert stats["events"] == 4  # the submit span's two transitions come as one event
    assert (stats["submit_spans"], stats["execute_spans"], stats["mapped_spans"]) == (1, 1, 3)
    recorder.stop(5)
    reference.stop(5)
    provider.shutdown()


def test_pool_task_events_reach_a_real_aggregator_and_its_sink(tmp_path: Path) -> None:
    out = tmp_path / "sink.jsonl"
    sink = CliServer("sink", "--out", str(out))
    aggregator = CliServer("aggregator", "--export-addr", f"http://{sink.address}/v1/events")
    try:
        env = script_env(tmp_path / "spans", {"RAY_OTEL_EVENTS_AGGREGATOR_ADDRESS": aggregator.address})
        summary, stderr = run_pool({"hook": LOCAL_HOOK, "tasks": 3, "fail": True, "max_workers": 2}, env)
        assert "failure" in summary
        stats = aggregator.stop()  # every pool process flushed its recorder before exiting
        sink.stop()
    finally:
        aggregator.close()
        sink.close()
    events = read_jsonl(out)
    assert stats["received_total"] == len(events) > 0, stderr
    definitions = {
        e["taskDefinitionEvent"]["taskId"]: e["taskDefinitionEvent"]
        for e in events
        if "taskDefinitionEvent" in e
    }
    states: dict[str, list[str]] = {}
    for e in sorted((e for e in events if "taskLifecycleEvent" in e), key=lambda e: e["timestamp"]):
        states.setdefault(e["taskLifecycleEvent"]["taskId"], []).extend(
            t["state"] for t in e["taskLifecycleEvent"]["stateTransitions"]
        )
    assert set(states) == set(definitions) and len(definitions) == 3 + 1 + 4
    for task_id, definition in definitions.items():
        terminal = "FAILED" if definition["taskName"] == "fail" else "FINISHED"
        assert states[task_id] == ["PENDING_ARGS_AVAIL", "SUBMITTED_TO_WORKER", "RUNNING", terminal], (
            definition
        )
    assert len({e["eventId"] for e in events}) == len(events)
