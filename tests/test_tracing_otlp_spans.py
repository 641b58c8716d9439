"""The OTLP hook's span requests, written by our encoder, against the SDK's own `encode_spans`
(byte for byte, over random spans made by real SDK and DirectSpan tracers, compiled writers on
and off), and posted by the exporter to a real OTLP/HTTP receiver."""

from __future__ import annotations

import functools
import gzip
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind, Status, StatusCode, TraceState

from ray_otel_events.config import OtlpSignalConfig
from ray_otel_events.otel import otlp_wire
from ray_otel_events.otel.otlp_span_encoder import spans_request
from ray_otel_events.tracing.otlp import (
    PerProcessLogRecordExporter,
    PerProcessSpanExporter,
    otlp_log_exporter,
    otlp_span_exporter,
)
from ray_otel_events.tracing.otlp_http import DROPPED
from ray_otel_events.tracing.otlp_spans import EXPORTED, OtlpHttpSpanExporter
from ray_otel_events.tracing.provider import CachingTracerProvider
from tests.helpers.examples import examples
from tests.helpers.otlp_receiver import RecordingReceiver, serve_receiver


class Kept(SpanExporter):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS


scalars = st.one_of(
    st.text(max_size=8),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
)
values = st.one_of(
    scalars,
    st.lists(st.text(max_size=4), max_size=3).map(tuple),
    st.lists(st.integers(min_value=-5, max_value=5), max_size=3).map(tuple),
)
attributes = st.dictionaries(st.text(min_size=1, max_size=6), values, max_size=5)
span_plans = st.lists(
    st.fixed_dictionaries(
        {
            "name": st.text(max_size=10),
            "kind": st.sampled_from(list(SpanKind)),
            "attributes": attributes,
            "events": st.lists(st.tuples(st.text(max_size=5), attributes), max_size=3),
            "status": st.sampled_from([None, (StatusCode.OK, None), (StatusCode.ERROR, "boom")]),
            "child": st.booleans(),
            "link": st.booleans(),
            "scope": st.sampled_from(["a", "b"]),
        }
    ),
    min_size=1,
    max_size=6,
)


def _spans(direct: bool, plans: list[dict[str, Any]]) -> list[ReadableSpan]:
    kept = Kept()
    resource = Resource.create({"service.name": "s", "n": 1})
    provider = (CachingTracerProvider if direct else TracerProvider)(resource=resource)
    provider.add_span_processor(SimpleSpanProcessor(kept))
    for plan in plans:
        tracer = provider.get_tracer(plan["scope"])
        span = tracer.start_span(plan["name"], kind=plan["kind"], attributes=plan["attributes"])
        for name, attrs in plan["events"]:
            span.add_event(name, attrs, timestamp=1_700_000_000_123_456_789)
        if plan["status"] is not None:
            span.set_status(Status(*plan["status"]))
        if plan["link"]:
            span.add_link(span.get_span_context(), {"why": "test"})
        if plan["child"]:
            from opentelemetry import trace

            with trace.use_span(span):
                tracer.start_span("child").end()
        span.end()
    return kept.spans


def _plain_span(kind: SpanKind, attributes: dict[str, Any], *, child: bool) -> dict[str, Any]:
    """The plan of one span named "n" in scope "a", with no events, status or link."""
    return {
        "name": "n",
        "kind": kind,
        "attributes": attributes,
        "events": [],
        "status": None,
        "child": child,
        "link": False,
        "scope": "a",
    }


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("direct", [True, False])
@settings(max_examples=examples(60), deadline=None)
@given(plans=span_plans)
def test_requests_are_the_sdk_encoders_bytes(
    direct: bool, compiled: bool, plans: list[dict[str, Any]]
) -> None:
    with pytest.MonkeyPatch.context() as patch:  # the compiled writers off: their Python twins
        patch.setattr(otlp_wire, "_compiled", compiled and otlp_wire._compiled)
        spans = _spans(direct, plans)
        assert spans_request(spans) == encode_spans(spans).SerializeToString()


def test_remote_parents_trace_state_and_open_times_as_the_sdk_writes_them() -> None:
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    kept = Kept()
    provider = CachingTracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(kept))
    remote = SpanContext(
        1 << 100, 77, is_remote=True, trace_flags=TraceFlags(1), trace_state=TraceState([("k", "v")])
    )
    tracer = provider.get_tracer("x")
    tracer.start_span("under a remote parent", trace.set_span_in_context(NonRecordingSpan(remote))).end()
    assert kept.spans[0].parent is not None and kept.spans[0].parent.is_remote
    assert spans_request(kept.spans) == encode_spans(kept.spans).SerializeToString()


@pytest.fixture
def receiver() -> Iterator[tuple[list[tuple[dict[str, str], bytes]], list[int], str]]:
    state = RecordingReceiver()
    with serve_receiver(state) as url:
        yield state.requests, state.statuses, url + "/v1/traces"


def test_the_exporter_posts_the_request_retries_and_honours_gzip(
    receiver: tuple[list[tuple[dict[str, str], bytes]], list[int], str],
) -> None:
    got, statuses, endpoint = receiver
    spans = _spans(True, [_plain_span(SpanKind.PRODUCER, {"a": "b"}, child=True)])
    statuses.append(503)
    exporter = OtlpHttpSpanExporter(
        OtlpSignalConfig(endpoint, headers=(("x-token", "t"),), compression="gzip", timeout_s=5)
    )
    assert exporter.export(spans) is SpanExportResult.SUCCESS
    ((headers, body),) = got
    assert headers["Content-Type"] == "application/x-protobuf" and headers["x-token"] == "t"
    request = ExportTraceServiceRequest.FromString(gzip.decompress(body))
    assert request == encode_spans(spans)
    assert exporter.counters.get(EXPORTED) == 2


def test_a_refused_request_is_counted_and_reported_as_failed(
    receiver: tuple[list[tuple[dict[str, str], bytes]], list[int], str],
) -> None:
    got, statuses, endpoint = receiver
    spans = _spans(True, [_plain_span(SpanKind.INTERNAL, {}, child=False)])
    statuses.append(400)
    exporter = OtlpHttpSpanExporter(OtlpSignalConfig(endpoint, timeout_s=5))
    assert exporter.export(spans) is SpanExportResult.FAILURE
    assert exporter.counters.get(DROPPED, reason="rejected") == 1 and not got
    assert exporter.export(spans) is SpanExportResult.SUCCESS and len(got) == 1


CLIENT_TLS = tuple(
    f"OTEL_EXPORTER_OTLP{signal}_{name}"
    for signal in ("", "_TRACES")
    for name in ("CLIENT_CERTIFICATE", "CLIENT_KEY")
)


def test_settings_the_sdk_reads_its_own_way_keep_the_sdk_exporter(monkeypatch: pytest.MonkeyPatch) -> None:
    """A compression other than gzip: the SDK's exporter; grpc is always the SDK's. A client
    certificate and key are our exporter's own settings (mutual TLS)."""
    for name in (
        *CLIENT_TLS,
        "OTEL_EXPORTER_OTLP_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_COMPRESSION",
        "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    assert isinstance(otlp_span_exporter("http/protobuf"), OtlpHttpSpanExporter)
    assert isinstance(otlp_span_exporter("grpc"), PerProcessSpanExporter)
    with monkeypatch.context() as patch:
        patch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "deflate")
        assert isinstance(otlp_span_exporter("http/protobuf"), PerProcessSpanExporter)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "/cert.pem")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", "/key.pem")
    ours = otlp_span_exporter("http/protobuf")
    assert isinstance(ours, OtlpHttpSpanExporter)
    assert (ours._poster.config.client_certificate, ours._poster.config.client_key) == (
        "/cert.pem",
        "/key.pem",
    )


def test_a_timeout_is_milliseconds_to_every_exporter_of_the_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    """The spec's milliseconds, which our exporters read: the SDK's exporters (grpc, or HTTP with a
    compression ours does not take), which read the same variable as seconds, are given it in
    seconds."""
    for name in (
        *CLIENT_TLS,
        "OTEL_EXPORTER_OTLP_COMPRESSION",
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "2500")
    ours = otlp_span_exporter("http/protobuf")
    assert isinstance(ours, OtlpHttpSpanExporter)
    assert ours._poster.config.timeout_s == 2.5
    sdk_made = [otlp_span_exporter("grpc"), otlp_log_exporter("grpc"), otlp_log_exporter("http/protobuf")]
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "deflate")
    sdk_made.append(otlp_span_exporter("http/protobuf"))
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_COMPRESSION")
    for exporter in sdk_made:
        assert isinstance(exporter, PerProcessSpanExporter | PerProcessLogRecordExporter)
        assert exporter._factory.keywords == {"timeout": 2.5}, exporter
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")  # the hook's protocol: the same seconds
    for exporter in (otlp_span_exporter("grpc"), otlp_log_exporter("grpc")):
        assert isinstance(exporter, PerProcessSpanExporter | PerProcessLogRecordExporter)
        assert exporter._factory.keywords == {"timeout": 2.5}, exporter
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TIMEOUT")
    unset = otlp_span_exporter("grpc")
    assert isinstance(unset, PerProcessSpanExporter)
    assert not isinstance(unset._factory, functools.partial)  # the SDK reads its own variables


def _closing_endpoint(requests_seen: list[bytes]) -> tuple[str, Any]:
    """An HTTP/1.1 endpoint that answers 200 and then closes the connection without saying so
    (as a server ending an idle keep-alive connection does)."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        for _ in range(3):
            conn, _ = server.accept()
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                length = int(
                    next(
                        line.split(b":")[1]
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    )
                )
                while len(body) < length:
                    body += conn.recv(65536)
                requests_seen.append(body)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return f"http://127.0.0.1:{server.getsockname()[1]}/v1/traces", server


def test_a_post_after_the_endpoint_closed_the_kept_alive_connection_is_delivered() -> None:
    """The poster keeps its connection open between requests; one the endpoint closed meanwhile
    is replaced, and the request is sent once on the new one."""
    from ray_otel_events.metrics import Counters
    from ray_otel_events.tracing.otlp_http import OtlpHttpPoster

    seen: list[bytes] = []
    endpoint, server = _closing_endpoint(seen)
    try:
        poster = OtlpHttpPoster(OtlpSignalConfig(endpoint, timeout_s=5), Counters("t"), exported="sent")
        for body in (b"one", b"two", b"three"):
            poster.send_once(body)
        assert seen == [b"one", b"two", b"three"]
    finally:
        server.close()
