"""A server wires the pieces every server shares (publishers, buffers) into its metrics: here,
above both, so the metrics registry needs to know neither."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ray_otel_events.exporters.publisher import EventPublisher
from ray_otel_events.observability.metrics_registry import GaugeValues, ServerMetrics
from ray_otel_events.processors.event_buffer import MultiConsumerEventBuffer


def register_publishers(metrics: ServerMetrics, publishers: Sequence[EventPublisher[Any]]) -> None:
    """Outcome counters, the send-latency histogram and Ray's consecutive-failures gauge."""
    for publisher in publishers:
        metrics.add_counters("publisher", publisher.counters)
        publisher.observe_attempt = metrics.publish_seconds.labels(publisher.name).observe

    def consecutive() -> GaugeValues:
        return {(p.name,): float(p.consecutive_failures) for p in publishers}

    def since_success() -> GaugeValues:
        now = time.monotonic()
        return {(p.name,): now - p.last_success for p in publishers if p.last_success is not None}

    metrics.add_gauge(
        "publisher_consecutive_failures",
        "failed send attempts since the last success (Ray: consecutive_failures_since_last_success)",
        consecutive,
        ("publisher",),
    )
    metrics.add_gauge(
        "publisher_seconds_since_last_success",
        "seconds since a batch was last delivered (absent before the first delivery)",
        since_success,
        ("publisher",),
    )


def register_buffers(metrics: ServerMetrics, buffers: dict[str, MultiConsumerEventBuffer]) -> None:
    """Eviction counters and the length/bytes gauges of each named in-memory queue."""
    for buffer in buffers.values():
        metrics.add_counters("queue", buffer.counters)
    metrics.add_gauge(
        "queue_events",
        "events held in the in-memory queue (Collector: otelcol_exporter_queue_size)",
        lambda: {(name,): float(len(b)) for name, b in buffers.items()},
        ("queue",),
    )
    metrics.add_gauge(
        "queue_bytes",
        "bytes held in the in-memory queue, the figure its byte bound limits",
        lambda: {(name,): float(b.size_bytes) for name, b in buffers.items()},
        ("queue",),
    )
    metrics.add_gauge(
        "queue_capacity_events",
        "the queue's event bound (Collector: otelcol_exporter_queue_capacity)",
        lambda: {(name,): float(b.max_events) for name, b in buffers.items()},
        ("queue",),
    )
