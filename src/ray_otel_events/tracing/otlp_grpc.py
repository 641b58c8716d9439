"""Sending OTLP export requests, already serialized, over gRPC: the forwarder's gRPC transport.

The request bytes are the ones the HTTP transport posts (our encoders write them); the channel
passes them through unparsed (no serializer), as the SDK's gRPC exporter would send the same
messages. Settings are the SDK exporter's: the endpoint as given (scheme http means no TLS unless
OTEL_EXPORTER_OTLP_INSECURE says otherwise), headers as metadata, gzip, timeout, CA certificate.
Retryable status codes are the spec's; any other is permanent.
"""

from __future__ import annotations

from urllib.parse import urlparse

import grpc

from ray_otel_events.config import OtlpSignalConfig
from ray_otel_events.exporters.retry import SendError

METHODS = {
    "traces": "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
    "logs": "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
}
RETRYABLE_CODES = frozenset(
    {
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)


class OtlpGrpcSender:
    """One signal's Export calls on one channel, made in the process that sends."""

    def __init__(self, config: OtlpSignalConfig, signal: str) -> None:
        if config.protocol != "grpc":
            raise ValueError(f"OTLP gRPC sends are grpc, not {config.protocol}")
        self.config = config
        url = urlparse(config.endpoint)
        self.target = url.netloc or url.path
        self.metadata = tuple((key.lower(), value) for key, value in config.headers)
        compression = (
            grpc.Compression.Gzip if config.compression == "gzip" else grpc.Compression.NoCompression
        )
        insecure = config.insecure if config.insecure is not None else url.scheme != "https"
        if insecure:
            channel = grpc.insecure_channel(self.target, compression=compression)
        else:
            root = None
            if config.certificate:
                with open(config.certificate, "rb") as f:
                    root = f.read()
            channel = grpc.secure_channel(
                self.target, grpc.ssl_channel_credentials(root_certificates=root), compression=compression
            )
        self._channel = channel
        self._call = channel.unary_unary(METHODS[signal])  # bytes in, bytes out

    def send_once(self, body: bytes) -> None:
        try:
            self._call(body, timeout=self.config.timeout_s, metadata=self.metadata)
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
            detail = exc.details() if isinstance(exc, grpc.Call) else str(exc)
            raise SendError(
                f"{self.target}: gRPC {code.name}: {detail}", code.name, code in RETRYABLE_CODES
            ) from exc

    def close(self) -> None:
        self._channel.close()
