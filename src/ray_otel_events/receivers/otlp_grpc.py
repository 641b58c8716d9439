"""An OTLP/gRPC receiver for traces and logs, handing requests to the same `OtlpConsumer` as HTTP.

The Collector's `loadbalancing` exporter speaks only OTLP/gRPC, so an assemble tier behind it needs
this. Answers, per the OTLP spec: an empty response or `partial_success`; INVALID_ARGUMENT for an
undecodable request; UNAVAILABLE (retryable) when the consumer's queue is full or the server is
shutting down; INTERNAL if the consumer fails unexpectedly.
"""

from __future__ import annotations

import logging
from typing import Any, NoReturn

import grpc
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from ray_otel_events.metrics import Counters
from ray_otel_events.receivers.otlp_http import (
    ACCEPTED_ITEMS,
    REFUSED_REQUESTS,
    REJECTED_ITEMS,
    REQUESTS,
    ConsumeResult,
    OtlpConsumer,
    QueueFullError,
    Signal,
    count_items,
    drop_invalid_ids,
    export_response,
)

logger = logging.getLogger(__name__)

TRACE_SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
LOGS_SERVICE = "opentelemetry.proto.collector.logs.v1.LogsService"


class OtlpGrpcReceiver:
    """`Export` of TraceService and LogsService; bytes in and out (parsed here, once)."""

    def __init__(self, consumer: OtlpConsumer, counters: Counters | None = None) -> None:
        self.consumer = consumer
        self.counters = counters if counters is not None else Counters("otlp_grpc_receiver")
        self._shutting_down = False

    def begin_shutdown(self) -> None:
        self._shutting_down = True

    def handlers(self) -> tuple[grpc.GenericRpcHandler, ...]:
        traces = grpc.unary_unary_rpc_method_handler(self.export_traces)
        logs = grpc.unary_unary_rpc_method_handler(self.export_logs)
        return (
            grpc.method_handlers_generic_handler(TRACE_SERVICE, {"Export": traces}),
            grpc.method_handlers_generic_handler(LOGS_SERVICE, {"Export": logs}),
        )

    def handler(self) -> grpc.GenericRpcHandler:
        return _Both(self.handlers())

    async def export_traces(self, request: bytes, context: Any) -> bytes:
        return await self._export(request, context, "traces")

    async def export_logs(self, request: bytes, context: Any) -> bytes:
        return await self._export(request, context, "logs")

    async def _export(self, body: bytes, context: Any, signal: Signal) -> bytes:
        self.counters.add(REQUESTS, signal=signal)
        if self._shutting_down:
            await self._refuse(context, signal, grpc.StatusCode.UNAVAILABLE, "the bridge is shutting down")
        message_cls = ExportTraceServiceRequest if signal == "traces" else ExportLogsServiceRequest
        try:
            decoded: Any = message_cls.FromString(body)
        except DecodeError as exc:
            await self._refuse(
                context, signal, grpc.StatusCode.INVALID_ARGUMENT, f"undecodable OTLP {signal}: {exc}"
            )
        invalid = drop_invalid_ids(decoded)
        try:
            if signal == "traces":
                result: ConsumeResult = await self.consumer.consume_traces(decoded)
            else:
                result = await self.consumer.consume_logs(decoded)
        except QueueFullError as exc:
            await self._refuse(context, signal, grpc.StatusCode.UNAVAILABLE, exc.reason)
        except Exception:
            logger.exception("OTLP/gRPC %s consumer failed", signal)
            await self._refuse(context, signal, grpc.StatusCode.INTERNAL, f"internal error handling {signal}")
        rejected = invalid.count + result.rejected
        self.counters.add(ACCEPTED_ITEMS, count_items(decoded) - result.rejected, signal=signal)
        self.counters.add(REJECTED_ITEMS, rejected, signal=signal)
        message = "; ".join(m for m in (invalid.message, result.message) if m)
        return export_response(signal, rejected, message).SerializeToString()

    async def _refuse(self, context: Any, signal: Signal, code: grpc.StatusCode, reason: str) -> NoReturn:
        self.counters.add(REFUSED_REQUESTS, signal=signal, status=code.name)
        await context.abort(code, reason)
        raise AssertionError("context.abort returned")  # pragma: no cover


class _Both(grpc.GenericRpcHandler):  # type: ignore[misc]
    """Both services as the one handler `GrpcServer` mounts."""

    def __init__(self, handlers: tuple[grpc.GenericRpcHandler, ...]) -> None:
        self._handlers = handlers

    def service(self, handler_call_details: Any) -> Any:
        for handler in self._handlers:
            if (found := handler.service(handler_call_details)) is not None:
                return found
        return None
