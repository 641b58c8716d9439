"""An OTLP/HTTP receiver for traces and logs, as aiohttp routes any server can mount.

It speaks the protocol (paths, content types, gzip, size limit, status codes, response bodies in
the request's encoding, partial success) and hands each decoded request to an `OtlpConsumer`,
which decides what the data becomes: the bridge turns it into RayEvents and JSON records, the sink
writes it to a file. Answers, per the OTLP spec:

* 200 with an empty `Export*ServiceResponse` (protobuf bytes or `{}`), or with `partial_success`
  holding the count and reason of the items the receiver or the consumer rejected;
* 400 with a `google.rpc.Status` naming the problem (undecodable protobuf, invalid JSON, base64
  where hex ids are required, a broken gzip stream);
* 413 when the body, measured after decompression, is over the limit;
* 415 for a content type other than `application/x-protobuf` / `application/json`, or an
  unsupported content coding;
* 503 with `Retry-After` when the consumer's queue is full (the client retries, nothing is lost);
* 500 with a Status if the consumer fails unexpectedly; the server keeps serving either way.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import math
from dataclasses import dataclass
from typing import Literal

import orjson
from aiohttp import web
from google.protobuf.message import DecodeError, Message
from google.rpc import code_pb2, status_pb2  # type: ignore[import-untyped]
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsPartialSuccess,
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from ray_otel_events.metrics import Counters
from ray_otel_events.otel import otlp_json
from ray_otel_events.receivers.http_body import BodyError, media_type, read_body

logger = logging.getLogger(__name__)

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
TRACES_PATH = "/v1/traces"
LOGS_PATH = "/v1/logs"

DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024  # the limit the OTLP spec recommends

Signal = Literal["traces", "logs"]

# Counter names (labelled signal=traces|logs).
REQUESTS = "requests"
ACCEPTED_ITEMS = "accepted_items"
REJECTED_ITEMS = "rejected_items"  # answered in partial_success
REFUSED_REQUESTS = "refused_requests"  # labelled status=<HTTP status>


@dataclass(frozen=True)
class ConsumeResult:
    """What the consumer did with a request: how many items it rejected and why."""

    rejected: int = 0
    message: str = ""


class QueueFullError(Exception):
    """The consumer cannot take the request now; the client should retry after `retry_after_s`."""

    def __init__(self, reason: str, retry_after_s: float = 1.0) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after_s = retry_after_s


class OtlpConsumer(abc.ABC):
    """Takes decoded, id-validated requests. Returning means the data is accepted (held or done)."""

    @abc.abstractmethod
    async def consume_traces(self, request: ExportTraceServiceRequest) -> ConsumeResult:
        """Raise QueueFullError to have the client retry the whole request later."""

    @abc.abstractmethod
    async def consume_logs(self, request: ExportLogsServiceRequest) -> ConsumeResult:
        """Raise QueueFullError to have the client retry the whole request later."""

    async def consume_logs_body(self, body: bytes) -> tuple[int, ConsumeResult] | None:
        """A consumer's fast path: a protobuf logs request taken from its bytes, undecoded, as
        (its log records, the result); None (the default) has the receiver decode it and call
        `consume_logs`. Raise QueueFullError as there."""
        return None


class OtlpHttpReceiver:
    """Owns nothing but the protocol: mount `routes()` on an aiohttp application."""

    def __init__(
        self,
        consumer: OtlpConsumer,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        decoded_by_server: bool = False,
        counters: Counters | None = None,
    ) -> None:
        self.consumer = consumer
        self.max_body_bytes = max_body_bytes
        self.decoded_by_server = decoded_by_server
        self.counters = counters if counters is not None else Counters("otlp_receiver")

    def routes(self) -> list[web.RouteDef]:
        return [web.post(TRACES_PATH, self.handle_traces), web.post(LOGS_PATH, self.handle_logs)]

    async def handle_traces(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, "traces")

    async def handle_logs(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, "logs")

    async def _handle(self, request: web.Request, signal: Signal) -> web.StreamResponse:
        self.counters.add(REQUESTS, signal=signal)
        kind = media_type(request)
        if kind not in (PROTOBUF, JSON):
            shown = kind or "none"
            return await self._refuse_unread(
                request, signal, JSON, 415, f"unsupported Content-Type {shown!r}: use {PROTOBUF} or {JSON}"
            )
        try:
            body = await read_body(request, self.max_body_bytes, self.decoded_by_server)
        except BodyError as exc:
            if exc.close:  # what is left of the body is not read: the connection goes
                response = self._refuse(signal, kind, exc.status, exc.reason, exc.headers)
                response.force_close()
                return response
            return await self._refuse_unread(request, signal, kind, exc.status, exc.reason)
        try:
            taken = None
            if signal == "logs" and kind == PROTOBUF:
                taken = await self.consumer.consume_logs_body(body)
            if taken is not None:
                total, result = taken
                invalid = InvalidIds()
            else:
                decoded = _decode(body, kind, signal)
                invalid = drop_invalid_ids(decoded)
                if isinstance(decoded, ExportTraceServiceRequest):
                    result = await self.consumer.consume_traces(decoded)
                else:
                    result = await self.consumer.consume_logs(decoded)
                total = count_items(decoded)
        except BodyError as exc:
            return await self._refuse_unread(request, signal, kind, exc.status, exc.reason)
        except QueueFullError as exc:
            retry_after = str(max(1, math.ceil(exc.retry_after_s)))
            return self._refuse(signal, kind, 503, exc.reason, {"Retry-After": retry_after})
        except Exception:
            logger.exception("OTLP %s consumer failed", signal)
            return self._refuse(signal, kind, 500, f"internal error while handling {signal}")
        rejected = invalid.count + result.rejected
        self.counters.add(ACCEPTED_ITEMS, total - result.rejected, signal=signal)
        self.counters.add(REJECTED_ITEMS, rejected, signal=signal)
        message = "; ".join(m for m in (invalid.message, result.message) if m)
        return _success(signal, kind, rejected, message)

    async def _refuse_unread(
        self, request: web.Request, signal: Signal, kind: str, status: int, reason: str
    ) -> web.Response:
        """`_refuse` before the body is read whole: what is left is discarded, or the connection closed."""
        keep = await _discard(request)
        response = self._refuse(signal, kind, status, reason)
        if not keep:
            response.force_close()
        return response

    def _refuse(
        self, signal: Signal, kind: str, status: int, reason: str, headers: dict[str, str] | None = None
    ) -> web.Response:
        self.counters.add(REFUSED_REQUESTS, signal=signal, status=str(status))
        return status_response(kind, status, reason, headers)


_DISCARD_BYTES = 4 * 1024 * 1024
_DISCARD_S = 5.0


async def _discard(request: web.Request) -> bool:
    """Read what is left of a refused body, so the connection can be kept alive: whether it was.
    A body declared past the bound (or sent slower than the time given) is not waited for: a
    client that declares 10^14 bytes and sends three would hold the answer forever; its
    connection is closed instead."""
    declared = request.content_length
    if declared is not None and declared > _DISCARD_BYTES:
        return False
    try:
        async with asyncio.timeout(_DISCARD_S):
            remaining = _DISCARD_BYTES
            while remaining > 0:
                chunk = await request.content.read(min(remaining, 64 * 1024))
                if not chunk:
                    return True
                remaining -= len(chunk)
    except Exception:
        return False
    return False


def _decode(body: bytes, kind: str, signal: Signal) -> ExportTraceServiceRequest | ExportLogsServiceRequest:
    if kind == PROTOBUF:
        message_type = ExportTraceServiceRequest if signal == "traces" else ExportLogsServiceRequest
        try:
            return message_type.FromString(body)
        except DecodeError as exc:
            raise BodyError(400, f"body is not a valid {message_type.__name__} protobuf: {exc}") from None
    try:
        value = orjson.loads(body) if body else {}
    except orjson.JSONDecodeError as exc:
        raise BodyError(400, f"body is not valid JSON: {exc}") from None
    try:
        if signal == "traces":
            return otlp_json.traces_request_from_json(value)
        return otlp_json.logs_request_from_json(value)
    except otlp_json.OtlpJsonError as exc:
        raise BodyError(400, f"body is not valid OTLP/JSON: {exc}") from None


@dataclass(frozen=True)
class InvalidIds:
    count: int = 0
    message: str = ""


def drop_invalid_ids(request: ExportTraceServiceRequest | ExportLogsServiceRequest) -> InvalidIds:
    """Remove spans and log records whose ids have the wrong length (protobuf cannot forbid them)."""
    dropped = 0
    if isinstance(request, ExportTraceServiceRequest):
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                spans = scope_spans.spans
                keep = [s for s in spans if _valid_span_ids(s)]
                if len(keep) != len(spans):
                    dropped += len(spans) - len(keep)
                    del spans[:]
                    spans.extend(keep)
        what = "spans with a trace id that is not 16 non-zero bytes or a span id that is not 8"
    else:
        for resource_logs in request.resource_logs:
            for scope_logs in resource_logs.scope_logs:
                records = scope_logs.log_records
                valid = [r for r in records if len(r.trace_id) in (0, 16) and len(r.span_id) in (0, 8)]
                if len(valid) != len(records):
                    dropped += len(records) - len(valid)
                    del records[:]
                    records.extend(valid)
        what = "log records with a trace id that is not 16 bytes or a span id that is not 8"
    return InvalidIds(dropped, f"{dropped} {what}") if dropped else InvalidIds()


def _valid_span_ids(span: Message) -> bool:
    trace_id: bytes = span.trace_id  # type: ignore[attr-defined]
    span_id: bytes = span.span_id  # type: ignore[attr-defined]
    parent: bytes = span.parent_span_id  # type: ignore[attr-defined]
    return (
        len(trace_id) == 16
        and trace_id != bytes(16)
        and len(span_id) == 8
        and span_id != bytes(8)
        and len(parent) in (0, 8)
    )


def count_items(request: ExportTraceServiceRequest | ExportLogsServiceRequest) -> int:
    if isinstance(request, ExportTraceServiceRequest):
        return sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
    return sum(len(sl.log_records) for rl in request.resource_logs for sl in rl.scope_logs)


def _success(signal: Signal, kind: str, rejected: int, message: str) -> web.Response:
    response = export_response(signal, rejected, message)
    if kind == PROTOBUF:
        return web.Response(body=response.SerializeToString(), content_type=PROTOBUF)
    return web.Response(body=orjson.dumps(otlp_json.to_json(response)), content_type=JSON)


def export_response(
    signal: Signal, rejected: int, message: str
) -> ExportTraceServiceResponse | ExportLogsServiceResponse:
    """The Export*ServiceResponse of a request: empty, or `partial_success` with the rejects."""
    response: ExportTraceServiceResponse | ExportLogsServiceResponse
    if signal == "traces":
        response = ExportTraceServiceResponse()
        if rejected or message:
            response.partial_success.CopyFrom(
                ExportTracePartialSuccess(rejected_spans=rejected, error_message=message)
            )
    else:
        response = ExportLogsServiceResponse()
        if rejected or message:
            response.partial_success.CopyFrom(
                ExportLogsPartialSuccess(rejected_log_records=rejected, error_message=message)
            )
    return response


_GRPC_CODE = {
    400: code_pb2.INVALID_ARGUMENT,
    413: code_pb2.RESOURCE_EXHAUSTED,
    415: code_pb2.INVALID_ARGUMENT,
    429: code_pb2.RESOURCE_EXHAUSTED,
    503: code_pb2.UNAVAILABLE,
}


def status_response(
    kind: str, status: int, reason: str, headers: dict[str, str] | None = None
) -> web.Response:
    """An error answer: a google.rpc.Status in the request's encoding (JSON when unknown)."""
    code = _GRPC_CODE.get(status, code_pb2.INTERNAL)
    if kind == PROTOBUF:
        body = status_pb2.Status(code=code, message=reason).SerializeToString()
        return web.Response(status=status, body=body, content_type=PROTOBUF, headers=headers)
    return web.Response(
        status=status,
        body=orjson.dumps({"code": code, "message": reason}),
        content_type=JSON,
        headers=headers,
    )
