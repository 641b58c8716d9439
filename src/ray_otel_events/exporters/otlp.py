"""OTLP/HTTP export of spans and log records, on the shared publisher loop.

The bridge queues each span or log record as one self-contained item (a serialized ResourceSpans /
ResourceLogs holding just that item), so the queue is plain bytes like every other buffer here.
`prepare` regroups a batch by resource and scope into one Export*ServiceRequest on the wire
(otlp_wire.merge_envelopes), sent as protobuf or spec OTLP/JSON, gzipped if configured.

Retries follow the OTLP spec rather than the stock Python exporter, which gives up after one 10 s
deadline and ignores `partial_success`: 429/502/503/504 and connection errors are retried by the
publisher loop with backoff for as long as it runs, waiting at least the server's `Retry-After`;
other statuses are permanent (retrying cannot help) and are counted as rejected, as are the items
a 200 response lists in `partial_success`.
"""

from __future__ import annotations

import gzip
import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
import orjson
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from ray_otel_events.config import OtlpSignalConfig
from ray_otel_events.exporters.publisher import PreparedBatch, PublisherClient
from ray_otel_events.exporters.retry import RETRYABLE_STATUSES, SendError, parse_retry_after
from ray_otel_events.exporters.transport import HttpTransport, WholeBody
from ray_otel_events.metrics import Counters
from ray_otel_events.otel import otlp_json, otlp_wire, semconv
from ray_otel_events.otel.plain_records import key_values
from ray_otel_events.processors.event_buffer import EventBatch

logger = logging.getLogger(__name__)

Signal = Literal["traces", "logs"]


# Counter names, labelled signal=traces|logs.
EXPORTED_ITEMS = "exported_items"
REJECTED_ITEMS = "rejected_items"  # refused for good by the destination (status or partial_success)
RETRYABLE_FAILURES = "retryable_failures"  # labelled status=<HTTP status or "connection">

try:
    from importlib.metadata import version as _version

    _PACKAGE_VERSION = _version("ray-otel-events")
except Exception:  # not installed as a distribution (e.g. run from a source tree)
    _PACKAGE_VERSION = "0"


class OtlpItemEncoder:
    """Wraps each span or log record with its resource (per Ray session) and our scope."""

    def __init__(self, service_name: str, max_sessions: int = 256) -> None:
        self.service_name = service_name
        self.scope = InstrumentationScope(name=semconv.INSTRUMENTATION_SCOPE, version=_PACKAGE_VERSION)
        self._max_sessions = max_sessions
        self._resources: OrderedDict[str, Resource] = OrderedDict()
        self._wire_prefix: dict[str, tuple[bytes, bytes]] = {}

    def resource(self, session_name: str) -> Resource:
        resource = self._resources.get(session_name)
        if resource is None:
            attributes: dict[str, Any] = {"service.name": self.service_name}
            if session_name:
                attributes[semconv.RAY_SESSION_NAME] = session_name
            resource = Resource()
            resource.attributes.extend(key_values(attributes))
            self._resources[session_name] = resource
            if len(self._resources) > self._max_sessions:
                self._resources.popitem(last=False)
        return resource

    def span_item(self, session_name: str, span: Span) -> bytes:
        """A serialized ResourceSpans holding `span` (written on the wire: ResourceSpans and
        ResourceLogs have one shape, and copying the resource into a message per span cost more
        than the span)."""
        return otlp_wire.resource_logs(*self.envelope_of(session_name), [span.SerializeToString()])

    def envelope_of(self, session_name: str) -> tuple[bytes, bytes]:
        """The serialized Resource and InstrumentationScope of a session's items: what the
        bridge's converter writes each span and record in (RayEventsToOtel's `envelope`)."""
        cached = self._wire_prefix.get(session_name)
        if cached is None:
            cached = self._wire_prefix[session_name] = (
                self.resource(session_name).SerializeToString(),
                self.scope.SerializeToString(),
            )
            if len(self._wire_prefix) > self._max_sessions:
                self._wire_prefix.pop(next(iter(self._wire_prefix)))
        return cached

    def log_item(self, session_name: str, record: LogRecord) -> bytes:
        item = ResourceLogs(resource=self.resource(session_name))
        item.scope_logs.add(scope=self.scope).log_records.append(record)
        return item.SerializeToString()


@dataclass(frozen=True, slots=True)
class OtlpPayload:
    """One encoded request and the number of items in it (for the counters)."""

    body: bytes
    items: int


class OtlpHttpPublisherClient(PublisherClient[OtlpPayload]):
    """One signal to one OTLP/HTTP endpoint."""

    def __init__(
        self,
        signal: Signal,
        config: OtlpSignalConfig,
        counters: Counters | None = None,
        transport: HttpTransport | None = None,
    ) -> None:
        self.signal = signal
        self.config = config
        self.counters = counters if counters is not None else Counters(f"otlp_exporter:{signal}")
        transport = transport or HttpTransport()
        self._ssl = transport.ssl
        if config.certificate or config.client_certificate:
            ca_file = config.certificate or transport.ca_file
            self._ssl = HttpTransport.build({}, ca_file, config.client_certificate, config.client_key).ssl
        self._json = config.protocol == "http/json"
        self._request_type = ExportTraceServiceRequest if signal == "traces" else ExportLogsServiceRequest
        self._headers = {
            **transport.headers,
            **dict(config.headers),
            "Content-Type": "application/json" if self._json else "application/x-protobuf",
            "User-Agent": f"ray-otel-events/{_PACKAGE_VERSION}",
        }
        if config.compression == "gzip":
            self._headers["Content-Encoding"] = "gzip"
        self._timeout = aiohttp.ClientTimeout(total=config.timeout_s)
        self._session: aiohttp.ClientSession | None = None

    def prepare(self, batch: EventBatch) -> PreparedBatch[OtlpPayload]:
        body = otlp_wire.merge_envelopes(batch.wires)
        if self._json:
            request = self._request_type.FromString(body)
            body = orjson.dumps(otlp_json.to_json(request))
        if self.config.compression == "gzip":
            body = gzip.compress(body, compresslevel=1)
        return PreparedBatch(OtlpPayload(body, len(batch)), batch.types)

    async def send(self, payload: OtlpPayload) -> None:
        items = payload.items
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=self._timeout, connector=aiohttp.TCPConnector(ssl=self._ssl or True)
            )
        try:
            async with self._session.post(
                self.config.endpoint,
                data=WholeBody(payload.body, self._headers["Content-Type"]),
                headers=self._headers,
                allow_redirects=False,
            ) as response:
                body = await response.read()
                status = response.status
                retry_after = parse_retry_after(response.headers.get("Retry-After"))
                content_type = response.headers.get("Content-Type", "")
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.counters.add(RETRYABLE_FAILURES, signal=self.signal, status="connection")
            raise SendError(
                f"OTLP {self.signal} export to {self.config.endpoint} failed: {exc!r}", "connection", True
            ) from None
        if 200 <= status < 300:
            rejected, message = _partial_success(self.signal, body, content_type)
            if rejected or message:
                logger.warning(
                    "OTLP %s endpoint rejected %d of %d items: %s", self.signal, rejected, items, message
                )
            self.counters.add(REJECTED_ITEMS, rejected, signal=self.signal)
            self.counters.add(EXPORTED_ITEMS, max(0, items - rejected), signal=self.signal)
            return
        if status in RETRYABLE_STATUSES:
            self.counters.add(RETRYABLE_FAILURES, signal=self.signal, status=str(status))
            raise SendError(f"OTLP {self.signal} endpoint answered {status}", str(status), True, retry_after)
        # The spec: any other status must not be retried; the items are lost, and counted.
        self.counters.add(REJECTED_ITEMS, items, signal=self.signal)
        raise SendError(
            f"OTLP {self.signal} endpoint {self.config.endpoint} answered {status} (not retryable): "
            + body[:300].decode("utf-8", "replace"),
            str(status),
            False,
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _partial_success(signal: Signal, body: bytes, content_type: str) -> tuple[int, str]:
    """(rejected count, message) from a 200 response body; (0, "") when there is none."""
    if not body:
        return 0, ""
    try:
        if "json" in content_type:
            value = orjson.loads(body)
            partial = value.get("partialSuccess") or value.get("partial_success") or {}
            count_key = "rejectedSpans" if signal == "traces" else "rejectedLogRecords"
            return int(partial.get(count_key, 0) or 0), str(partial.get("errorMessage", "") or "")
        response: ExportTraceServiceResponse | ExportLogsServiceResponse
        if signal == "traces":
            response = ExportTraceServiceResponse.FromString(body)
            return response.partial_success.rejected_spans, response.partial_success.error_message
        response = ExportLogsServiceResponse.FromString(body)
        return response.partial_success.rejected_log_records, response.partial_success.error_message
    except (DecodeError, orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
        return 0, ""
