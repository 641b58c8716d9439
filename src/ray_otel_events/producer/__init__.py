"""The producer side: a recorder in every process that emits events, and its link to the aggregator."""

from ray_otel_events.producer.aggregator_client import GrpcAggregatorExporter, RayEventExporter
from ray_otel_events.producer.recorder import RayEventRecorder

__all__ = ["GrpcAggregatorExporter", "RayEventExporter", "RayEventRecorder"]
