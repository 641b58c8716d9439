"""Sending OTLP export requests, already serialized, over gRPC: the forwarder's gRPC transport.

The request bytes are the ones the HTTP transport posts (our encoders write them); the channel
passes them through unparsed (no serializer), as the SDK's gRPC exporter would send the same
messages. Settings are the SDK exporter's: the endpoint as given (scheme http means no TLS unless
OTEL_EXPORTER_OTLP_INSECURE says otherwise), headers as metadata, gzip, timeout, CA certificate,
client certificate and key (mutual TLS). Retryable status codes are the spec's; any other is
permanent. The channel is made at the first send: a certificate file that cannot be read fails the
sends (retryably, logged and counted by the caller), not the process.
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
        self.method = METHODS[signal]
        self.insecure = config.insecure if config.insecure is not None else url.scheme != "https"
        self._channel: grpc.Channel | None = None
        self._call: grpc.UnaryUnaryMultiCallable | None = None

    def _connect(self) -> grpc.UnaryUnaryMultiCallable:
        config = self.config
        compression = (
            grpc.Compression.Gzip if config.compression == "gzip" else grpc.Compression.NoCompression
        )
        if self.insecure:
            channel = grpc.insecure_channel(self.target, compression=compression)
        else:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read(config.certificate),
                private_key=_read(config.client_key),
                certificate_chain=_read(config.client_certificate),
            )
            channel = grpc.secure_channel(self.target, credentials, compression=compression)
        self._channel = channel
        self._call = channel.unary_unary(self.method)  # bytes in, bytes out
        return self._call

    def send_once(self, body: bytes) -> None:
        try:
            call = self._call or self._connect()
        except (OSError, ValueError) as exc:
            raise SendError(f"{self.target}: TLS settings: {exc!r}", "connection", True) from exc
        try:
            call(body, timeout=self.config.timeout_s, metadata=self.metadata)
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
            detail = exc.details() if isinstance(exc, grpc.Call) else str(exc)
            raise SendError(
                f"{self.target}: gRPC {code.name}: {detail}", code.name, code in RETRYABLE_CODES
            ) from exc

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = self._call = None


def _read(path: str) -> bytes | None:
    """A PEM file's bytes, None when no path is set."""
    if not path:
        return None
    with open(path, "rb") as f:
        return f.read()
