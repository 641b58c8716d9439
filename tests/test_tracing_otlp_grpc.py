"""The forwarder's gRPC transport takes TLS or not as the SDK's exporter does: from
OTEL_EXPORTER_OTLP_[TRACES_]INSECURE when set, else from the endpoint's scheme. Checked against a
real plain-text OTLP/gRPC receiver: a request that goes without TLS arrives, one with TLS cannot."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from helpers.otlp_counting_receiver import OtlpReceiver
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from ray_otel_events.config import otlp_export_config
from ray_otel_events.exporters.retry import SendError
from ray_otel_events.tracing.otlp_grpc import OtlpGrpcSender


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    server = OtlpReceiver("grpc")
    yield server
    server.stop()


@pytest.mark.parametrize(
    ("scheme", "insecure", "plain"),
    [
        ("http", {}, True),
        ("https", {}, False),
        ("https", {"OTEL_EXPORTER_OTLP_INSECURE": "true"}, True),
        ("http", {"OTEL_EXPORTER_OTLP_INSECURE": "false"}, False),
        (
            "http",
            {"OTEL_EXPORTER_OTLP_INSECURE": "false", "OTEL_EXPORTER_OTLP_TRACES_INSECURE": "TRUE"},
            True,
        ),
    ],
)
def test_insecure_decides_tls(
    receiver: OtlpReceiver, scheme: str, insecure: dict[str, str], plain: bool
) -> None:
    env = {
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"{scheme}://127.0.0.1:{receiver.port}",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "3000",
        **insecure,
    }
    sender = OtlpGrpcSender(otlp_export_config("traces", env), "traces")
    body = ExportTraceServiceRequest().SerializeToString()
    if plain:
        sender.send_once(body)
        assert len(receiver.traces) == 1
    else:
        with pytest.raises(SendError) as info:
            sender.send_once(body)
        assert info.value.retryable and not receiver.traces
