"""The RayEvent model: which event types exist, how each is keyed and merged, and builders."""

from ray_otel_events.events.registry import (
    REGISTRY,
    EventTypeSpec,
    MergeRule,
    entity_key,
    event_type_name,
    merge_into,
    payload_of,
    spec_for,
)
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent

__all__ = [
    "REGISTRY",
    "EventTypeSpec",
    "MergeRule",
    "RayEvent",
    "entity_key",
    "event_type_name",
    "merge_into",
    "payload_of",
    "spec_for",
]
