"""The bridge between OTLP and RayEvent JSON, both ways, on one HTTP server.

    POST /v1/traces, /v1/logs  (OTLP/HTTP, protobuf or JSON)
        log records with a RayEvent body, Ray's task/actor spans  -> RayEvents -> --export-addr
        (JSON arrays exactly as Ray's aggregator posts them; without it: counted, dropped)
        other spans and log records -> plain JSON records -> --spans-export-addr (else counted, dropped)
    POST /v1/ray-events  (what a Ray cluster's aggregator posts)
        -> spans and log records (otel/from_ray_events.py) -> OTLP/HTTP -> --otlp-endpoint
    POST /v1/ray-export-events  (Ray's Export API files, as `ray-otel-events collect` posts them)
        -> spans of datasets and Train runs in their jobs' traces (otel/export_spans.py) -> --otlp-endpoint

Modes (docs/scaling.md): `convert` makes the log records only; `assemble` takes RayEvent-carrying
log records (HTTP /v1/logs, or OTLP/gRPC) and makes the spans only. A multi-process bridge
(bridge_workers.py) sets a `router` that sends each RayEvent to the process owning its trace id.

Every destination has its own bounded queue and publisher (retries with backoff, counted drops), so
a slow destination holds back only itself. A request is accepted only if its output fits in the
queues; otherwise it is refused with 503 + Retry-After and the sender retries, so the queues never
drop what was accepted. On shutdown the server stops taking requests, the open entity state is
flushed as (incomplete) spans, and every queue is drained within the flush timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import orjson
from aiohttp import web
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource as SdkResource

from ray_otel_events.config import BridgeConfig, OtlpSignalConfig
from ray_otel_events.durable.durable_buffer import DurableBuffer
from ray_otel_events.durable.sqlite_queue import QueueDatabase, SqliteEventQueue
from ray_otel_events.encoding.newer_releases import POSTED_JSON_TYPE, type_of, unknown_type
from ray_otel_events.encoding.ray_export_events import ExportPost
from ray_otel_events.encoding.ray_json import RayEventJsonEncoder
from ray_otel_events.events.registry import REGISTRY
from ray_otel_events.exporters.http_json import HttpJsonPublisherClient
from ray_otel_events.exporters.json_records import JsonRecordsPublisherClient
from ray_otel_events.exporters.otlp import OtlpHttpPublisherClient, OtlpItemEncoder
from ray_otel_events.exporters.publisher import EventPublisher, PublisherClient, RetryPolicy
from ray_otel_events.exporters.transport import HttpTransport
from ray_otel_events.metrics import Counters
from ray_otel_events.observability.http_endpoints import Readiness, in_flight_middleware, observability_routes
from ray_otel_events.observability.metrics_registry import ServerMetrics
from ray_otel_events.otel import otlp_wire, unknown_type_records
from ray_otel_events.otel.export_spans import ExportSpans
from ray_otel_events.otel.from_ray_events import Emitted, RayEventsToOtel, entity_key_from_bytes
from ray_otel_events.otel.plain_records import (
    RecordContext,
    attributes_of,
    log_record,
    span_parts,
    span_record,
    span_records_json,
)
from ray_otel_events.otel.posted_events import EventParts, event_parts, read_posted_events, wire_parts
from ray_otel_events.otel.to_ray_events import (
    NotARayEventError,
    RaySpanEvents,
    is_ray_span,
    ray_event_wires,
)
from ray_otel_events.processors.event_buffer import RECORD_OVERHEAD_BYTES, MultiConsumerEventBuffer
from ray_otel_events.processors.exposable_filter import ExposableFilter
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent
from ray_otel_events.receivers.otlp_grpc import OtlpGrpcReceiver
from ray_otel_events.receivers.otlp_http import ConsumeResult, OtlpConsumer, OtlpHttpReceiver, QueueFullError
from ray_otel_events.receivers.ray_events_http import RayEventsHttpReceiver
from ray_otel_events.receivers.ray_export_events_http import ExportEventsConsumer, RayExportEventsHttpReceiver
from ray_otel_events.security.auth import BearerToken
from ray_otel_events.services.pipeline_metrics import register_buffers, register_publishers

logger = logging.getLogger(__name__)

# Counter names of the bridge itself.
RAY_EVENTS_FROM_LOGS = "ray_events_from_log_records"
EXPORT_SPANS = "spans_from_export_events"  # datasets, their operators, Train runs, attempts, workers
RAY_EVENTS_FROM_SPANS = "ray_events_from_spans"
RECORDS_FORWARDED = "plain_records_forwarded"  # labelled signal=span|log
RECORDS_DROPPED = "plain_records_dropped"  # no --spans-export-addr; labelled signal=span|log
REJECTED = "rejected_items"  # claimed to be Ray data but unusable; labelled signal
RAY_EVENTS_DROPPED = "ray_events_dropped"  # RayEvents from OTLP with no --export-addr to go to

PENDING_TABLE = "pending"  # durable: RayEvents held in open entities, by entity key
EMITTED_TABLE = "emitted"  # durable: keys of entities whose span left (late pieces stay late)
RECORD_TYPE = 0  # the "event type" plain records carry in their queue (they are not RayEvents)
RETRY_AFTER_S = 1.0
RAY_EVENTS_HEADROOM = 0.9  # /v1/ray-events is admitted while its queues are below 90 % full
MAX_REASONS = 3


class PieceRouter(Protocol):
    async def forward(self, events: list[EventParts]) -> list[EventParts]:
        """Send the events another process owns to it; return this process's share."""


class _Queue:
    """One destination: a bounded buffer read by one publisher, mirrored on disk if durable."""

    def __init__(
        self,
        name: str,
        config: BridgeConfig,
        client: PublisherClient[Any],
        database: QueueDatabase | None = None,
    ) -> None:
        self.name = name
        self.disk = (
            SqliteEventQueue(database, _table(name), config.queue_max_bytes) if database is not None else None
        )
        self.buffer = MultiConsumerEventBuffer(
            config.queue_size,
            min(config.queue_bytes, config.queue_max_bytes) if self.disk else config.queue_bytes,
            Counters(f"queue:{name}"),
            on_evicted=self.disk.delete if self.disk else None,
        )
        self.durable = DurableBuffer(self.disk, self.buffer) if self.disk else None
        self.publisher: EventPublisher[Any] = EventPublisher(
            name,
            self.buffer,
            client,
            ExposableFilter(None),
            RetryPolicy(),
            config.batch_size,
            config.send_interval_s,
        )
        if self.disk is not None:
            self.publisher.on_settled = self.disk.delete

    def add_many(self, wires: list[bytes], types: list[int]) -> None:
        """Into the queue; on disk first when durable (inside the caller's transaction)."""
        if self.durable is not None:
            self.durable.add_many(wires, types)
        else:
            self.buffer.add_many(wires, types)

    def room_for(self, count: int, size: int, fraction: float = 1.0) -> bool:
        buffer = self.buffer
        return (
            len(buffer) + count <= buffer.max_events * fraction
            and buffer.size_bytes + size + count * RECORD_OVERHEAD_BYTES <= buffer.max_bytes * fraction
        )

    def full_error(self) -> QueueFullError:
        return QueueFullError(
            f"the bridge's queue to {self.name} is full ({len(self.buffer)} items); retry later",
            RETRY_AFTER_S,
        )


def _table(queue_name: str) -> str:
    return queue_name.replace("-", "_")


QUEUE_NAMES = ("ray-events", "records", "otlp-traces", "otlp-logs")


@dataclasses.dataclass(slots=True)
class PostedBatch:
    """A POST's events as the converter takes them, and those of a type our protos cannot name
    as they were posted: carried as they came (otel/unknown_type_records.py)."""

    parts: list[EventParts]
    unknown: list[dict[str, Any]]

    def __len__(self) -> int:
        return len(self.parts) + len(self.unknown)


def _unknown_types_apart(
    body: bytes, parts: list[EventParts], errors: list[str]
) -> tuple[PostedBatch, list[str]]:
    """A POST's events read (`parts`, in item order) and errors (each `[index]: reason`, one per
    item not read), with the events of a type our protos cannot name (by name: not read; by
    number: read) set apart as posted."""
    unread = {int(error[1 : error.index("]")]): error for error in errors}
    read = iter(parts)
    batch = PostedBatch([], [])
    for index, item in enumerate(orjson.loads(body)):
        if index in unread:
            if unknown_type(type_of(item)) is not None and item.get("eventId"):
                batch.unknown.append(item)
                del unread[index]
        elif (part := next(read)).head.event_type not in REGISTRY and unknown_type(type_of(item)):
            batch.unknown.append(item)
        else:  # (a negative number, say, is passed on as a RayEvent, as it was read)
            batch.parts.append(part)
    return batch, list(unread.values())


class BridgeService(OtlpConsumer, ExportEventsConsumer):
    def __init__(
        self,
        config: BridgeConfig,
        otlp_traces: OtlpSignalConfig,
        otlp_logs: OtlpSignalConfig,
        transport: HttpTransport | None = None,
    ) -> None:
        """`transport`: headers and CA for every destination (the OTLP ones add OTEL_* headers)."""
        self.config = config
        self.counters = Counters("bridge")
        self.database: QueueDatabase | None = None
        self.pending: SqliteEventQueue | None = None
        self.emitted_keys: SqliteEventQueue | None = None
        if config.queue_dir:
            tables = [*(_table(name) for name in QUEUE_NAMES), PENDING_TABLE, EMITTED_TABLE]
            self.database = QueueDatabase(config.queue_dir, tables)
            self.pending = SqliteEventQueue(self.database, PENDING_TABLE, config.queue_max_bytes)
            self.emitted_keys = SqliteEventQueue(self.database, EMITTED_TABLE, config.queue_max_bytes)
        db = self.database
        encoder = RayEventJsonEncoder(preserve_proto_field_name=config.preserve_proto_field_name)
        self.ray_events: _Queue | None = None
        if config.export_addr:
            client = HttpJsonPublisherClient(
                config.export_addr, encoder, config.publisher_timeout_s, transport=transport
            )
            self.ray_events = _Queue("ray-events", config, client, db)
        self.records: _Queue | None = None
        if config.spans_export_addr:
            records_client = JsonRecordsPublisherClient(
                config.spans_export_addr, config.publisher_timeout_s, transport=transport
            )
            self.records = _Queue("records", config, records_client, db)
        self.otlp_traces_client = OtlpHttpPublisherClient("traces", otlp_traces, transport=transport)
        self.otlp_logs_client = OtlpHttpPublisherClient("logs", otlp_logs, transport=transport)
        self.otlp_spans = _Queue("otlp-traces", config, self.otlp_traces_client, db)
        self.otlp_logs = _Queue("otlp-logs", config, self.otlp_logs_client, db)
        self.items = OtlpItemEncoder(config.service_name)
        self.to_otel = RayEventsToOtel(
            max_open_entities=config.max_open_entities,
            max_open_bytes=config.max_open_bytes,
            entity_ttl_s=config.entity_ttl_s,
            terminal_grace_s=config.terminal_grace_s,
            dedup_window=config.dedup_window,
            envelope=self.items.envelope_of,  # spans and records come out as the queues hold them
        )
        self.ray_spans = RaySpanEvents()
        self.otlp_receiver = OtlpHttpReceiver(self, config.max_body_bytes)
        self.ray_events_receiver = RayEventsHttpReceiver(self, config.max_body_bytes)
        self.export_events_receiver = RayExportEventsHttpReceiver(self, config.max_body_bytes)
        self.export_spans = ExportSpans()
        self.otlp_grpc_receiver = OtlpGrpcReceiver(self, self.otlp_receiver.counters)
        self._sweeper: asyncio.Task[None] | None = None
        self._running = False
        self.router: PieceRouter | None = None  # set by a multi-process bridge (bridge_workers.py)
        self.metrics = self._build_metrics()

    def _build_metrics(self) -> ServerMetrics:
        metrics = ServerMetrics("bridge")
        metrics.add_counters("bridge", self.counters)
        metrics.add_counters("otlp_receiver", self.otlp_receiver.counters)
        metrics.add_counters("ray_events_receiver", self.ray_events_receiver.counters)
        metrics.add_counters("ray_export_events_receiver", self.export_events_receiver.counters)
        metrics.add_counters("assembler", self.to_otel.counters)
        metrics.add_counters("otlp_exporter", self.otlp_traces_client.counters)
        metrics.add_counters("otlp_exporter", self.otlp_logs_client.counters)
        register_buffers(metrics, {q.name: q.buffer for q in self.queues})
        register_publishers(metrics, [q.publisher for q in self.queues])
        metrics.add_gauge(
            "assembler_open_entities",
            "task attempts, actors, jobs... whose span is still open in the bridge",
            lambda: {(): float(self.to_otel.open_entities)},
        )
        metrics.add_gauge(
            "assembler_open_bytes",
            "bytes the open entities hold (their pieces plus a fixed overhead each)",
            lambda: {(): float(self.to_otel.open_bytes)},
        )
        return metrics

    def readiness(self) -> Readiness:
        """Running; every queue below 90 % of its bounds; every destination reachable."""
        state = Readiness().add("listening", self._running)
        for queue in self.queues:
            buffer = queue.buffer
            full = max(len(buffer) / buffer.max_events, buffer.size_bytes / buffer.max_bytes)
            state.add(f"queue_{queue.name}", full < RAY_EVENTS_HEADROOM, f"{full:.0%} of its bounds used")
            failures = queue.publisher.consecutive_failures
            state.add(
                f"exporter_{queue.name}", failures == 0, f"{failures} failed attempts since the last success"
            )
        return state

    @property
    def queues(self) -> list[_Queue]:
        optional = [q for q in (self.ray_events, self.records) if q is not None]
        return [self.otlp_spans, self.otlp_logs, *optional]

    def routes(self) -> list[web.RouteDef]:
        return [
            *self.otlp_receiver.routes(),
            *self.ray_events_receiver.routes(),
            *self.export_events_receiver.routes(),
        ]

    def build_app(
        self, token: BearerToken | None = None, render_metrics: Callable[[], Awaitable[bytes]] | None = None
    ) -> web.Application:
        """`render_metrics`: /metrics of every worker of a multi-process bridge (bridge_workers.py)."""
        middlewares: list[Any] = [in_flight_middleware(self.metrics, "http")]
        if token is not None:
            middlewares.insert(0, token.http_middleware())
        app = web.Application(client_max_size=self.config.max_body_bytes, middlewares=middlewares)
        observability = observability_routes(self.metrics, self.readiness, render_metrics)
        app.add_routes([*observability, *self.routes()])
        return app

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        if self.database is not None:
            self._replay()
        for queue in self.queues:
            queue.publisher.start()
        self._running = True
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep(), name="bridge:sweeper")

    def _replay(self) -> None:
        """Resume what a previous run left on disk: queued items, and open entities' pieces."""
        for queue in self.queues:
            if queue.durable is not None and (n := queue.durable.replay(None)):
                logger.info("bridge: replaying %d items of queue %s", n, queue.name)
        if self.pending is None:
            return
        if self.emitted_keys is not None:
            closed = self.emitted_keys.read_all().keys
            self.to_otel.remember_emitted(entity_key_from_bytes(k) for k in closed)
        stored = self.pending.read_all()
        if stored.wires:
            logger.info("bridge: resuming %d pieces of open entities", len(stored.wires))
            parts: list[EventParts] = []
            unreadable: list[int] = []
            for seq, wire in zip(stored.seqs, stored.wires, strict=True):
                try:
                    parts.append(wire_parts(wire))
                except DecodeError:  # a damaged row: the rest still resume
                    unreadable.append(seq)
            if unreadable:
                logger.warning("bridge: %d stored pieces are not RayEvents; deleted", len(unreadable))
                self.pending.delete(unreadable)
            emitted = self.to_otel.add_parts(parts, logs=False)
            emitted.taken.clear()  # already on disk
            self._queue_otel(emitted)

    async def _sweep(self) -> None:
        """Emit spans whose grace or time limit passed; the period is a fraction of the grace."""
        period = min(1.0, max(0.05, self.config.terminal_grace_s / 4))
        while True:
            await asyncio.sleep(period)
            try:
                self._queue_otel(self.to_otel.expire())
            except Exception:
                logger.exception("bridge sweeper failed; retrying")

    async def stop(self) -> None:
        """Call after the server stopped taking requests: flush open state, drain every queue."""
        self._running = False
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        if self.pending is None:
            self._queue_otel(self.to_otel.flush())
        elif self.to_otel.open_entities:
            # Durable: open entities stay on disk and resume at the next start, complete.
            logger.info(
                "bridge: %d open entities kept on disk for the next start", self.to_otel.open_entities
            )
        for queue in self.queues:
            queue.buffer.close()
        timeout = self.config.shutdown_flush_timeout_s
        await asyncio.gather(*(queue.publisher.shutdown(timeout) for queue in self.queues))
        if self.database is not None:
            self.database.close()

    # -- OTLP in -> RayEvents and plain records out -------------------------------------------

    async def consume_traces(self, request: ExportTraceServiceRequest) -> ConsumeResult:
        events: list[RayEvent] = []
        records: list[bytes] = []
        rejected: list[str] = []
        dropped = 0
        for resource_spans in request.resource_spans:
            sdk_resource: SdkResource | None = None
            for scope_spans in resource_spans.scope_spans:
                spans = scope_spans.spans
                context: RecordContext | None = None
                written: list[bytes | None] = [None] * len(spans)
                if self.records is not None:  # records written in one call where compiled
                    context = RecordContext(resource_spans.resource, scope_spans.scope)
                    written = span_records_json(scope_spans, context)
                for index, record in enumerate(written):
                    if record is not None:
                        records.append(record)
                        continue
                    span = spans[index]
                    parts = span_parts(span)
                    if is_ray_span(parts.attributes):
                        if sdk_resource is None:
                            sdk_resource = SdkResource(attributes_of(resource_spans.resource))
                        try:
                            converted = self.ray_spans.convert(span, parts, sdk_resource)
                        except NotARayEventError as exc:
                            rejected.append(str(exc))
                            continue
                        if converted:
                            events.extend(converted)
                            continue
                    if context is None:
                        dropped += 1
                        continue
                    records.append(orjson.dumps(span_record(parts, context)))
        lost = self._admit(events, records)
        self.counters.add(RAY_EVENTS_FROM_SPANS, len(events))
        return self._result("span", rejected, len(records), dropped, lost)

    async def consume_logs(self, request: ExportLogsServiceRequest) -> ConsumeResult:
        events: list[RayEvent] = []
        unknown: list[dict[str, Any]] = []  # of a type our protos cannot name, as posted
        records: list[bytes] = []
        rejected: list[str] = []
        dropped = 0
        for resource_logs in request.resource_logs:
            for scope_logs in resource_logs.scope_logs:
                context: RecordContext | None = None
                for record in scope_logs.log_records:
                    try:
                        carried = unknown_type_records.carried_event(record)
                    except NotARayEventError as exc:
                        rejected.append(str(exc))
                        continue
                    if isinstance(carried, RayEvent):
                        events.append(carried)
                        continue
                    if carried is not None:  # of a type our protos cannot name: as it was posted
                        unknown.append(carried)
                        continue
                    if self.records is None:
                        dropped += 1
                        continue
                    if context is None:
                        context = RecordContext(resource_logs.resource, scope_logs.scope)
                    records.append(orjson.dumps(log_record(record, context)))
        self.counters.add(RAY_EVENTS_FROM_LOGS, len(events) + len(unknown))
        lost = 0
        if self.config.mode == "assemble":
            # The records are the convert tier's: what is left to do here is their spans.
            self._admit([], records)
            if events:
                await self.consume_ray_events([event_parts(event) for event in events])
        else:
            lost = self._admit(events, records, unknown)
        return self._result("log", rejected, len(records), dropped, lost)

    async def consume_logs_body(self, body: bytes) -> tuple[int, ConsumeResult] | None:
        """A request whose every record carries a RayEvent, read whole by the compiled pass, goes
        to the RayEvents queue as the events' wire bytes (no request, dict or message made); any
        other request is decoded for `consume_logs`, which then gives the results."""
        if self.ray_events is None or self.config.mode == "assemble":
            return None
        read = ray_event_wires(body)
        if read is None:
            return None
        wires, types = read
        self.counters.add(RAY_EVENTS_FROM_LOGS, len(wires))
        self._queue(wires, types, [])
        return len(wires), self._result("log", [], 0, 0)

    def _admit(
        self, events: list[RayEvent], records: list[bytes], unknown: list[dict[str, Any]] | None = None
    ) -> int:
        """Queue everything a request produced, or nothing (QueueFullError) if it does not fit.
        `unknown`: events of a type our protos cannot name, posted as they came. Returns how many
        RayEvents had nowhere to go (no --export-addr)."""
        unknown = unknown or []
        lost = 0
        if (events or unknown) and self.ray_events is None:
            lost, events, unknown = len(events) + len(unknown), [], []
            self.counters.add(RAY_EVENTS_DROPPED, lost)
        wires = [event.SerializeToString() for event in events] + [orjson.dumps(e) for e in unknown]
        types = [e.event_type for e in events] + [POSTED_JSON_TYPE] * len(unknown)
        self._queue(wires, types, records)
        return lost

    def _queue(self, wires: list[bytes], types: list[int], records: list[bytes]) -> None:
        """RayEvents' wire bytes and plain records into their queues: all, or none (QueueFullError)."""
        if (
            wires
            and self.ray_events is not None
            and not self.ray_events.room_for(len(wires), sum(map(len, wires)))
        ):
            raise self.ray_events.full_error()
        if (
            records
            and self.records is not None
            and not self.records.room_for(len(records), sum(map(len, records)))
        ):
            raise self.records.full_error()
        with self._transaction():
            if records and self.records is not None:
                self.records.add_many(records, [RECORD_TYPE] * len(records))
            if wires and self.ray_events is not None:
                self.ray_events.add_many(wires, types)

    def _transaction(self) -> contextlib.AbstractContextManager[object]:
        """One disk transaction for everything a request or a sweep queues (none in memory mode)."""
        return self.database.transaction() if self.database is not None else contextlib.nullcontext()

    def _result(
        self, signal: str, rejected: list[str], forwarded: int, dropped: int, lost: int = 0
    ) -> ConsumeResult:
        self.counters.add(RECORDS_FORWARDED, forwarded, signal=signal)
        self.counters.add(RECORDS_DROPPED, dropped, signal=signal)
        self.counters.add(REJECTED, len(rejected), signal=signal)
        notes: list[str] = []
        if rejected:
            more = f" (and {len(rejected) - MAX_REASONS} more)" if len(rejected) > MAX_REASONS else ""
            notes.append("; ".join(rejected[:MAX_REASONS]) + more)
        if dropped:
            notes.append(f"{dropped} {signal}s that are not Ray data were dropped (no --spans-export-addr)")
        if lost:
            notes.append(f"{lost} RayEvents were dropped (no --export-addr)")
        return ConsumeResult(rejected=len(rejected), message="; ".join(notes))

    # -- RayEvents in -> OTLP out --------------------------------------------------------------

    def read_ray_events(self, body: bytes) -> tuple[PostedBatch, list[str]]:
        parts, errors = read_posted_events(body)
        if errors or any(part.head.event_type not in REGISTRY for part in parts):
            return _unknown_types_apart(body, parts, errors)  # carried as they were posted
        return PostedBatch(parts, []), errors

    async def consume_ray_events(
        self, events: list[EventParts] | PostedBatch, body: bytes = b"", routed: bool = False
    ) -> None:
        """`routed`: a peer process sent these, as their owner; otherwise the router (if any)
        first sends every event owned elsewhere to its owner (raising QueueFullError if it is full)."""
        count = len(events)
        for queue in (self.otlp_spans, self.otlp_logs):
            if not queue.room_for(count, 0, RAY_EVENTS_HEADROOM):
                raise queue.full_error()
        if isinstance(events, PostedBatch):
            if events.unknown and self.config.mode != "assemble":
                self._queue_unknown_types(events.unknown)
            events = events.parts
            if not events:
                return
        if self.router is not None and not routed:
            events = await self.router.forward(events)
        mode = self.config.mode
        self._queue_otel(self.to_otel.add_parts(events, logs=mode != "assemble", assemble=mode != "convert"))

    def _queue_unknown_types(self, events: list[dict[str, Any]]) -> None:
        """Events of a type our protos cannot name, each as a log record carrying it as posted."""
        now = time.time_ns()
        items = []
        for event in events:
            session = event.get("sessionName")
            envelope = self.items.envelope_of(session if isinstance(session, str) else "")
            record = unknown_type_records.log_record(event, now).SerializeToString()
            items.append(otlp_wire.resource_logs(*envelope, [record]))
        with self._transaction():
            self.otlp_logs.add_many(items, [POSTED_JSON_TYPE] * len(items))

    async def consume_export_events(self, post: ExportPost) -> None:
        """Datasets and Train runs as spans in their jobs' traces (otel/export_spans.py), queued
        for the OTLP endpoint."""
        spans = self.export_spans.spans(post)
        if not self.otlp_spans.room_for(len(spans), 0, RAY_EVENTS_HEADROOM):
            raise self.otlp_spans.full_error()
        if spans:
            with self._transaction():
                items = [self.items.span_item(post.session, span) for span in spans]
                self.otlp_spans.add_many(items, [0] * len(items))
            self.counters.add(EXPORT_SPANS, len(spans))

    def _queue_otel(self, emitted: Emitted) -> None:
        """Queue spans and log records; when durable, in one transaction with the open entities'
        pieces: new ones stored, those of entities whose span is now queued deleted."""
        with self._transaction():
            if emitted.spans:
                self.otlp_spans.add_many(
                    [s.item for s in emitted.spans], [s.event_type for s in emitted.spans]
                )
            if emitted.logs:
                self.otlp_logs.add_many([r.item for r in emitted.logs], [r.event_type for r in emitted.logs])
            if self.pending is not None:
                closed = {span.entity for span in emitted.spans}
                held = [(key, parts) for key, parts in emitted.taken if key not in closed]
                if held:
                    self.pending.append(
                        [parts.wire for _, parts in held],
                        [parts.head.event_type for _, parts in held],
                        [key for key, _ in held],
                    )
                if closed:
                    self.pending.delete_keys(sorted(closed))
                    self._remember_closed(sorted(closed))

    def _remember_closed(self, keys: list[bytes]) -> None:
        """Keep the last `dedup_window` emitted entity keys on disk (what a restart must know)."""
        if self.emitted_keys is None:
            return
        seqs = self.emitted_keys.append([b""] * len(keys), [0] * len(keys), keys)
        if self.emitted_keys.count > self.config.dedup_window * 1.1:  # trim now and then, not always
            self.emitted_keys.delete_through(seqs[-1] - self.config.dedup_window)

    # -- reporting -----------------------------------------------------------------------------

    def summary_rows(self) -> list[tuple[str, int]]:
        """The exit table: what came in on each route, and where it ended."""
        otlp_in, ray_in = self.otlp_receiver.counters, self.ray_events_receiver.counters
        rows = [
            ("OTLP items accepted", otlp_in.get("accepted_items")),
            ("OTLP requests refused", otlp_in.get("refused_requests")),
            ("RayEvents accepted (/v1/ray-events)", ray_in.get("accepted_events")),
            ("RayEvents rejected (/v1/ray-events)", ray_in.get("rejected_events")),
            ("duplicate RayEvents ignored", self.to_otel.counters.get("duplicate_events")),
            ("spans emitted", self.to_otel.counters.get("spans")),
            ("spans emitted incomplete", self.to_otel.counters.get("spans", outcome="incomplete")),
        ]
        for queue in self.queues:
            counters = queue.publisher.counters
            rows.append((f"{queue.name}: published", counters.get("published")))
            for outcome in ("rejected", "dropped_after_retries", "encode_failed", "dropped_at_shutdown"):
                if n := counters.get(outcome):
                    rows.append((f"{queue.name}: dropped ({outcome})", n))
            if n := queue.buffer.counters.get("evicted"):
                rows.append((f"{queue.name}: dropped (evicted)", n))
        return rows

    def stats(self) -> dict[str, Any]:
        return {
            "bridge": self.counters.snapshot(),
            "otlp_receiver": self.otlp_receiver.counters.snapshot(),
            "ray_events_receiver": self.ray_events_receiver.counters.snapshot(),
            "ray_events_to_otel": self.to_otel.counters.snapshot(),
            "otlp_exporter": {
                "traces": self.otlp_traces_client.counters.snapshot(),
                "logs": self.otlp_logs_client.counters.snapshot(),
            },
            "publishers": {q.name: q.publisher.counters.snapshot() for q in self.queues},
            "queues": {q.name: q.buffer.counters.snapshot() for q in self.queues},
            "open_entities": self.to_otel.open_entities,
        }
