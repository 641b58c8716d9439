import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DriverJobLifecycleEvent(_message.Message):
    __slots__ = ("job_id", "state_transitions")
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UNSPECIFIED: _ClassVar[DriverJobLifecycleEvent.State]
        CREATED: _ClassVar[DriverJobLifecycleEvent.State]
        FINISHED: _ClassVar[DriverJobLifecycleEvent.State]
    UNSPECIFIED: DriverJobLifecycleEvent.State
    CREATED: DriverJobLifecycleEvent.State
    FINISHED: DriverJobLifecycleEvent.State
    class StateTransition(_message.Message):
        __slots__ = ("state", "timestamp")
        STATE_FIELD_NUMBER: _ClassVar[int]
        TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
        state: DriverJobLifecycleEvent.State
        timestamp: _timestamp_pb2.Timestamp
        def __init__(self, state: _Optional[_Union[DriverJobLifecycleEvent.State, str]] = ..., timestamp: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_TRANSITIONS_FIELD_NUMBER: _ClassVar[int]
    job_id: bytes
    state_transitions: _containers.RepeatedCompositeFieldContainer[DriverJobLifecycleEvent.StateTransition]
    def __init__(self, job_id: _Optional[bytes] = ..., state_transitions: _Optional[_Iterable[_Union[DriverJobLifecycleEvent.StateTransition, _Mapping]]] = ...) -> None: ...
