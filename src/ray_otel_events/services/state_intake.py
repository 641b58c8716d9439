"""What `serve` takes in: RayEvent JSON POSTs and OTLP (traces, logs), all folded into the store.

`/v1/ray-events` is what Ray's aggregator, ours or the bridge POSTs: a JSON array of RayEvents,
stored before the POST is answered, so a 200 means stored. `/v1/traces` and `/v1/logs` are OTLP
(the receiver speaks the protocol): spans are kept for trace trees, log records carrying a
RayEvent become state like the POSTed ones, and every other log record is a task log line.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import orjson
from aiohttp import web
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from ray_otel_events.receivers.http_body import BodyError, read_body
from ray_otel_events.receivers.otlp_http import ConsumeResult, OtlpConsumer, OtlpHttpReceiver
from ray_otel_events.store import otlp_records
from ray_otel_events.store.sqlite_store import EventStore, IngestResult

MAX_BODY_BYTES = 64 * 1024 * 1024


class StateIntake(OtlpConsumer):
    """Routes for the intake, and counts of what they stored."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self.posts = 0
        self.events_by_type: Counter[str] = Counter()  # new events, duplicates not counted
        self.duplicates = 0
        self.rejected = 0
        self.spans = 0
        self.log_lines = 0
        self.otlp = OtlpHttpReceiver(self, MAX_BODY_BYTES)

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/v1/ray-events", self.ingest), *self.otlp.routes()]

    async def _store_events(self, events: list[Any]) -> IngestResult:
        result = await asyncio.to_thread(self.store.ingest, events)
        self.events_by_type.update(result.by_type)
        self.duplicates += result.duplicates
        return result

    async def ingest(self, request: web.Request) -> web.Response:
        try:
            body = await read_body(request, MAX_BODY_BYTES)
        except BodyError as exc:
            self.rejected += 1
            return web.Response(status=exc.status, text=exc.reason)
        try:
            events = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            self.rejected += 1
            return web.Response(status=400, text=f"body is not JSON: {exc}")
        if not isinstance(events, list):
            self.rejected += 1
            return web.Response(status=400, text="body must be a JSON array of RayEvents")
        result = await self._store_events(events)
        self.posts += 1
        if result.invalid:
            # The valid events of the batch are stored; say what was not.
            self.rejected += 1
            return web.Response(
                status=400,
                text=f"{len(result.invalid)} event(s) not stored: {result.invalid[0]}"
                f" ({result.stored} stored, {result.duplicates} duplicates)",
            )
        body_out = {"stored": result.stored, "duplicates": result.duplicates, "ignored": result.ignored}
        return web.Response(body=orjson.dumps(body_out), content_type="application/json")

    async def consume_traces(self, request: ExportTraceServiceRequest) -> ConsumeResult:
        spans = otlp_records.from_traces(request)
        self.spans += await asyncio.to_thread(self.store.add_spans, spans)
        return ConsumeResult()

    async def consume_logs(self, request: ExportLogsServiceRequest) -> ConsumeResult:
        intake = otlp_records.from_logs(request)
        rejected = list(intake.rejected)
        if intake.ray_events:
            result = await self._store_events(list(intake.ray_events))
            rejected += result.invalid
        if intake.lines:
            self.log_lines += await asyncio.to_thread(self.store.add_log_lines, intake.lines)
        return ConsumeResult(len(rejected), rejected[0] if rejected else "")

    def stats(self) -> dict[str, int]:
        return {
            "posts": self.posts,
            "events_stored": sum(self.events_by_type.values()),
            "duplicates": self.duplicates,
            "rejected_posts": self.rejected,
            "spans": self.spans,
            "log_lines": self.log_lines,
        }
