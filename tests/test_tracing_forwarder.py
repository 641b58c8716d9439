"""The spool's forwarder on its own: spans and log records read back as they were written, the
spool's bound and a refused request counted (not silent), and its command line."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import orjson
from helpers.agg_procs import free_port, wait_until
from helpers.otlp_receiver import RecordingReceiver, serve_receiver
from opentelemetry._logs import SeverityNumber
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
    set_span_in_context,
)

from ray_otel_events.config import OtlpSignalConfig, SpoolConfig
from ray_otel_events.events.builders import EventFactory
from ray_otel_events.metrics import Counters
from ray_otel_events.otel import otlp_wire, semconv
from ray_otel_events.otel.log_records import log_record_wire
from ray_otel_events.otel.otlp_span_encoder import spans_request
from ray_otel_events.otel.task_spans import TaskSpanEvents
from ray_otel_events.tracing.forwarder import Forwarder, Sender, _Writer, span_from_line
from ray_otel_events.tracing.otlp_http import OtlpHttpPoster
from ray_otel_events.tracing.spool import (
    ENDED,
    STARTED_REF,
    SpoolLogRecordProcessor,
    SpoolSpanProcessor,
    SpoolWriter,
    header_line,
    span_line,
)
from ray_otel_events.tracing.task_events import PRODUCER
from ray_otel_events.tracing.task_logs import TaskLogHandler

RESOURCE = Resource({"service.name": "spool-test", "n": 3})
SESSION = "session_2026-12-02_00-39-55_034171_10213"


def _spans(n: int) -> list[ReadableSpan]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("spool.test", "1.2")
    for i in range(n):
        with tracer.start_as_current_span(
            "outer", attributes={"i": i, "f": 0.5, "ok": True, "tags": ["a", "b"]}
        ) as outer:
            outer.add_event("step", {"k": "v"})
            with tracer.start_as_current_span(
                "inner", kind=SpanKind.CLIENT, links=[Link(outer.get_span_context(), {"why": "test"})]
            ) as inner:
                inner.set_status(Status(StatusCode.ERROR, "broke"))
    return list(exporter.get_finished_spans())


def test_a_spooled_span_is_sent_as_the_span_itself() -> None:
    """The bytes sent for a span read back from its line are those of the span as it ended."""
    spans = _spans(2)
    writer = _Writer(RESOURCE, b"", mapper=None)  # type: ignore[arg-type]  # no events here
    read = [span_from_line(orjson.loads(span_line(s, ENDED)), writer, False) for s in spans]
    assert spans_request(read) == spans_request(spans)
    context = spans[0].context
    assert context is not None
    state = TraceState([("k", "v")])
    spans[0]._context = SpanContext(context.trace_id, context.span_id, False, context.trace_flags, state)
    again = span_from_line(orjson.loads(span_line(spans[0], ENDED)), writer, False)
    assert again.context is not None and again.context.trace_state == state
    assert spans_request([again]) == spans_request(spans[:1])


def _write_files(folder: Path, files: int, spans_each: int) -> None:
    for _ in range(files):
        writer = SpoolWriter(str(folder), header_line(RESOURCE), start_forwarder=False)
        lines = b"".join(span_line(s, ENDED) for s in _spans(spans_each // 2))
        assert writer.write(lines, spans_each)
        writer.close()  # complete: its lock is let go


def _forwarder(folder: Path, endpoint: str, **spool: float) -> Forwarder:
    """A forwarder posting to `endpoint`; a live file's lines are sent at once unless `linger_s`
    says otherwise."""
    counters = Counters("spool_forwarder")
    senders: dict[str, Sender] = {
        signal: OtlpHttpPoster(
            OtlpSignalConfig(f"{endpoint}/v1/{signal}", timeout_s=2), counters, exported="x"
        )
        for signal in ("traces", "logs")
    }
    config = SpoolConfig(root=str(folder.parent), **{"linger_s": 0.0, **spool})  # type: ignore[arg-type]
    return Forwarder(str(folder), config, senders, counters=counters)


def test_past_its_bound_the_oldest_complete_files_are_dropped_and_counted(tmp_path: Path) -> None:
    folder = tmp_path / "spool" / "dest"
    _write_files(folder, 3, 40)
    files = sorted(folder.glob("*.spool"), key=lambda p: p.stat().st_mtime)
    size = files[0].stat().st_size
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens: every send fails, retryably
    forwarder = _forwarder(folder, down, max_bytes=2 * size + size // 2)
    forwarder.pass_once()
    left = sorted(folder.glob("*.spool"))
    assert left == sorted(files[1:])  # the oldest went, the rest wait for the endpoint
    assert forwarder.counters.get("dropped_lines", reason="spool_full") == 40
    assert forwarder.counters.get("retryable_failures") == 1
    assert forwarder.failing_since is not None


def test_a_refused_request_is_dropped_counted_and_reported(tmp_path: Path, caplog: object) -> None:
    folder = tmp_path / "spool" / "dest"
    _write_files(folder, 1, 10)
    receiver = RecordingReceiver()
    receiver.statuses = [400]  # the spans' request is refused for good
    with serve_receiver(receiver) as endpoint:
        forwarder = _forwarder(folder, endpoint)
        assert forwarder.pass_once()
    assert forwarder.counters.get("dropped_spans", reason="rejected") == 10
    assert not list(folder.glob("*.spool")), "a refused request is not retried forever"
    assert "10 spans refused" in str(getattr(caplog, "text", ""))


def test_a_live_file_is_sent_as_it_grows_and_kept_until_complete(tmp_path: Path) -> None:
    folder = tmp_path / "spool" / "dest"
    writer = SpoolWriter(str(folder), header_line(RESOURCE), start_forwarder=False)
    spans = _spans(3)
    receiver = RecordingReceiver()
    with serve_receiver(receiver) as endpoint:
        forwarder = _forwarder(folder, endpoint)
        writer.write(span_line(spans[0], ENDED), 1)
        assert forwarder.pass_once()
        assert forwarder.live_writers == 1 and len(list(folder.glob("*.spool"))) == 1
        writer.write(b"".join(span_line(s, ENDED) for s in spans[1:]), len(spans) - 1)
        writer.close()
        forwarder.pass_once()
    assert not list(folder.glob("*.spool*")) and forwarder.live_writers == 0
    sent = [ExportTraceServiceRequest.FromString(body) for _, body in receiver.requests]
    names = [s.name for r in sent for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert sorted(names) == sorted(s.name for s in spans)  # each once, in two requests
    assert len(sent) == 2


def test_a_complete_file_failing_to_send_leaves_no_writer_counted(tmp_path: Path) -> None:
    """The forwarder finds a file complete by taking its lock, and keeps that descriptor while the
    endpoint fails: the file's writer is gone all the same, so that the forwarder gives up for now
    once it has failed for `retry_s` (its lock must not read as a writer's)."""
    folder = tmp_path / "spool" / "dest"
    _write_files(folder, 1, 4)
    forwarder = _forwarder(folder, f"http://127.0.0.1:{free_port()}")
    for _ in range(3):
        forwarder.pass_once()
        assert forwarder.live_writers == 0
    assert forwarder.counters.get("retryable_failures") == 3 and forwarder.failing_since is not None


def test_a_live_file_lingers_for_fewer_larger_requests(tmp_path: Path) -> None:
    """A file still being written is sent once its lines waited `linger_s` (or reach
    `linger_bytes`), not at every sweep: each request costs about as much as hundreds of spans."""
    folder = tmp_path / "spool" / "dest"
    writer = SpoolWriter(str(folder), header_line(RESOURCE), start_forwarder=False)
    spans = _spans(2)
    receiver = RecordingReceiver()
    with serve_receiver(receiver) as endpoint:
        forwarder = _forwarder(folder, endpoint, linger_s=0.3)
        writer.write(span_line(spans[0], ENDED), 1)
        assert not forwarder.pass_once() and not receiver.requests  # waits for more
        writer.write(b"".join(span_line(s, ENDED) for s in spans[1:]), len(spans) - 1)
        wait_until(forwarder.pass_once, "the lines sent once they waited linger_s")
        assert len(receiver.requests) == 1  # both writes' lines, in one request
        big = _forwarder(folder, endpoint, linger_s=60.0, linger_bytes=1)
        writer.write(span_line(spans[0], ENDED), 1)
        assert big.pass_once()  # past linger_bytes: at once
        writer.close()
    sent = [ExportTraceServiceRequest.FromString(body) for _, body in receiver.requests]
    assert (
        sum(len(ss.spans) for r in sent for rs in r.resource_spans for ss in rs.scope_spans) == len(spans) + 1
    )


def test_forwarder_command_line_refuses_a_missing_folder(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ray_otel_events.tracing.forwarder", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "usage" in out.stderr and "Traceback" not in out.stderr


def _task_spans() -> tuple[list[tuple[str, ReadableSpan]], list[ReadableSpan]]:
    """Spans of the kinds the forwarder meets, in the order a traced process writes them:
    (ENDED or STARTED_REF, span) with every task span marked as the hook marks it, and the spans
    in their state at start (the RUNNING records are made from the start)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    ray_tracer = provider.get_tracer("ray.util.tracing.tracing_helper")
    other = provider.get_tracer("spool.test", "1.2", schema_url="https://example.com/s")
    job = {"ray.job_id": "01000000", "ray.pid": "42", "ray.node_id": "ab" * 28, "ray.worker_id": "cd" * 28}
    mark = {semconv.PRODUCER_ATTR: PRODUCER}
    actor = {"ray.remote": "actor", "ray.actor_id": "12" * 16, "ray.actor_class": "m.Counter"}
    kinds: list[tuple[str, dict[str, object], bool]] = [
        ("m.f", {"ray.remote": "function", "ray.function": "m.f"}, False),
        ("m.f", {"ray.remote": "function", "ray.function": "m.f"}, True),  # fails
        ("Counter.__init__", {**actor, "ray.actor_method": "__init__"}, False),
        ("Counter.add", {**actor, "ray.actor_method": "add"}, False),
        ("Counter.add", {**actor, "ray.actor_method": "add"}, True),
    ]
    order: list[tuple[str, ReadableSpan]] = []
    for i, (name, attrs, fails) in enumerate(kinds * 3):
        with ray_tracer.start_as_current_span(
            f"{name} ray.remote", kind=SpanKind.PRODUCER, attributes={**job, **attrs, **mark}
        ) as submit:
            pass
        remote = NonRecordingSpan(
            SpanContext(submit.context.trace_id, submit.context.span_id, True, TraceFlags(1))
        )
        executing = {**job, **attrs, "ray.task_id": f"{i:048x}", **mark}
        with ray_tracer.start_as_current_span(
            f"{name} ray.remote_worker",
            context=set_span_in_context(remote),
            kind=SpanKind.CONSUMER,
            attributes=executing,
            record_exception=False,
            set_status_on_exception=False,
        ) as execute:
            with other.start_as_current_span("inner", links=[Link(submit.context, {"why": "test"})]) as inner:
                inner.add_event("step", {"k": i})
                inner.set_status(Status(StatusCode.OK))
            if fails:
                execute.record_exception(RuntimeError(f"task {i} broke"))
                execute.set_status(Status(StatusCode.ERROR, "broke"))
            elif i % 2:
                execute.set_status(Status(StatusCode.OK))
        ended = {s.context.span_id: s for s in exporter.get_finished_spans()}
        order += [
            (ENDED, ended[submit.context.span_id]),
            (STARTED_REF, ended[execute.context.span_id]),
            (ENDED, ended[inner.context.span_id]),
            (ENDED, ended[execute.context.span_id]),
        ]
    return order, [span for kind, span in order if kind == ENDED]


def test_the_forwarder_sends_what_the_spans_themselves_encode_to(tmp_path: Path) -> None:
    """Spans and event records sent from a spool are byte for byte the SDK spans' request and
    the records of the RayEvents the same spans map to (`log_record_wire`, event by event), in the
    session the writer's header names (its Ray cluster's)."""
    order, ended = _task_spans()
    folder = tmp_path / "spool" / "dest"
    writer = SpoolWriter(str(folder), header_line(RESOURCE, SESSION), start_forwarder=False)
    lines = [
        span_line(span, ENDED) if kind == ENDED else orjson.dumps([STARTED_REF, span.context.span_id]) + b"\n"
        for kind, span in order
    ]
    assert writer.write(b"".join(lines), len(lines))
    writer.close()
    receiver = RecordingReceiver()
    with serve_receiver(receiver) as endpoint:
        forwarder = _forwarder(folder, endpoint)
        forwarder.clock = lambda: 1_700_000_000_123_456_789
        assert forwarder.pass_once()
    assert forwarder.counters.get("unmapped_spans") == 0
    (_, traces), (_, logs) = receiver.requests
    assert traces == spans_request(ended)

    mapper = TaskSpanEvents(EventFactory(SESSION))
    events = []
    for kind, span in order:
        events += mapper.started(span) if kind == STARTED_REF else mapper.ended(span)
    extra = otlp_wire.attributes({semconv.PRODUCER_ATTR: PRODUCER}, otlp_wire.LOG_RECORD_ATTRIBUTES)
    records = []
    for item in events:
        context = item.span_context
        records.append(
            log_record_wire(
                item.event,
                context.trace_id.to_bytes(16, "big"),
                context.span_id.to_bytes(8, "big"),
                1_700_000_000_123_456_789,
                flags=int(context.trace_flags),
                extra_attributes=extra,
            )
        )
    assert len(records) == 5 * 3 * 4 + 3 * 3  # four per task, three more per actor creation
    scope = otlp_wire.string_field(b"\x0a", semconv.INSTRUMENTATION_SCOPE)
    assert logs == otlp_wire.logs_request(
        otlp_wire.attributes(dict(RESOURCE.attributes), b"\x0a"), scope, records
    )
    sent = ExportLogsServiceRequest.FromString(logs)
    assert any("task 4 broke" in str(r.body) for r in sent.resource_logs[0].scope_logs[0].log_records)
    assert SESSION in str(sent.resource_logs[0].scope_logs[0].log_records[0].body)


def _spooled_log_records(folder: Path) -> list[ReadableLogRecord]:
    """Log records of the kinds a traced task emits (a printed line, `logging` with and without an
    exception, a structured body, an event), inside a span and outside one, written to a spool
    file by the hook's processor, and the same records as the SDK's exporter is handed them."""
    spans = SpoolSpanProcessor(str(folder), RESOURCE)
    spans.writer.start_forwarder = False
    exported = InMemoryLogRecordExporter()
    provider = LoggerProvider(resource=RESOURCE)
    provider.add_log_record_processor(SpoolLogRecordProcessor(spans))
    provider.add_log_record_processor(SimpleLogRecordProcessor(exported))
    tracer = TracerProvider(resource=RESOURCE).get_tracer("spool.test")
    lines = provider.get_logger("ray_otel_events.task_logs")
    logged = logging.getLogger("user.code")
    logged.propagate = False
    handler = TaskLogHandler(logger_provider=provider)  # the hooks' handler on the root logger
    logged.addHandler(handler)
    try:
        with tracer.start_as_current_span("work ray.remote_worker"):
            task = {"ray.task_id": "ab" * 12, "ray.task_attempt": 0, "process.pid": 4242}
            for stream, number, text in (
                ("stdout", SeverityNumber.INFO, "INFO"),
                ("stderr", SeverityNumber.ERROR, "ERROR"),
            ):
                lines.emit(
                    timestamp=1_700_000_000_000_000_001,
                    severity_number=number,
                    severity_text=text,
                    body=f"a line to {stream} é",
                    attributes={**task, "log.iostream": stream},
                )
            logged.warning("logged %d", 3)
            try:
                raise ValueError("broke")
            except ValueError:
                logged.exception("it broke")
            lines.emit(body={"n": 1, "f": 0.5, "ok": True, "tags": ["a", 2], "nested": {"k": "v"}})
        provider.get_logger("other.scope", "1.2", "https://schema.example").emit(
            event_name="user.event", body="outside any span", attributes={"x": [1, 2]}
        )
    finally:
        logged.removeHandler(handler)
    spans.shutdown()
    return list(exported.get_finished_logs())


def test_a_spooled_log_record_is_sent_as_the_sdk_exporter_sends_it(tmp_path: Path) -> None:
    """A task's log records go through the spool (Ray may end the worker right after the task)
    and arrive as the SDK's OTLP log exporter would have sent them: the same request."""
    folder = tmp_path / "spool" / "dest"
    records = _spooled_log_records(folder)
    assert len(records) == 6
    receiver = RecordingReceiver()
    with serve_receiver(receiver) as endpoint:
        forwarder = _forwarder(folder, endpoint)
        assert forwarder.pass_once()
    assert receiver.paths == ["/v1/logs"]
    sent = ExportLogsServiceRequest.FromString(receiver.requests[0][1])
    assert sent == encode_logs(records)
    assert forwarder.counters.get("exported_log_records") == 6
    assert not list(folder.glob("*.spool")), "sent and acknowledged: deleted"


def test_a_refused_log_request_is_dropped_and_counted(tmp_path: Path) -> None:
    folder = tmp_path / "spool" / "dest"
    _spooled_log_records(folder)
    receiver = RecordingReceiver()
    receiver.statuses = [400]
    with serve_receiver(receiver) as endpoint:
        forwarder = _forwarder(folder, endpoint)
        assert forwarder.pass_once()
    assert forwarder.counters.get("dropped_log_records", reason="rejected") == 6
    assert not list(folder.glob("*.spool"))
