"""How a recorder hands a batch to the aggregator: one unary AddEvents call."""

from __future__ import annotations

import os
import threading
from typing import Protocol

import grpc

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

    def __init__(self, address: str, timeout_s: float = 5.0) -> None:
        self.address = address
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._pid = -1
        self._channel: grpc.Channel | None = None
        self._stub: svc_grpc.EventAggregatorServiceStub | None = None

    def _stub_for_this_process(self) -> svc_grpc.EventAggregatorServiceStub:
        with self._lock:
            if self._stub is None or self._pid != os.getpid():
                self._channel = grpc.insecure_channel(
                    self.address,
                    options=[
                        ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
                        ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
                    ],
                )
                self._stub = svc_grpc.EventAggregatorServiceStub(self._channel)  # type: ignore[no-untyped-call]
                self._pid = os.getpid()
            return self._stub

    def export(self, request: AddEventsRequest) -> None:
        self._stub_for_this_process().AddEvents(request, timeout=self.timeout_s)

    def close(self) -> None:
        with self._lock:
            if self._channel is not None and self._pid == os.getpid():
                self._channel.close()
            self._channel = None
            self._stub = None
