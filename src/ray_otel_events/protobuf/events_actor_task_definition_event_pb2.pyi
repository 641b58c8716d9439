from ray_otel_events.protobuf import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ActorTaskDefinitionEvent(_message.Message):
    __slots__ = ("task_id", "task_attempt", "language", "actor_func", "actor_task_name", "required_resources", "job_id", "actor_id", "parent_task_id", "placement_group_id", "ref_ids", "serialized_runtime_env", "call_site", "label_selector", "fallback_strategy", "is_detached_actor")
    class RequiredResourcesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class RefIdsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    class LabelSelectorEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FUNC_FIELD_NUMBER: _ClassVar[int]
    ACTOR_TASK_NAME_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_RESOURCES_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_TASK_ID_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    REF_IDS_FIELD_NUMBER: _ClassVar[int]
    SERIALIZED_RUNTIME_ENV_FIELD_NUMBER: _ClassVar[int]
    CALL_SITE_FIELD_NUMBER: _ClassVar[int]
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    IS_DETACHED_ACTOR_FIELD_NUMBER: _ClassVar[int]
    task_id: bytes
    task_attempt: int
    language: _common_pb2.Language
    actor_func: _common_pb2.FunctionDescriptor
    actor_task_name: str
    required_resources: _containers.ScalarMap[str, float]
    job_id: bytes
    actor_id: bytes
    parent_task_id: bytes
    placement_group_id: bytes
    ref_ids: _containers.ScalarMap[str, bytes]
    serialized_runtime_env: str
    call_site: str
    label_selector: _containers.ScalarMap[str, str]
    fallback_strategy: _common_pb2.FallbackStrategy
    is_detached_actor: bool
    def __init__(self, task_id: _Optional[bytes] = ..., task_attempt: _Optional[int] = ..., language: _Optional[_Union[_common_pb2.Language, str]] = ..., actor_func: _Optional[_Union[_common_pb2.FunctionDescriptor, _Mapping]] = ..., actor_task_name: _Optional[str] = ..., required_resources: _Optional[_Mapping[str, float]] = ..., job_id: _Optional[bytes] = ..., actor_id: _Optional[bytes] = ..., parent_task_id: _Optional[bytes] = ..., placement_group_id: _Optional[bytes] = ..., ref_ids: _Optional[_Mapping[str, bytes]] = ..., serialized_runtime_env: _Optional[str] = ..., call_site: _Optional[str] = ..., label_selector: _Optional[_Mapping[str, str]] = ..., fallback_strategy: _Optional[_Union[_common_pb2.FallbackStrategy, _Mapping]] = ..., is_detached_actor: _Optional[bool] = ...) -> None: ...
