"""Event records written by our encoder and posted as OTLP/HTTP protobuf from the traced process.

An `EventSink` for a hook of your own (`install_tracing(event_log_sink=...)`). The bundled OTLP hook
no longer posts from its processes: its forwarder makes the same records from the spool
(tracing/forwarder.py), because Ray ends workers without exit hooks and what this sink still holds
then is lost.

Through the SDK, an event record is costly: the logger builds an SDK record holding the event as
nested dicts, and the exporter turns every key of the body and of the flattened attributes into a
protobuf object, a large share of a traced pool's CPU. The records are
ours and nothing but an exporter reads them, so this sink writes each one straight to wire bytes
(the bridge's record, `otel/log_records.log_record_wire`, written from the task's facts without
building the event: `otel/task_records.py`) and posts batches itself, with the settings the SDK
exporter would read (`config.otlp_signal_config("logs")`).

A batch is posted soon after the events arrive (at most every `interval_s`), when it is full, and
on `flush` (exit hooks). Retryable failures (connection, 429/502/503/504) are retried with backoff
until the export timeout (`tracing/otlp_http.py`); after that, or on a permanent status, the batch
is counted as dropped and reported once. At most `max_queue` records wait; past that the oldest
are dropped and counted, as the SDK's batch processor does. A forked child starts empty, with its
own connection.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from ray_otel_events.config import OtlpSignalConfig
from ray_otel_events.exporters.retry import RetryPolicy
from ray_otel_events.metrics import Counters
from ray_otel_events.otel import otlp_wire, semconv
from ray_otel_events.otel.task_records import TaskEventRecords
from ray_otel_events.otel.task_spans import SpanEvent
from ray_otel_events.tracing.background import PromptFlusher, at_fork_in_child
from ray_otel_events.tracing.otlp_http import DROPPED, RETRY, OtlpHttpPoster

EXPORTED = "exported_records"


class OtlpEventLogSink:
    """An `EventSink` (tracing/task_events.py) for OTLP/HTTP protobuf endpoints."""

    def __init__(
        self,
        config: OtlpSignalConfig,
        resource_attributes: dict[str, Any],
        *,
        producer: str,
        max_batch: int = 512,
        max_queue: int = 2048,
        interval_s: float = 0.1,
        retry: RetryPolicy = RETRY,
    ) -> None:
        self.config = config
        self.max_batch = max_batch
        self.max_queue = max_queue
        self.counters = Counters("otlp_event_logs")
        self._poster = OtlpHttpPoster(config, self.counters, exported=EXPORTED, retry=retry)
        self._resource = otlp_wire.attributes(resource_attributes, b"\x0a")  # Resource.attributes = 1
        self._scope = otlp_wire.string_field(b"\x0a", semconv.INSTRUMENTATION_SCOPE)  # scope.name = 1
        self._writer = TaskEventRecords(
            otlp_wire.attributes({semconv.PRODUCER_ATTR: producer}, otlp_wire.LOG_RECORD_ATTRIBUTES)
        )
        self.prompt = PromptFlusher(
            self._send_pending, name="ray_otel_events.event_logs", min_interval_s=interval_s
        )
        self._init_process_state()
        at_fork_in_child(self._init_process_state)

    def _init_process_state(self) -> None:
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._records: list[bytes] = []

    # -- EventSink ---------------------------------------------------------------------------------

    def consume(self, events: list[SpanEvent], prompt: bool) -> None:
        now = time.time_ns()
        record = self._writer.record
        records = [record(item, now) for item in events]
        with self._lock:
            self._records.extend(records)
            over = len(self._records) - self.max_queue
            if over > 0:
                del self._records[:over]
            full = len(self._records) >= self.max_batch
        if over > 0:
            self.counters.add(DROPPED, over, reason="queue_full")
        if full:
            self._send_pending()
        else:
            self.prompt.request()

    def flush(self, timeout_s: float) -> bool:
        return self._send_pending(time.monotonic() + timeout_s)

    # -- sending -----------------------------------------------------------------------------------

    def pending(self) -> int:
        return len(self._records)

    def _send_pending(self, deadline: float | None = None) -> bool:
        """Post everything waiting, in batches, one sender at a time; True if all was delivered."""
        ok = True
        with self._send_lock:
            while True:
                with self._lock:
                    batch = self._records[: self.max_batch]
                    del self._records[: self.max_batch]
                if not batch:
                    return ok
                ok = self._post(batch, deadline) and ok

    def _post(self, records: list[bytes], deadline: float | None) -> bool:
        body = otlp_wire.logs_request(self._resource, self._scope, records)
        return self._poster.post(body, len(records), deadline, what="event records")
