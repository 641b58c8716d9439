"""One entry per RayEvent type: payload field, source, entity id and merge rule.

Adding an event type is one entry here plus its message in proto/. Everything else (the recorder's
grouping, the aggregator's filter, the bridges) reads this table instead of hard-coding types.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent

# The enums' numbers as plain attributes: a generated enum wrapper resolves every name in Python's
# __getattr__ on every access, and these are read several times per event on hot paths.
ET: Any = SimpleNamespace(**dict(RayEvent.EventType.items()))
ST: Any = SimpleNamespace(**dict(RayEvent.SourceType.items()))


class MergeRule(enum.Enum):
    """How two events of the same (entity id, event type) combine inside one export window."""

    KEEP_FIRST = "keep_first"  # definitions never change: the first one wins
    LIFECYCLE = "lifecycle"  # append state transitions in order; later set scalars overwrite
    PROFILE = "profile"  # append profile entries; component fields of the first are kept
    NEVER = "never"  # each event stands alone (platform events, as in Ray)


EntityIdFn = Callable[[Any], Hashable]


@dataclass(frozen=True)
class EventTypeSpec:
    event_type: int
    payload_field: str
    source_type: int
    entity_id: EntityIdFn
    merge: MergeRule

    @property
    def name(self) -> str:
        """The EventType enum name, e.g. TASK_LIFECYCLE_EVENT."""
        return RayEvent.EventType.Name(self.event_type)


def _task_attempt(p: Any) -> Hashable:
    return (p.task_id, p.task_attempt)


def _profile_attempt(p: Any) -> Hashable:
    return (p.task_id, p.attempt_number)


def _field(name: str) -> EntityIdFn:
    def get(p: Any) -> Hashable:
        value: Hashable = getattr(p, name)
        return value

    get.__name__ = f"entity_{name}"
    return get


def _no_entity(p: Any) -> Hashable:
    return None


_SPECS = [
    EventTypeSpec(
        ET.TASK_DEFINITION_EVENT,
        "task_definition_event",
        ST.CORE_WORKER,
        _task_attempt,
        MergeRule.KEEP_FIRST,
    ),
    EventTypeSpec(
        ET.TASK_LIFECYCLE_EVENT,
        "task_lifecycle_event",
        ST.CORE_WORKER,
        _task_attempt,
        MergeRule.LIFECYCLE,
    ),
    EventTypeSpec(
        ET.ACTOR_TASK_DEFINITION_EVENT,
        "actor_task_definition_event",
        ST.CORE_WORKER,
        _task_attempt,
        MergeRule.KEEP_FIRST,
    ),
    EventTypeSpec(
        ET.TASK_PROFILE_EVENT,
        "task_profile_events",
        ST.CORE_WORKER,
        _profile_attempt,
        MergeRule.PROFILE,
    ),
    EventTypeSpec(
        ET.DRIVER_JOB_DEFINITION_EVENT,
        "driver_job_definition_event",
        ST.GCS,
        _field("job_id"),
        MergeRule.KEEP_FIRST,
    ),
    EventTypeSpec(
        ET.DRIVER_JOB_LIFECYCLE_EVENT,
        "driver_job_lifecycle_event",
        ST.GCS,
        _field("job_id"),
        MergeRule.LIFECYCLE,
    ),
    EventTypeSpec(
        ET.NODE_DEFINITION_EVENT,
        "node_definition_event",
        ST.GCS,
        _field("node_id"),
        MergeRule.KEEP_FIRST,
    ),
    EventTypeSpec(
        ET.NODE_LIFECYCLE_EVENT,
        "node_lifecycle_event",
        ST.GCS,
        _field("node_id"),
        MergeRule.LIFECYCLE,
    ),
    EventTypeSpec(
        ET.ACTOR_DEFINITION_EVENT,
        "actor_definition_event",
        ST.GCS,
        _field("actor_id"),
        MergeRule.KEEP_FIRST,
    ),
    EventTypeSpec(
        ET.ACTOR_LIFECYCLE_EVENT,
        "actor_lifecycle_event",
        ST.GCS,
        _field("actor_id"),
        MergeRule.LIFECYCLE,
    ),
    EventTypeSpec(
        ET.PLACEMENT_GROUP_DEFINITION_EVENT,
        "placement_group_definition_event",
        ST.GCS,
        _field("placement_group_id"),
        MergeRule.KEEP_FIRST,
    ),
    EventTypeSpec(
        ET.PLACEMENT_GROUP_LIFECYCLE_EVENT,
        "placement_group_lifecycle_event",
        ST.GCS,
        _field("placement_group_id"),
        MergeRule.LIFECYCLE,
    ),
    EventTypeSpec(
        ET.SUBMISSION_JOB_DEFINITION_EVENT,
        "submission_job_definition_event",
        ST.JOBS,
        _field("submission_id"),
        MergeRule.KEEP_FIRST,
    ),
    EventTypeSpec(
        ET.SUBMISSION_JOB_LIFECYCLE_EVENT,
        "submission_job_lifecycle_event",
        ST.JOBS,
        _field("submission_id"),
        MergeRule.LIFECYCLE,
    ),
    EventTypeSpec(
        ET.PLATFORM_EVENT,
        "platform_event",
        ST.CLUSTER_LIFECYCLE,
        _no_entity,
        MergeRule.NEVER,
    ),
    EventTypeSpec(
        ET.WORKER_LIFECYCLE_EVENT,
        "worker_lifecycle_event",
        ST.GCS,
        _field("worker_id"),
        MergeRule.LIFECYCLE,
    ),
    EventTypeSpec(
        ET.WORKER_DEFINITION_EVENT,
        "worker_definition_event",
        ST.GCS,
        _field("worker_id"),
        MergeRule.KEEP_FIRST,
    ),
]

REGISTRY: dict[int, EventTypeSpec] = {spec.event_type: spec for spec in _SPECS}


def spec_for(event_type: int) -> EventTypeSpec | None:
    """The entry for a type number, or None for a number this schema does not know."""
    return REGISTRY.get(event_type)


_NAMES: dict[int, str] = {spec.event_type: spec.name for spec in _SPECS}


def event_type_name(event_type: int) -> str:
    """The enum name, or the number as text for a type this schema does not know."""
    return _NAMES.get(event_type) or str(event_type)


UNKNOWN_LABEL = "unknown"
_KNOWN_NAMES = frozenset(_NAMES.values())


def event_type_label(event_type: int) -> str:
    """The enum name as a metric's label: every type this schema does not know is `unknown`, so
    numbers a client makes up cannot add series without bound."""
    return _NAMES.get(event_type) or UNKNOWN_LABEL


def event_type_name_label(name: str) -> str:
    """`event_type_label` of a type given by its name (as the store counts them)."""
    return name if name in _KNOWN_NAMES else UNKNOWN_LABEL


def payload_of(event: RayEvent) -> Any:
    """The nested payload message that matches the event's type."""
    spec = REGISTRY.get(event.event_type)
    if spec is None:
        raise KeyError(f"unknown event type {event.event_type}")
    return getattr(event, spec.payload_field)


def entity_key(event: RayEvent) -> Hashable | None:
    """The recorder's merge key (entity id, event type), or None if the event must stand alone."""
    spec = REGISTRY.get(event.event_type)
    if spec is None or spec.merge is MergeRule.NEVER:
        return None
    return (spec.entity_id(getattr(event, spec.payload_field)), event.event_type)


def merge_into(acc: RayEvent, other: RayEvent) -> None:
    """Fold `other` (later) into `acc` (earlier) by the type's merge rule; acc keeps its envelope."""
    spec = REGISTRY[acc.event_type]
    if spec.merge is MergeRule.KEEP_FIRST:
        return
    if spec.merge is MergeRule.LIFECYCLE:
        # protobuf MergeFrom: repeated transitions concatenate in order, set scalars and
        # present optionals overwrite, sub-messages merge field by field (Ray 2.60's rule).
        getattr(acc, spec.payload_field).MergeFrom(getattr(other, spec.payload_field))
        return
    if spec.merge is MergeRule.PROFILE:
        entries = other.task_profile_events.profile_events.events
        acc.task_profile_events.profile_events.events.extend(entries)
        return
    raise ValueError(f"{spec.name} events are never merged")
