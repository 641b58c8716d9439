"""The OTLP hook's event sink against a real HTTP server: the same records the SDK's logs pipeline
sends, retried when the server asks, dropped and counted when it refuses, never a hang at exit."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.agg_procs import returns, wait_until
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import SpanContext, TraceFlags

from ray_otel_events.config import otlp_signal_config
from ray_otel_events.events import ids
from ray_otel_events.events.builders import EventFactory, TaskStatus, TaskType
from ray_otel_events.otel import semconv
from ray_otel_events.otel.task_spans import SpanEvent, TaskDefinition, TaskTransitions, build_event
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent
from ray_otel_events.tracing.otlp_event_logs import DROPPED, EXPORTED, OtlpEventLogSink
from ray_otel_events.tracing.task_events import PRODUCER, EventLogEmitter
from tests.helpers.otlp_receiver import RecordingReceiver, serve_receiver


class Receiver(RecordingReceiver):
    """Answers POST /v1/logs with the next scripted status (200 once the script runs out)."""

    def records(self) -> list[tuple[Any, Any, Any]]:
        """(resource, scope, record) of every record of every accepted request."""
        out = []
        for headers, body in self.requests:
            if headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            request = ExportLogsServiceRequest.FromString(body)
            for rl in request.resource_logs:
                for sl in rl.scope_logs:
                    out.extend((rl.resource, sl.scope, record) for record in sl.log_records)
        return out


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    state = Receiver()
    with serve_receiver(state) as url:
        yield state, url


RESOURCE = Resource.create({"service.name": "events-under-test"})


def _events() -> list[SpanEvent]:
    """Three tasks' definition and RUNNING events as the processor hands them over: the first two
    tasks' as their facts (written by shape), the third's as built events."""
    factory = EventFactory(session_name="s")
    job = ids.job_id(3)
    out = []
    for i in range(3):
        task = ids.new_task_id(job)
        context = SpanContext(0x1234 + i, 0x99 + i, is_remote=False, trace_flags=TraceFlags(1))
        definition = TaskDefinition(
            event_type=RayEvent.TASK_DEFINITION_EVENT,
            task_id=task,
            job=job,
            actor=b"",
            name="f",
            module="m",
            function="f",
            class_name="",
            task_type=TaskType.NORMAL_TASK,
            parent_task=b"",
            timestamp_ns=10 + i,
        )
        running = TaskTransitions(task, job, ((TaskStatus.RUNNING, 20 + i),), b"", b"", 0, None)
        if i < 2:
            out += [SpanEvent(context, facts=facts, factory=factory) for facts in (definition, running)]
        else:
            out += [SpanEvent(context, event=build_event(factory, facts)) for facts in (definition, running)]
    return out


def _sink(endpoint: str, **env: str) -> OtlpEventLogSink:
    config = otlp_signal_config("logs", env={"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, **env})
    return OtlpEventLogSink(config, dict(RESOURCE.attributes), producer=PRODUCER)


def test_records_equal_what_the_sdk_logs_pipeline_sends(receiver: tuple[Receiver, str]) -> None:
    state, endpoint = receiver
    events = _events()
    ours = _sink(endpoint)
    ours.consume(events, prompt=False)
    assert ours.flush(5.0)
    provider = LoggerProvider(resource=RESOURCE)
    provider.add_log_record_processor(
        SimpleLogRecordProcessor(OTLPLogExporter(endpoint=endpoint + "/v1/logs"))
    )
    EventLogEmitter(provider.get_logger(semconv.INSTRUMENTATION_SCOPE)).consume(events, prompt=False)
    provider.shutdown()
    received = state.records()
    assert len(received) == 2 * len(events)
    mine, sdk = received[: len(events)], received[len(events) :]
    for (res_a, scope_a, a), (res_b, scope_b, b) in zip(mine, sdk, strict=True):
        assert res_a == res_b and scope_a == scope_b
        a.observed_time_unix_nano = b.observed_time_unix_nano = 0
        assert a.body == b.body
        assert {kv.key: kv.value for kv in a.attributes} == {kv.key: kv.value for kv in b.attributes}
        a.ClearField("attributes")
        b.ClearField("attributes")
        assert a == b  # times, severity, event name, trace and span ids, flags
    _, _, first = mine[0]
    assert first.trace_id == (0x1234).to_bytes(16, "big") and first.flags == 1


def test_a_retryable_status_is_retried_and_gzip_is_honoured(receiver: tuple[Receiver, str]) -> None:
    state, endpoint = receiver
    state.statuses = [503, 503]
    sink = _sink(endpoint, OTEL_EXPORTER_OTLP_COMPRESSION="gzip")
    sink.consume(_events(), prompt=False)
    assert sink.flush(10.0)
    assert len(state.records()) == 6 and state.requests[0][0]["Content-Encoding"] == "gzip"
    assert sink.counters.get(EXPORTED) == 6 and sink.counters.get(DROPPED) == 0


def test_a_refused_batch_is_dropped_and_counted_and_the_next_goes_through(
    receiver: tuple[Receiver, str],
) -> None:
    state, endpoint = receiver
    state.statuses = [400]
    sink = _sink(endpoint)
    sink.consume(_events(), prompt=False)
    assert not sink.flush(5.0)
    assert sink.counters.get(DROPPED, reason="rejected") == 6
    sink.consume(_events(), prompt=False)
    assert sink.flush(5.0) and len(state.records()) == 6


def test_no_server_costs_a_bounded_flush_and_the_queue_keeps_its_bound() -> None:
    sink = _sink("http://127.0.0.1:9", OTEL_EXPORTER_OTLP_TIMEOUT="500")
    sink.max_queue = 4
    sink.max_batch = 100

    def consume_and_flush() -> bool:
        sink.consume(_events(), prompt=False)  # 6 records, bound 4: the 2 oldest go
        return sink.flush(1.0)

    # the flush gives up at its timeout (the deadline of `returns` only fails one that never does)
    assert returns(consume_and_flush, "a flush with no server") is False
    assert sink.counters.get(DROPPED, reason="queue_full") == 2
    assert sink.counters.get(DROPPED, reason="retries_exhausted") == 4 and sink.pending() == 0


def test_records_leave_soon_without_a_flush(receiver: tuple[Receiver, str]) -> None:
    state, endpoint = receiver
    sink = _sink(endpoint)
    sink.consume(_events(), prompt=False)
    wait_until(lambda: len(state.records()) >= 6, "the records sent without a flush")
    assert len(state.records()) == 6


def test_only_http_protobuf_is_taken() -> None:
    config = otlp_signal_config("logs", env={"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})
    with pytest.raises(ValueError, match="http/protobuf"):
        OtlpEventLogSink(config, {}, producer=PRODUCER)
