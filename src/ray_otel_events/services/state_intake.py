"""What `serve` takes in: RayEvent JSON POSTs and OTLP (traces, logs), all folded into the store.

`/v1/ray-events` is what Ray's aggregator, ours or the bridge POSTs: a JSON array of RayEvents,
on disk in the intake spool before the POST is answered (a 200 survives `kill -9`) and folded into
the store a moment later, several POSTs at a time (`store.background_fold`); reads of the state
wait for what was answered before them (`settled`). Where the compiled fold is built, a POST is
read from its text without the GIL and kept as its text until folded (`store.posted_body`): no
Python object per event. It is the bridge's receiver, so it
answers as the bridge does: an event that cannot be read is rejected and named in a 200 answer
(Ray's publisher retries any other answer forever), and the rest of its batch is stored. A value
only the fold reads (a bad base64 id deep in a piece) is found after the answer: that piece is
logged and counted in `serve_rejected_events`, and the rest of its row is stored.
`/v1/ray-export-events` is what the per-node collector POSTs: Ray's Export API events (datasets,
Train runs, submitted jobs), stored in one transaction before the answer (`store.sql_export`).
`/v1/traces` and `/v1/logs` are OTLP (the receiver speaks the protocol): spans are kept for trace
trees, log records carrying a RayEvent become state like the POSTed ones (our hooks' own event
records are only counted: `store.otlp_records`), and every other log record is a task log line.
While the store's database cannot be reached (`StoreWatch`), every intake answers 503 with
Retry-After, so clients keep their batches until it is back; so does an OTLP request whose write
the database kept rolling back (`StoreBusy`: deadlocks with other writers).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from typing import Any

import orjson
from aiohttp import web
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from ray_otel_events.encoding.newer_releases import UnknownTypes, unknown_type_items
from ray_otel_events.encoding.ray_export_events import ExportPost
from ray_otel_events.encoding.ray_json_posts import NotAnArrayError
from ray_otel_events.receivers.json_answers import REFUSED_REQUESTS, REJECTED_EVENTS, REQUESTS
from ray_otel_events.receivers.otlp_http import ConsumeResult, OtlpConsumer, OtlpHttpReceiver, QueueFullError
from ray_otel_events.receivers.ray_events_http import RayEventsHttpReceiver
from ray_otel_events.receivers.ray_export_events_http import ExportEventsConsumer, RayExportEventsHttpReceiver
from ray_otel_events.services.store_watch import RETRY_AFTER_S, StoreWatch
from ray_otel_events.store import otlp_records
from ray_otel_events.store.backend import IngestResult, Store, StoreBusy, StoreUnavailable, first_line
from ray_otel_events.store.background_fold import LINGER_S, MAX_PENDING_BYTES, BackgroundFold
from ray_otel_events.store.intake_spool import IntakeSpool
from ray_otel_events.store.posted_body import Accepted, read_posted
from ray_otel_events.store.set_aside import fold_apart

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024 * 1024


class StateIntake(OtlpConsumer, ExportEventsConsumer):
    """Routes for the intake, and counts of what they stored."""

    def __init__(
        self,
        store: Store,
        spool: IntakeSpool,
        watch: StoreWatch | None = None,
        max_pending_bytes: int = MAX_PENDING_BYTES,
        fold_linger_s: float = LINGER_S,
    ) -> None:
        self.store = store
        self.watch = watch
        self.events_by_type: Counter[str] = Counter()  # new events, duplicates not counted
        self.duplicates = 0
        self.fold_refused = 0  # accepted, then refused by their fold (a value only it reads)
        self.unknown_types = UnknownTypes()  # a later Ray's events: kept raw, no row
        self.fold = BackgroundFold(
            store,
            spool,
            self._count,
            spooled_events,
            max_pending_bytes=max_pending_bytes,
            linger_s=fold_linger_s,
        )
        self.spans = 0
        self.log_lines = 0
        self.hook_events = 0  # our hooks' event records: Ray's events are the state
        self.otlp = OtlpHttpReceiver(self, MAX_BODY_BYTES)
        self.ray_events = RayEventsHttpReceiver(self, MAX_BODY_BYTES)
        self.export_events = RayExportEventsHttpReceiver(self, MAX_BODY_BYTES)
        self.export_entities = 0  # export events stored (duplicates and older snapshots included)

    def routes(self) -> list[web.RouteDef]:
        return [
            *self.ray_events.routes(),
            *self.export_events.routes(),
            *self.otlp.routes(),
            web.get("/unrecognized", self._unrecognized),
        ]

    async def _unrecognized(self, _request: web.Request) -> web.Response:
        """The events of a type this version does not know: counts by name, the newest whole."""
        return web.Response(body=orjson.dumps(self.unknown_types.listing()), content_type="application/json")

    def read_ray_events(self, body: bytes) -> tuple[Accepted, list[str]]:
        return read_posted(body)

    def start(self) -> int:
        """Starts folding, first what a previous run accepted and did not fold (returned)."""
        return self.fold.start()

    async def settled(self) -> None:
        """Waits until every event answered before this call is folded."""
        await self.fold.settled()

    def close(self) -> None:
        """Folds everything accepted, then stops folding."""
        self.fold.close()

    def _refuse_while_unavailable(self) -> None:
        reason = self.watch.unavailable if self.watch is not None else None
        if reason is not None:
            raise QueueFullError(f"the store is unavailable: {reason}", RETRY_AFTER_S)

    def _lost(self, exc: StoreUnavailable) -> QueueFullError:
        if self.watch is not None:
            self.watch.failed(str(exc))
        return QueueFullError(f"the store is unavailable: {exc}", RETRY_AFTER_S)

    async def consume_ray_events(self, events: Accepted, body: bytes) -> None:
        self._refuse_while_unavailable()
        await self.fold.room()
        self.fold.put(events, body)

    async def consume_export_events(self, post: ExportPost) -> None:
        """Stored (one transaction) before the POST is answered: the collector's offsets move on
        only then."""
        self._refuse_while_unavailable()
        try:
            self.export_entities += await asyncio.to_thread(self.store.add_export_events, post, time.time())
        except StoreUnavailable as exc:
            raise self._lost(exc) from None
        except StoreBusy as exc:
            raise QueueFullError(f"the store is busy: {exc}", RETRY_AFTER_S) from None

    def _count(self, result: IngestResult) -> None:
        self.events_by_type.update(result.by_type)
        self.duplicates += result.duplicates
        self.fold_refused += len(result.refused)
        self.unknown_types.add(result.unknown_types)

    async def consume_traces(self, request: ExportTraceServiceRequest) -> ConsumeResult:
        self._refuse_while_unavailable()
        spans = otlp_records.from_traces(request)
        try:
            self.spans += await asyncio.to_thread(self.store.add_spans, spans)
        except StoreUnavailable as exc:
            raise self._lost(exc) from None
        except StoreBusy as exc:
            raise QueueFullError(f"the store is busy: {exc}", RETRY_AFTER_S) from None
        return ConsumeResult()

    async def consume_logs(self, request: ExportLogsServiceRequest) -> ConsumeResult:
        self._refuse_while_unavailable()
        intake = otlp_records.from_logs(request)
        rejected = list(intake.rejected)
        self.hook_events += intake.hook_events
        try:
            if intake.ray_events:
                result = await asyncio.to_thread(self._ingest_or_set_aside, list(intake.ray_events))
                self._count(result)
                rejected += result.invalid
            if intake.lines:
                self.log_lines += await asyncio.to_thread(self.store.add_log_lines, intake.lines)
        except StoreUnavailable as exc:
            raise self._lost(exc) from None
        except StoreBusy as exc:
            raise QueueFullError(f"the store is busy: {exc}", RETRY_AFTER_S) from None
        return ConsumeResult(len(rejected), rejected[0] if rejected else "")

    def _ingest_or_set_aside(self, events: list[Any]) -> IngestResult:
        """RayEvents from OTLP log records, folded as one batch; if that fails for a reason of
        theirs, folded apart and each event that fails alone set aside (as the POSTs' fold does)
        and answered as rejected."""
        try:
            result = self.store.ingest(events)
        except (StoreUnavailable, StoreBusy):
            raise
        except Exception as exc:  # one of its events, maybe: found by halving the batch
            logger.warning(
                "folding %d OTLP RayEvents failed (%s); folding them apart", len(events), first_line(exc)
            )
            body = orjson.dumps(events, default=str)
            result, failed = fold_apart(self.store, [body])
            self.fold.keep_aside(failed)
            result.invalid = [refusal.reason for refusal in result.refused] + [e.reason for e in failed]
        if result.ignored:  # rows for none of them: a type with no state, or one we cannot name
            result.unknown_types = unknown_type_items(events)
        return result

    @property
    def rejected_events(self) -> int:
        return self.ray_events.counters.get(REJECTED_EVENTS) + self.fold_refused

    def stats(self) -> dict[str, int]:
        counters = self.ray_events.counters
        return {
            "posts": counters.get(REQUESTS) - counters.get(REFUSED_REQUESTS),  # answered 200
            "events_stored": sum(self.events_by_type.values()),
            "duplicates": self.duplicates,
            "unknown_type_events": sum(self.unknown_types.by_name().values()),
            "rejected_events": self.rejected_events,
            "set_aside": self.fold.set_aside,
            "spans": self.spans,
            "log_lines": self.log_lines,
            "hook_events": self.hook_events,
            "export_events": self.export_entities,
        }


def spooled_events(body: bytes) -> Accepted:
    """The events a spooled POST was answered for, read again as the POST read them."""
    try:
        return read_posted(body)[0]
    except NotAnArrayError:  # never spooled: a POST that is not a JSON array is refused first
        return []
