from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DriverJobDefinitionEvent(_message.Message):
    __slots__ = ("job_id", "driver_pid", "driver_node_id", "entrypoint", "config")
    class Config(_message.Message):
        __slots__ = ("serialized_runtime_env", "metadata")
        class MetadataEntry(_message.Message):
            __slots__ = ("key", "value")
            KEY_FIELD_NUMBER: _ClassVar[int]
            VALUE_FIELD_NUMBER: _ClassVar[int]
            key: str
            value: str
            def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
        SERIALIZED_RUNTIME_ENV_FIELD_NUMBER: _ClassVar[int]
        METADATA_FIELD_NUMBER: _ClassVar[int]
        serialized_runtime_env: str
        metadata: _containers.ScalarMap[str, str]
        def __init__(self, serialized_runtime_env: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    DRIVER_PID_FIELD_NUMBER: _ClassVar[int]
    DRIVER_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRYPOINT_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    job_id: bytes
    driver_pid: int
    driver_node_id: bytes
    entrypoint: str
    config: DriverJobDefinitionEvent.Config
    def __init__(self, job_id: _Optional[bytes] = ..., driver_pid: _Optional[int] = ..., driver_node_id: _Optional[bytes] = ..., entrypoint: _Optional[str] = ..., config: _Optional[_Union[DriverJobDefinitionEvent.Config, _Mapping]] = ...) -> None: ...
