from ray_otel_events.protobuf import common_pb2 as _common_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WorkerDefinitionEvent(_message.Message):
    __slots__ = ("worker_id", "node_id", "worker_type", "pid")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_TYPE_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    worker_id: bytes
    node_id: bytes
    worker_type: _common_pb2.WorkerType
    pid: int
    def __init__(self, worker_id: _Optional[bytes] = ..., node_id: _Optional[bytes] = ..., worker_type: _Optional[_Union[_common_pb2.WorkerType, str]] = ..., pid: _Optional[int] = ...) -> None: ...
