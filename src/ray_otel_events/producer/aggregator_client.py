"""How a recorder hands a batch to the aggregator: one unary AddEvents call."""

from __future__ import annotations

import os
import threading
from typing import Protocol

import grpc

from ray_otel_events.config import TLS_CA_FILE, ClientSecurityConfig, ConfigError
from ray_otel_events.protobuf import events_event_aggregator_service_pb2_grpc as svc_grpc
from ray_otel_events.protobuf.events_event_aggregator_service_pb2 import AddEventsRequest

# Ray's recorder and aggregator run on one node; large batches are normal (the whole buffer).
_MAX_MESSAGE_BYTES = 512 * 1024 * 1024


class RayEventExporter(Protocol):
    """Sends one AddEventsRequest; raises on failure so the recorder can keep the events."""

    def export(self, request: AddEventsRequest) -> None: ...

    def close(self) -> None: ...


class GrpcAggregatorExporter:
    """AddEvents over gRPC to `host:port` (ours or Ray's dashboard agent).

    The channel is made lazily and again after a fork: a gRPC channel is not fork-safe, and
    process pools fork workers that inherit this object.
    """

    def __init__(
        self, address: str, timeout_s: float = 5.0, security: ClientSecurityConfig | None = None
    ) -> None:
        self.address = address
        self.timeout_s = timeout_s
        security = security if security is not None else ClientSecurityConfig.from_env()
        self._metadata = (("authorization", f"Bearer {security.token}"),) if security.token else None
        self._credentials: grpc.ChannelCredentials | None = None
        if security.tls_ca_file:
            try:
                with open(security.tls_ca_file, "rb") as handle:
                    self._credentials = grpc.ssl_channel_credentials(root_certificates=handle.read())
            except OSError as exc:
                raise ConfigError(f"{TLS_CA_FILE}={security.tls_ca_file!r}: {exc}") from None
        self._lock = threading.Lock()
        self._pid = -1
        self._channel: grpc.Channel | None = None
        self._stub: svc_grpc.EventAggregatorServiceStub | None = None

    def _stub_for_this_process(self) -> svc_grpc.EventAggregatorServiceStub:
        with self._lock:
            if self._stub is None or self._pid != os.getpid():
                options = [
                    ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
                    ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
                ]
                if self._credentials is None:
                    self._channel = grpc.insecure_channel(self.address, options=options)
                else:
                    self._channel = grpc.secure_channel(self.address, self._credentials, options=options)
                self._stub = svc_grpc.EventAggregatorServiceStub(self._channel)  # type: ignore[no-untyped-call]
                self._pid = os.getpid()
            return self._stub

    def export(self, request: AddEventsRequest) -> None:
        self._stub_for_this_process().AddEvents(request, timeout=self.timeout_s, metadata=self._metadata)

    def close(self) -> None:
        with self._lock:
            if self._channel is not None and self._pid == os.getpid():
                self._channel.close()
            self._channel = None
            self._stub = None
