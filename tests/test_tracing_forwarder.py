"""The spool's forwarder on its own: spans read back as they were written, the spool's bound and
a refused request counted (not silent), and its command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
from helpers.agg_procs import free_port
from helpers.otlp_receiver import RecordingReceiver, serve_receiver
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceState

from ray_otel_events.config import OtlpSignalConfig, SpoolConfig
from ray_otel_events.metrics import Counters
from ray_otel_events.otel.otlp_span_encoder import spans_request
from ray_otel_events.tracing.forwarder import Forwarder, Sender, _Writer, span_from_line
from ray_otel_events.tracing.otlp_http import OtlpHttpPoster
from ray_otel_events.tracing.spool import ENDED, SpoolWriter, header_line, span_line

RESOURCE = Resource({"service.name": "spool-test", "n": 3})


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


def _forwarder(folder: Path, endpoint: str, **spool: int) -> Forwarder:
    counters = Counters("spool_forwarder")
    senders: dict[str, Sender] = {
        signal: OtlpHttpPoster(
            OtlpSignalConfig(f"{endpoint}/v1/{signal}", timeout_s=2), counters, exported="x"
        )
        for signal in ("traces", "logs")
    }
    return Forwarder(str(folder), SpoolConfig(root=str(folder.parent), **spool), senders, counters=counters)


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


def test_forwarder_command_line_refuses_a_missing_folder(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ray_otel_events.tracing.forwarder", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "usage" in out.stderr and "Traceback" not in out.stderr
