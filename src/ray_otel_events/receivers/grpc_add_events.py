"""The gRPC receiver: `/ray.rpc.events.EventAggregatorService/AddEvents`, as Ray's aggregator serves it.

Events are never turned into full Python messages here. The request is read through two small
"view" messages (add_events_views.proto) wire-compatible with AddEventsRequest: one sees each event as opaque
bytes (so the buffer keeps the producer's exact bytes, unknown fields included), the other sees
only each event's `event_type` number. Both parses run in C (upb); per event the receiver does no
Python work beyond list building.

An event is taken as the type its number names only when its payload is in that type's field
(the registry's `payload_field`): RayEvent has no version field, and Ray's branches numbered types
differently (submission-job events were 11/12 in some, placement groups' numbers here), so an event
whose payload is elsewhere, or missing, comes from a Ray whose numbers are not ours. It is not
passed on (a destination would read it as the type its number names here): it is counted
(`unrecognized`, by type number) and its exact bytes kept, the newest UNRECOGNIZED_KEPT of them,
for `unrecognized_events` (the aggregator's GET /unrecognized). A type number this schema does not
know (a newer Ray's) names nothing here to misread it as: it is passed on as it came, counted as
received like any other. `unrecognized` is labelled by a number the registry knows, so its series
are bounded. Ray 2.49's TASK_EXECUTION_EVENT is type 2 in field 9, wire-compatible with
TaskLifecycleEvent (its `taskState` map entries are StateTransitions on the wire), so taken as one.

Replies are Ray's: an empty AddEventsReply on success. Unlike Ray, a malformed request gets
INVALID_ARGUMENT and a request arriving during shutdown gets UNAVAILABLE, so the producer knows
its events were not taken (the producer's recorder keeps and re-sends them).
"""

from __future__ import annotations

import base64
import logging
import sqlite3
import time
from collections import Counter, deque
from typing import Any, NoReturn, Protocol

import grpc
from google.protobuf.message import DecodeError

from ray_otel_events.durable.recent_ids import RecentIds
from ray_otel_events.events.registry import REGISTRY, event_type_label
from ray_otel_events.metrics import Counters
from ray_otel_events.processors.event_buffer import BufferClosedError
from ray_otel_events.protobuf.add_events_views_pb2 import RawAddEventsRequest, TypesAddEventsRequest
from ray_otel_events.protobuf.events_event_aggregator_service_pb2 import TaskEventsMetadata

logger = logging.getLogger(__name__)

SERVICE = "ray.rpc.events.EventAggregatorService"
METHOD = "AddEvents"

# Counter names (stage "receiver").
RECEIVED = "received"  # labelled event_type
NOT_PROCESSED = "not_processed"  # labelled event_type: no destination is enabled (Ray: processing off)
REQUESTS = "requests"
REJECTED_REQUESTS = "rejected_requests"  # labelled reason
PRODUCER_DROPPED_TASK_ATTEMPTS = "producer_dropped_task_attempts"
DUPLICATES = "duplicates"  # labelled event_type: an eventId seen in the recent-id window, not taken again
UNRECOGNIZED = "unrecognized"  # labelled event_type (its number): payload not in its type's field
UNRECOGNIZED_KEPT = 1000

# type number -> the view's field its payload must be in
_PAYLOAD_FIELDS = {number: spec.payload_field for number, spec in REGISTRY.items()}

# Ray's agent accepts messages up to 512 MiB; the buffer's byte bound protects memory, not this.

_EMPTY_REPLY = b""  # AddEventsReply() serialized: Ray's aggregator always answers an empty reply


class ParsedRequest:
    __slots__ = ("dropped_task_attempts", "ids", "types", "unrecognized", "wires")

    def __init__(
        self,
        wires: list[bytes],
        types: list[int],
        dropped_task_attempts: int,
        ids: list[bytes] | None = None,
        unrecognized: list[tuple[int, bytes]] | None = None,
    ) -> None:
        self.wires = wires
        self.types = types
        self.dropped_task_attempts = dropped_task_attempts
        self.ids = ids if ids is not None else [b""] * len(wires)
        self.unrecognized = unrecognized or []  # (type number, wire bytes): not passed on

    def without_duplicates(self, recent: RecentIds) -> list[int]:
        """Drop events whose id was seen recently (in place); returns the dropped events' types."""
        first = recent.first_sighting
        keep = [first(event_id) for event_id in self.ids]
        if all(keep):
            return []
        dropped = [t for t, k in zip(self.types, keep, strict=True) if not k]
        self.wires = [w for w, k in zip(self.wires, keep, strict=True) if k]
        self.types = [t for t, k in zip(self.types, keep, strict=True) if k]
        self.ids = [i for i, k in zip(self.ids, keep, strict=True) if k]
        return dropped


def parse_add_events_request(data: bytes) -> ParsedRequest:
    """Split a serialized AddEventsRequest into per-event wire bytes and type numbers.

    Raises DecodeError if the request or an event's top-level framing is malformed; an event whose
    nested payload is malformed passes here and fails (counted) when a destination encodes it.
    """
    raw = RawAddEventsRequest.FromString(data)
    view = TypesAddEventsRequest.FromString(data)
    wires: list[bytes] = list(raw.events_data.events)
    views = view.events_data.events
    types: list[int] = [e.event_type for e in views]
    ids: list[bytes] = [e.event_id for e in views]
    dropped = 0
    if raw.events_data.task_events_metadata:
        dropped = len(
            TaskEventsMetadata.FromString(raw.events_data.task_events_metadata).dropped_task_attempts
        )
    payload = _PAYLOAD_FIELDS.get
    misplaced = [
        i
        for i, (t, seen) in enumerate(zip(types, views, strict=True))
        if (f := payload(t)) and not seen.HasField(f)
    ]
    unrecognized = [(types[i], wires[i]) for i in misplaced]
    for i in reversed(misplaced):
        del wires[i], types[i], ids[i]
    return ParsedRequest(wires, types, dropped, ids, unrecognized)


class EventSink(Protocol):
    """Where accepted events go (the multi-consumer buffer)."""

    def add_many(self, wires: list[bytes], types: list[int]) -> None: ...


class AddEventsReceiver:
    """Handles AddEvents calls; `sink=None` accepts and counts events but keeps none (Ray's
    "processing disabled" when no destination is configured)."""

    def __init__(
        self, sink: EventSink | None, counters: Counters | None = None, recent_ids: RecentIds | None = None
    ) -> None:
        self.counters = counters if counters is not None else Counters("receiver")
        self._sink = sink
        self.recent_ids = recent_ids
        self._shutting_down = False
        self.in_flight = 0  # calls being handled now (a gauge)
        self._unrecognized: deque[dict[str, Any]] = deque(maxlen=UNRECOGNIZED_KEPT)

    def unrecognized_events(self) -> list[dict[str, Any]]:
        """The newest events not taken as their number's type, oldest first: their type number,
        when they came (seconds) and their exact bytes (base64)."""
        return list(self._unrecognized)

    def begin_shutdown(self) -> None:
        """From now on every call is refused with UNAVAILABLE."""
        self._shutting_down = True

    async def _reject(self, context: Any, code: Any, reason: str, message: str) -> NoReturn:
        self.counters.add(REJECTED_REQUESTS, reason=reason)
        await context.abort(code, message)
        raise AssertionError("unreachable: abort raises")  # pragma: no cover

    async def add_events(self, request: bytes, context: Any) -> bytes:
        self.in_flight += 1
        try:
            return await self._add_events(request, context)
        finally:
            self.in_flight -= 1

    async def _add_events(self, request: bytes, context: Any) -> bytes:
        if self._shutting_down:
            await self._reject(
                context, grpc.StatusCode.UNAVAILABLE, "shutting_down", "aggregator is shutting down"
            )
        try:
            parsed = parse_add_events_request(request)
        except DecodeError as exc:
            await self._reject(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                "malformed",
                f"malformed AddEventsRequest ({len(request)} bytes): {exc}",
            )
        received = time.time()
        for etype, wire in parsed.unrecognized:
            self.counters.add(UNRECOGNIZED, event_type=event_type_label(etype))
            self._unrecognized.append(
                {"event_type": etype, "received": received, "wire": base64.b64encode(wire).decode()}
            )
        duplicates = parsed.without_duplicates(self.recent_ids) if self.recent_ids is not None else []
        for etype, n in Counter(duplicates).items():
            self.counters.add(DUPLICATES, n, event_type=event_type_label(etype))
        if self._sink is not None and parsed.wires:
            try:
                self._sink.add_many(parsed.wires, parsed.types)
            except BufferClosedError:
                self._forget(parsed)
                await self._reject(
                    context, grpc.StatusCode.UNAVAILABLE, "shutting_down", "aggregator is shutting down"
                )
            except (OSError, sqlite3.Error) as exc:  # the durable queue could not store them
                self._forget(parsed)
                logger.error("cannot store %d events in the durable queue: %s", len(parsed.wires), exc)
                await self._reject(
                    context, grpc.StatusCode.UNAVAILABLE, "storage_error", f"cannot store events: {exc}"
                )
        self.counters.add(REQUESTS)
        self.counters.add(PRODUCER_DROPPED_TASK_ATTEMPTS, parsed.dropped_task_attempts)
        counted = NOT_PROCESSED if self._sink is None else None
        for etype, n in Counter(parsed.types).items():
            name = event_type_label(etype)
            self.counters.add(RECEIVED, n, event_type=name)
            if counted is not None:
                self.counters.add(counted, n, event_type=name)
        return _EMPTY_REPLY

    def _forget(self, parsed: ParsedRequest) -> None:
        """Events refused after the duplicate check: their retry must not look like a duplicate."""
        if self.recent_ids is not None:
            self.recent_ids.forget(parsed.ids)

    def handler(self) -> grpc.GenericRpcHandler:
        """The service's method table; requests and replies stay bytes (no generic deserialization)."""
        method = grpc.unary_unary_rpc_method_handler(self.add_events)
        return grpc.method_handlers_generic_handler(SERVICE, {METHOD: method})
