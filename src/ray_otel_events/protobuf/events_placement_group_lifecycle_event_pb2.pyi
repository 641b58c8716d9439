import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PlacementGroupLifecycleEvent(_message.Message):
    __slots__ = ("placement_group_id", "state_transitions")
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        PENDING: _ClassVar[PlacementGroupLifecycleEvent.State]
        PREPARED: _ClassVar[PlacementGroupLifecycleEvent.State]
        CREATED: _ClassVar[PlacementGroupLifecycleEvent.State]
        REMOVED: _ClassVar[PlacementGroupLifecycleEvent.State]
        RESCHEDULING: _ClassVar[PlacementGroupLifecycleEvent.State]
    PENDING: PlacementGroupLifecycleEvent.State
    PREPARED: PlacementGroupLifecycleEvent.State
    CREATED: PlacementGroupLifecycleEvent.State
    REMOVED: PlacementGroupLifecycleEvent.State
    RESCHEDULING: PlacementGroupLifecycleEvent.State
    class SchedulingState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        QUEUED: _ClassVar[PlacementGroupLifecycleEvent.SchedulingState]
        SCHEDULING_REMOVED: _ClassVar[PlacementGroupLifecycleEvent.SchedulingState]
        SCHEDULING_STARTED: _ClassVar[PlacementGroupLifecycleEvent.SchedulingState]
        NO_RESOURCES: _ClassVar[PlacementGroupLifecycleEvent.SchedulingState]
        INFEASIBLE: _ClassVar[PlacementGroupLifecycleEvent.SchedulingState]
        FAILED_TO_COMMIT_RESOURCES: _ClassVar[PlacementGroupLifecycleEvent.SchedulingState]
        FINISHED: _ClassVar[PlacementGroupLifecycleEvent.SchedulingState]
    QUEUED: PlacementGroupLifecycleEvent.SchedulingState
    SCHEDULING_REMOVED: PlacementGroupLifecycleEvent.SchedulingState
    SCHEDULING_STARTED: PlacementGroupLifecycleEvent.SchedulingState
    NO_RESOURCES: PlacementGroupLifecycleEvent.SchedulingState
    INFEASIBLE: PlacementGroupLifecycleEvent.SchedulingState
    FAILED_TO_COMMIT_RESOURCES: PlacementGroupLifecycleEvent.SchedulingState
    FINISHED: PlacementGroupLifecycleEvent.SchedulingState
    class BundlePlacement(_message.Message):
        __slots__ = ("bundle_index", "node_id")
        BUNDLE_INDEX_FIELD_NUMBER: _ClassVar[int]
        NODE_ID_FIELD_NUMBER: _ClassVar[int]
        bundle_index: int
        node_id: bytes
        def __init__(self, bundle_index: _Optional[int] = ..., node_id: _Optional[bytes] = ...) -> None: ...
    class StateTransition(_message.Message):
        __slots__ = ("state", "timestamp", "scheduling_state", "scheduling_attempt", "highest_retry_delay_ms", "bundle_placements")
        STATE_FIELD_NUMBER: _ClassVar[int]
        TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
        SCHEDULING_STATE_FIELD_NUMBER: _ClassVar[int]
        SCHEDULING_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
        HIGHEST_RETRY_DELAY_MS_FIELD_NUMBER: _ClassVar[int]
        BUNDLE_PLACEMENTS_FIELD_NUMBER: _ClassVar[int]
        state: PlacementGroupLifecycleEvent.State
        timestamp: _timestamp_pb2.Timestamp
        scheduling_state: PlacementGroupLifecycleEvent.SchedulingState
        scheduling_attempt: int
        highest_retry_delay_ms: float
        bundle_placements: _containers.RepeatedCompositeFieldContainer[PlacementGroupLifecycleEvent.BundlePlacement]
        def __init__(self, state: _Optional[_Union[PlacementGroupLifecycleEvent.State, str]] = ..., timestamp: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., scheduling_state: _Optional[_Union[PlacementGroupLifecycleEvent.SchedulingState, str]] = ..., scheduling_attempt: _Optional[int] = ..., highest_retry_delay_ms: _Optional[float] = ..., bundle_placements: _Optional[_Iterable[_Union[PlacementGroupLifecycleEvent.BundlePlacement, _Mapping]]] = ...) -> None: ...
    PLACEMENT_GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_TRANSITIONS_FIELD_NUMBER: _ClassVar[int]
    placement_group_id: bytes
    state_transitions: _containers.RepeatedCompositeFieldContainer[PlacementGroupLifecycleEvent.StateTransition]
    def __init__(self, placement_group_id: _Optional[bytes] = ..., state_transitions: _Optional[_Iterable[_Union[PlacementGroupLifecycleEvent.StateTransition, _Mapping]]] = ...) -> None: ...
