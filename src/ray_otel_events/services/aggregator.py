"""The aggregator: gRPC AddEvents in -> multi-consumer buffer -> one publisher per destination.

Ray's aggregator agent without its fragilities: unknown event types never crash a publisher, the
buffer is bounded by bytes as well as count, and shutdown flushes the buffer before exiting.

`stats()` is the documented, stable summary the CLI prints as its last line (`stats {json}`):

    {
      "version": 1,
      "received": {TYPE: n},          events taken by AddEvents, per type name (or "unknown")
      "received_total": n,
      "not_processed": {TYPE: n},     taken while no destination is enabled (kept nowhere, like Ray)
      "requests": n,                  AddEvents calls answered OK
      "rejected_requests": {REASON: n},   "shutting_down" or "malformed"; their events were NOT taken
      "producer_dropped_task_attempts": n,   from the requests' TaskEventsMetadata
      "buffer": {"max_events": n, "max_bytes": n, "held_events": n},
      "publishers": {NAME: {
          "published": {TYPE: n}, "filtered": {TYPE: n}, "evicted": {TYPE: n},
          "encode_failed": {TYPE: n}, "dropped_after_retries": {TYPE: n},
          "dropped_at_shutdown": {TYPE: n},
          "accounted_total": n,       sum of the six outcomes above
          "send_failures": {TYPE: n}, events in failed attempts (a retried event counts each time)
          "requests_sent": n, "failed_attempts": n,
          "consecutive_failures": n}}  failed attempts since the last success (Ray's gauge)
    }

Every received event ends in exactly one outcome per publisher, so after a clean shutdown each
publisher's `accounted_total` equals `received_total`.
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any

from aiohttp import web
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

from ray_otel_events.config import AggregatorConfig
from ray_otel_events.durable.durable_buffer import DurableBuffer
from ray_otel_events.durable.recent_ids import RecentIds
from ray_otel_events.durable.sqlite_queue import SqliteEventQueue
from ray_otel_events.encoding import ray_json
from ray_otel_events.encoding.process_pool import EncoderProcessPool
from ray_otel_events.encoding.ray_json import RayEventJsonEncoder
from ray_otel_events.exporters import publisher as pub
from ray_otel_events.exporters.http_json import HttpJsonPublisherClient
from ray_otel_events.exporters.transport import HttpTransport
from ray_otel_events.metrics import Counters
from ray_otel_events.observability.admin_server import AdminHttpServer
from ray_otel_events.observability.http_endpoints import Readiness, observability_routes
from ray_otel_events.observability.metrics_registry import ServerMetrics
from ray_otel_events.processors.event_buffer import EVICTED, MultiConsumerEventBuffer
from ray_otel_events.processors.exposable_filter import ExposableFilter
from ray_otel_events.receivers import grpc_add_events as rx
from ray_otel_events.receivers.grpc_server import GrpcServer
from ray_otel_events.security.grpc_guard import grpc_interceptors, grpc_options
from ray_otel_events.security.http_limits import ServerGuard
from ray_otel_events.security.options import ServerSecurity
from ray_otel_events.services.pipeline_metrics import register_buffers, register_publishers

HealthServicer = health_aio.HealthServicer

logger = logging.getLogger(__name__)

STATS_VERSION = 1
HTTP_PUBLISHER = "http_service"  # Ray's name for the external HTTP destination
READY_QUEUE_FRACTION = 0.9  # not ready (take traffic elsewhere) once the buffer is this full

_PER_TYPE = (*pub.OUTCOMES, EVICTED)


class AggregatorService:
    def __init__(
        self,
        config: AggregatorConfig,
        rng: random.Random | None = None,
        security: ServerSecurity | None = None,
    ) -> None:
        self.config = config
        self.security = security or ServerSecurity()
        self.queue: SqliteEventQueue | None = None
        if config.queue_dir:
            # Disk and memory hold the same events under one bound: the smaller of the two settings.
            self.queue = SqliteEventQueue.single(config.queue_dir, config.queue_max_bytes)
        self.buffer = MultiConsumerEventBuffer(
            config.max_buffer_size,
            min(config.max_buffer_bytes, config.queue_max_bytes) if self.queue else config.max_buffer_bytes,
            Counters("buffer"),
            on_evicted=self.queue.delete if self.queue else None,
        )
        self.durable = DurableBuffer(self.queue, self.buffer) if self.queue else None
        self.publishers: list[pub.EventPublisher[Any]] = []
        if config.http_enabled:
            preserve = config.preserve_proto_field_name
            pool = None
            processes = config.encoder_processes
            if processes is None:
                processes = 0 if ray_json.writes_compiled() else 2
            if processes:
                pool = EncoderProcessPool(preserve, processes)
                pool.warm_up()  # before the ready line: the first batch must not wait for a boot
            client = HttpJsonPublisherClient(
                config.export_addr,
                RayEventJsonEncoder(preserve_proto_field_name=preserve),
                timeout_s=config.publisher_timeout_s,
                pool=pool,
                transport=HttpTransport.build(dict(config.export_headers), config.export_ca_file),
            )
            self.publishers.append(
                pub.EventPublisher(
                    HTTP_PUBLISHER,
                    self.buffer,
                    client,
                    ExposableFilter(config.exposable_event_types),
                    pub.RetryPolicy(
                        max_retries=config.publisher_max_retries,
                        initial_backoff_s=config.publisher_initial_backoff_s,
                        max_backoff_s=config.publisher_max_backoff_s,
                        jitter_ratio=config.publisher_jitter_ratio,
                    ),
                    max_batch_size=config.max_batch_size,
                    send_interval_s=config.publisher_send_interval_s,
                    rng=rng,
                )
            )
        if self.queue is not None:
            for publisher in self.publishers:
                publisher.on_settled = self.queue.delete
        self.recent_ids = RecentIds(config.dedup_window) if config.dedup_window else None
        # With no destination nothing would ever read the buffer: accept and count only (Ray).
        sink: rx.EventSink | None = (self.durable or self.buffer) if self.publishers else None
        self.receiver = rx.AddEventsReceiver(sink, recent_ids=self.recent_ids)
        self.health = HealthServicer()
        token = self.security.token
        self.guard = ServerGuard(self.security.limits)
        self.server = GrpcServer(
            self.receiver,
            config.host,
            config.grpc_port,
            credentials=self.security.tls.grpc_credentials() if self.security.tls else None,
            interceptors=grpc_interceptors(self.guard.errors, token),
            add_services=lambda server: health_pb2_grpc.add_HealthServicer_to_server(self.health, server),
            options=grpc_options(self.security.limits),
        )
        self.metrics = self._build_metrics()
        self.admin: AdminHttpServer | None = None
        if config.metrics_port is not None:
            app = web.Application(middlewares=[token.http_middleware()] if token else [])
            app.add_routes(observability_routes(self.metrics, self.readiness))
            app.add_routes([web.get("/unrecognized", self._unrecognized)])
            tls = self.security.tls
            self.admin = AdminHttpServer(
                config.host, config.metrics_port, app, tls.ssl_context() if tls else None, self.guard
            )
        self._listening = False

    async def _unrecognized(self, _request: web.Request) -> web.Response:
        """The events not taken as the type their number names here (grpc_add_events)."""
        return web.json_response({"events": self.receiver.unrecognized_events()})

    def _build_metrics(self) -> ServerMetrics:
        metrics = ServerMetrics("aggregator")
        metrics.add_guard(self.guard)
        metrics.add_counters("receiver", self.receiver.counters)
        register_buffers(metrics, {"events": self.buffer})
        register_publishers(metrics, self.publishers)
        if self.queue is not None:
            queue = self.queue
            metrics.add_gauge("durable_queue_events", "events on disk", lambda: {(): float(queue.count)})
            metrics.add_gauge(
                "durable_queue_bytes", "event bytes on disk", lambda: {(): float(queue.size_bytes)}
            )
        metrics.add_gauge(
            "requests_in_flight_grpc",
            "AddEvents calls being handled now",
            lambda: {(): self.receiver.in_flight},
        )
        return metrics

    def readiness(self) -> Readiness:
        """Listening; the buffer below 90 % of its bounds; every destination reachable."""
        state = Readiness().add("listening", self._listening, f"grpc port {self.server.port}")
        buffer = self.buffer
        full = max(len(buffer) / buffer.max_events, buffer.size_bytes / buffer.max_bytes)
        state.add("queue_below_limit", full < READY_QUEUE_FRACTION, f"{full:.0%} of the buffer's bounds used")
        for p in self.publishers:
            # With a durable queue, an unreachable destination loses nothing: still ready.
            state.add(
                f"exporter_{p.name}",
                p.consecutive_failures == 0 or self.queue is not None,
                f"{p.consecutive_failures} failed attempts since the last success"
                + (" (events kept on disk)" if self.queue is not None else ""),
            )
        return state

    @property
    def processing_enabled(self) -> bool:
        return bool(self.publishers)

    async def start(self) -> int:
        """Start the publishers, then the gRPC server; returns the bound port."""
        if self.durable is not None:
            replayed = self.durable.replay(self.recent_ids)
            if replayed:
                logger.info("replaying %d events left in %s by the previous run", replayed, self.queue_path)
        for publisher in self.publishers:
            publisher.start()
        port = await self.server.start()
        if self.admin is not None:
            await self.admin.start()
        await self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        await self.health.set(rx.SERVICE, health_pb2.HealthCheckResponse.SERVING)
        self._listening = True
        return port

    async def shutdown(self) -> None:
        """Refuse new calls, flush every publisher (bounded by shutdown_flush_timeout_s), close."""
        self._listening = False
        await self.health.enter_graceful_shutdown()
        self.receiver.begin_shutdown()
        self.buffer.close()
        await asyncio.gather(*(p.shutdown(self.config.shutdown_flush_timeout_s) for p in self.publishers))
        await self.server.stop(grace_s=1.0)
        if self.admin is not None:
            await self.admin.stop()
        if self.queue is not None:
            if self.queue.count:
                logger.warning("%d events stay in %s for the next start", self.queue.count, self.queue_path)
            self.queue.close()

    @property
    def queue_path(self) -> str:
        return str(self.queue.path) if self.queue else ""

    def stats(self) -> dict[str, Any]:
        rc = self.receiver.counters
        received = rc.by_label(rx.RECEIVED, "event_type")
        publishers: dict[str, Any] = {}
        for p in self.publishers:
            entry: dict[str, Any] = {}
            for name in _PER_TYPE:
                source = self.buffer.counters if name == EVICTED else p.counters
                entry[name] = _per_type(source, name, p.name)
            entry["accounted_total"] = sum(sum(entry[name].values()) for name in _PER_TYPE)
            entry[pub.SEND_FAILURES] = _per_type(p.counters, pub.SEND_FAILURES, p.name)
            entry[pub.REQUESTS_SENT] = p.counters.get(pub.REQUESTS_SENT, publisher=p.name)
            entry[pub.FAILED_ATTEMPTS] = p.counters.get(pub.FAILED_ATTEMPTS, publisher=p.name)
            entry["consecutive_failures"] = p.consecutive_failures
            publishers[p.name] = entry
        return {
            "version": STATS_VERSION,
            "received": received,
            "received_total": sum(received.values()),
            "not_processed": rc.by_label(rx.NOT_PROCESSED, "event_type"),
            "requests": rc.get(rx.REQUESTS),
            "rejected_requests": rc.by_label(rx.REJECTED_REQUESTS, "reason"),
            "producer_dropped_task_attempts": rc.get(rx.PRODUCER_DROPPED_TASK_ATTEMPTS),
            "buffer": {
                "max_events": self.buffer.max_events,
                "max_bytes": self.buffer.max_bytes,
                "held_events": len(self.buffer),
            },
            "publishers": publishers,
            "duplicates": rc.by_label(rx.DUPLICATES, "event_type"),
            "durable_queue": None
            if self.queue is None or self.durable is None
            else {
                "path": str(self.queue.path),
                "held_events": self.queue.count,
                "held_bytes": self.queue.size_bytes,
                "replayed": self.durable.replayed,
                "recovered_from": str(self.queue.database.recovered_from or ""),
                "salvaged": self.queue.database.salvaged,
            },
        }


_SUMMARY_OUTCOMES = (
    (pub.PUBLISHED, "published"),
    (pub.FILTERED, "filtered (not exposable)"),
    (EVICTED, "dropped: evicted (buffer full)"),
    (pub.REJECTED, "dropped: refused by destination"),
    (pub.DROPPED_AFTER_RETRIES, "dropped: retries exhausted"),
    (pub.ENCODE_FAILED, "dropped: cannot encode"),
    (pub.DROPPED_AT_SHUTDOWN, "dropped: at shutdown"),
)


def summary_rows(stats: dict[str, Any]) -> list[tuple[str, int]]:
    """The exit table: what came in, and where each event ended, per destination."""
    rows = [("events received", stats["received_total"]), ("AddEvents calls", stats["requests"])]
    rows += [(f"calls refused: {reason}", n) for reason, n in sorted(stats["rejected_requests"].items())]
    if duplicates := sum(stats["duplicates"].values()):
        rows.append(("duplicates ignored (eventId)", duplicates))
    if durable := stats["durable_queue"]:
        rows += [("replayed from disk", durable["replayed"]), ("left on disk", durable["held_events"])]
    for name, entry in stats["publishers"].items():
        for key, label in _SUMMARY_OUTCOMES:
            total = sum(entry[key].values())
            if total or key == pub.PUBLISHED:
                rows.append((f"{name}: {label}", total))
    return rows


def _per_type(counters: Counters, name: str, consumer: str) -> dict[str, int]:
    """{event type name: n} for one publisher (labelled publisher=... or consumer=...)."""
    out: dict[str, int] = {}
    for series in counters.snapshot().get(name, []):
        labels = series["labels"]
        assert isinstance(labels, dict)
        if consumer in (labels.get("publisher"), labels.get("consumer")):
            etype = str(labels.get("event_type", ""))
            value = series["value"]
            assert isinstance(value, int)
            out[etype] = out.get(etype, 0) + value
    return out
