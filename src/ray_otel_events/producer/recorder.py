"""RayEventRecorder: the bounded, merging, periodic sender every producing process runs.

It behaves like Ray's C++ recorder (bounded buffer dropping the oldest, a periodic export that
groups by (entity id, event type), merges, keeps first-occurrence order, stamps `node_id`, gives each
exported event a fresh 28-byte `event_id`, and at most one RPC in flight), and fixes its known loss:
a failed RPC puts its events back, still bounded and counted, with their event ids kept so a
receiver can de-duplicate a re-send; `stop()` flushes within a bounded time. A call the aggregator
refuses (a missing or wrong token, e.g. Ray 2.60's default token auth) is said at once, in one log
line naming the cause and the variables that carry the token, counted in `refused_rpcs`, and its
events kept like any failure's; the line comes again only after a call got through. Events the
bound pushes out while refused are counted and logged once too, never dropped silently.
"""

from __future__ import annotations

import atexit
import collections
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from ray_otel_events.config import (
    AUTH_TOKEN,
    AUTH_TOKEN_FILE,
    RAY_AUTH_TOKEN,
    RAY_AUTH_TOKEN_PATH,
    RecorderConfig,
)
from ray_otel_events.events import ids
from ray_otel_events.events.registry import entity_key, event_type_label, merge_into
from ray_otel_events.metrics import Counters
from ray_otel_events.producer.aggregator_client import GrpcAggregatorExporter, RayEventExporter
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent
from ray_otel_events.protobuf.events_event_aggregator_service_pb2 import AddEventsRequest

logger = logging.getLogger(__name__)

_SOURCE_NAMES: dict[int, str] = {number: name for name, number in RayEvent.SourceType.items()}
# gRPC codes that mean "not you", not "not now": retrying will not help until the token changes.
REFUSED_CODES = frozenset({"UNAUTHENTICATED", "PERMISSION_DENIED"})


def refusal_code(exc: BaseException) -> str:
    """The gRPC status name when `exc` is the aggregator refusing the caller, else ""."""
    code = getattr(exc, "code", None)
    if not callable(code):
        return ""
    try:
        name = getattr(code(), "name", "")
    except Exception:
        return ""
    return name if name in REFUSED_CODES else ""


def _source_name(event: RayEvent) -> str:
    return _SOURCE_NAMES.get(event.source_type, str(event.source_type))


@dataclass(slots=True)
class _Sealed:
    """A merged event ready to send; once sealed its content and event_id never change."""

    event: RayEvent
    raw_count: int


_Entry = RayEvent | _Sealed


class RayEventRecorder:
    """Thread-safe; `add()` never blocks on the network. The recorder owns events once added."""

    def __init__(
        self,
        exporter: RayEventExporter,
        *,
        config: RecorderConfig | None = None,
        node_id: bytes | None = None,
    ) -> None:
        self.config = config if config is not None else RecorderConfig.from_env()
        self.exporter = exporter
        self.node_id = node_id if node_id is not None else ids.node_id_for_host(os.uname().nodename)
        self.counters = Counters("recorder")
        self._lock = threading.Lock()
        self._buffer: collections.deque[_Entry] = collections.deque()
        self._buffered_raw = 0
        self._export_lock = threading.Lock()  # one export (so one RPC) at a time
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._refused = False  # the last call was refused (and said so); cleared by a success
        self._said_dropped = False
        os.register_at_fork(after_in_child=self._after_fork_in_child)

    @classmethod
    def to_aggregator(
        cls, address: str, *, config: RecorderConfig | None = None, node_id: bytes | None = None
    ) -> RayEventRecorder:
        """A recorder sending to the aggregator at host:port over gRPC (ours or Ray's)."""
        config = config if config is not None else RecorderConfig.from_env()
        return cls(
            GrpcAggregatorExporter(address, timeout_s=config.rpc_timeout_s), config=config, node_id=node_id
        )

    # -- producing ---------------------------------------------------------------------------

    def add(self, event: RayEvent) -> None:
        self.add_many((event,))

    def add_many(self, events: Any) -> None:
        with self._lock:
            for event in events:
                if self._stopped or not self.config.enabled:
                    self._count_drop(event, 1, reason="stopped" if self._stopped else "disabled")
                    continue
                self.counters.add("recorded", 1, event_type=event_type_label(event.event_type))
                self._buffer.append(event)
                self._buffered_raw += 1
            self._enforce_bound()

    def _enforce_bound(self) -> None:
        """Drop the oldest entries beyond capacity (lock held)."""
        while len(self._buffer) > self.config.max_queued_events:
            victim = self._buffer.popleft()
            if isinstance(victim, _Sealed):
                self._buffered_raw -= victim.raw_count
                self._count_drop(victim.event, victim.raw_count, reason="buffer_full")
            else:
                self._buffered_raw -= 1
                self._count_drop(victim, 1, reason="buffer_full")
            if not self._said_dropped:
                self._said_dropped = True
                logger.warning(
                    "ray event recorder: buffer full (%d events%s): dropping the oldest, counted in "
                    "'dropped' (reason buffer_full)",
                    self.config.max_queued_events,
                    ", the aggregator refuses this process's calls" if self._refused else "",
                )

    def _count_drop(self, event: RayEvent, raw_count: int, reason: str) -> None:
        self.counters.add(
            "dropped",
            raw_count,
            source=_source_name(event),
            event_type=event_type_label(event.event_type),
            reason=reason,
        )

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Begin periodic export (idempotent); an atexit hook flushes on normal interpreter exit."""
        with self._lock:
            if self._thread is not None or self._stopped:
                return
            self._thread = threading.Thread(target=self._run, name="RayEventRecorder", daemon=True)
            self._thread.start()
        atexit.register(self.stop)

    def flush(self, timeout_s: float | None = None) -> bool:
        """Export everything buffered now, retrying failures until the timeout; True if empty after."""
        limit = self.config.shutdown_flush_timeout_ms / 1000 if timeout_s is None else timeout_s
        deadline = time.monotonic() + limit
        while True:
            self._export_once(deadline)
            with self._lock:
                if not self._buffer:
                    return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))

    def stop(self, timeout_s: float | None = None) -> bool:
        """Refuse new events, flush within the timeout, count what is left as dropped."""
        with self._lock:
            if self._stopped:
                return not self._buffer
            self._stopped = True
            thread = self._thread
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        flushed = self.flush(timeout_s)
        with self._lock:
            while self._buffer:
                entry = self._buffer.popleft()
                event, raw = (entry.event, entry.raw_count) if isinstance(entry, _Sealed) else (entry, 1)
                self._count_drop(event, raw, reason="not_flushed_at_stop")
            self._buffered_raw = 0
        self.exporter.close()
        return flushed

    def _run(self) -> None:
        interval = self.config.report_interval_ms / 1000
        while True:
            self._wake.wait(interval)
            self._wake.clear()
            with self._lock:
                if self._stopped:
                    return
            self._export_once(deadline=None)

    def _after_fork_in_child(self) -> None:
        """A forked child must not re-send its parent's events nor use its parent's thread."""
        self._lock = threading.Lock()
        self._export_lock = threading.Lock()
        self._wake = threading.Event()
        self._buffer = collections.deque()
        self._buffered_raw = 0
        self._thread = None
        self.counters = Counters("recorder")

    # -- exporting ---------------------------------------------------------------------------

    def _export_once(self, deadline: float | None) -> None:
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not self._export_lock.acquire(timeout=-1 if timeout is None else timeout):
            return  # an export is in flight; its tick covers what is buffered
        try:
            with self._lock:
                if not self._buffer:
                    return
                entries = list(self._buffer)
                self._buffer.clear()
                self._buffered_raw = 0
            batch = self._group_and_seal(entries)
            request = AddEventsRequest()
            request.events_data.events.extend(item.event for item in batch)
            try:
                self.exporter.export(request)
            except Exception as exc:  # any transport failure: keep the events, count the failure
                self.counters.add("failed_rpcs", 1, error=type(exc).__name__)
                refused = refusal_code(exc)
                if refused:
                    self._say_refused(refused, exc, sum(item.raw_count for item in batch))
                self._requeue(batch)
                return
            if self._refused:
                self._refused = False
                logger.warning("ray event recorder: the aggregator accepts this process's calls again")
            for item in batch:
                name = event_type_label(item.event.event_type)
                self.counters.add("sent", 1, event_type=name)
                self.counters.add("sent_raw", item.raw_count, event_type=name)
        finally:
            self._export_lock.release()

    def _say_refused(self, code: str, exc: BaseException, events: int) -> None:
        """Count every refusal; log the first of a run of them, naming the cause."""
        self.counters.add("refused_rpcs", 1, code=code)
        if self._refused:
            return
        self._refused = True
        details = getattr(exc, "details", None)
        detail = details() if callable(details) else str(exc)
        logger.error(
            "ray event recorder: the aggregator at %s refused the call (%s: %s); %d events kept, "
            "retried every report interval within the bound of %d. A token is sent from %s or %s, "
            "else Ray's (%s, %s, ~/.ray/auth_token): check it matches the cluster's",
            getattr(self.exporter, "address", "?"),
            code,
            detail,
            events,
            self.config.max_queued_events,
            AUTH_TOKEN_FILE,
            AUTH_TOKEN,
            RAY_AUTH_TOKEN,
            RAY_AUTH_TOKEN_PATH,
        )

    def _group_and_seal(self, entries: list[_Entry]) -> list[_Sealed]:
        """Merge raw events by (entity id, type) in first-occurrence order; sealed ones pass as is."""
        out: list[_Sealed] = []
        groups: dict[object, _Sealed] = {}
        for entry in entries:
            if isinstance(entry, _Sealed):
                out.append(entry)
                continue
            key = entity_key(entry)
            if key is not None and key in groups:
                group = groups[key]
                merge_into(group.event, entry)
                group.raw_count += 1
                self.counters.add("merged", 1, event_type=event_type_label(entry.event_type))
                continue
            sealed = _Sealed(entry, 1)
            out.append(sealed)
            if key is not None:
                groups[key] = sealed
        for sealed in out:
            self._stamp(sealed.event)  # no-op for re-queued events: their ids are kept
        return out

    def _stamp(self, event: RayEvent) -> None:
        if not event.event_id:
            event.event_id = ids.new_unique_id()
        if not event.node_id:
            event.node_id = self.node_id

    def _requeue(self, batch: list[_Sealed]) -> None:
        """Put a failed batch back in front (it is the oldest), still bounded and counted."""
        with self._lock:
            self._buffer.extendleft(reversed(batch))
            self._buffered_raw += sum(item.raw_count for item in batch)
            self.counters.add("requeued", len(batch))
            self._enforce_bound()

    # -- reading -----------------------------------------------------------------------------

    def pending(self) -> int:
        """Recorded events not yet acknowledged by the aggregator."""
        with self._lock:
            return self._buffered_raw

    def stats(self) -> dict[str, Any]:
        """Totals for summaries and tests: recorded = sent_raw + dropped + pending (+ merged detail)."""
        c = self.counters
        return {
            "recorded": c.get("recorded"),
            "merged": c.get("merged"),
            "sent": c.get("sent"),
            "sent_raw": c.get("sent_raw"),
            "dropped": c.get("dropped"),
            "dropped_by_source": c.by_label("dropped", "source"),
            "failed_rpcs": c.get("failed_rpcs"),
            "refused_rpcs": c.get("refused_rpcs"),
            "requeued": c.get("requeued"),
            "pending": self.pending(),
            "recorded_by_type": c.by_label("recorded", "event_type"),
            "sent_by_type": c.by_label("sent", "event_type"),
            "dropped_by_type": c.by_label("dropped", "event_type"),
        }
