from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TaskType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NORMAL_TASK: _ClassVar[TaskType]
    ACTOR_CREATION_TASK: _ClassVar[TaskType]
    ACTOR_TASK: _ClassVar[TaskType]
    DRIVER_TASK: _ClassVar[TaskType]

class Language(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PYTHON: _ClassVar[Language]
    JAVA: _ClassVar[Language]
    CPP: _ClassVar[Language]

class LabelSelectorOperator(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LABEL_OPERATOR_UNSPECIFIED: _ClassVar[LabelSelectorOperator]
    LABEL_OPERATOR_IN: _ClassVar[LabelSelectorOperator]
    LABEL_OPERATOR_NOT_IN: _ClassVar[LabelSelectorOperator]

class TaskStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NIL: _ClassVar[TaskStatus]
    PENDING_ARGS_AVAIL: _ClassVar[TaskStatus]
    PENDING_NODE_ASSIGNMENT: _ClassVar[TaskStatus]
    PENDING_OBJ_STORE_MEM_AVAIL: _ClassVar[TaskStatus]
    PENDING_ARGS_FETCH: _ClassVar[TaskStatus]
    SUBMITTED_TO_WORKER: _ClassVar[TaskStatus]
    PENDING_ACTOR_TASK_ARGS_FETCH: _ClassVar[TaskStatus]
    PENDING_ACTOR_TASK_ORDERING_OR_CONCURRENCY: _ClassVar[TaskStatus]
    RUNNING: _ClassVar[TaskStatus]
    RUNNING_IN_RAY_GET: _ClassVar[TaskStatus]
    RUNNING_IN_RAY_WAIT: _ClassVar[TaskStatus]
    FINISHED: _ClassVar[TaskStatus]
    FAILED: _ClassVar[TaskStatus]
    GETTING_AND_PINNING_ARGS: _ClassVar[TaskStatus]

class ErrorType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WORKER_DIED: _ClassVar[ErrorType]
    ACTOR_DIED: _ClassVar[ErrorType]
    TASK_EXECUTION_EXCEPTION: _ClassVar[ErrorType]
    OBJECT_IN_PLASMA: _ClassVar[ErrorType]
    TASK_CANCELLED: _ClassVar[ErrorType]
    ACTOR_CREATION_FAILED: _ClassVar[ErrorType]
    RUNTIME_ENV_SETUP_FAILED: _ClassVar[ErrorType]
    OBJECT_LOST: _ClassVar[ErrorType]
    OWNER_DIED: _ClassVar[ErrorType]
    OBJECT_DELETED: _ClassVar[ErrorType]
    DEPENDENCY_RESOLUTION_FAILED: _ClassVar[ErrorType]
    OBJECT_UNRECONSTRUCTABLE_MAX_ATTEMPTS_EXCEEDED: _ClassVar[ErrorType]
    OBJECT_UNRECONSTRUCTABLE_LINEAGE_EVICTED: _ClassVar[ErrorType]
    OBJECT_FETCH_TIMED_OUT: _ClassVar[ErrorType]
    LOCAL_RAYLET_DIED: _ClassVar[ErrorType]
    TASK_PLACEMENT_GROUP_REMOVED: _ClassVar[ErrorType]
    ACTOR_PLACEMENT_GROUP_REMOVED: _ClassVar[ErrorType]
    TASK_UNSCHEDULABLE_ERROR: _ClassVar[ErrorType]
    ACTOR_UNSCHEDULABLE_ERROR: _ClassVar[ErrorType]
    OUT_OF_DISK_ERROR: _ClassVar[ErrorType]
    OBJECT_FREED: _ClassVar[ErrorType]
    OUT_OF_MEMORY: _ClassVar[ErrorType]
    NODE_DIED: _ClassVar[ErrorType]
    END_OF_STREAMING_GENERATOR: _ClassVar[ErrorType]
    ACTOR_UNAVAILABLE: _ClassVar[ErrorType]
    GENERATOR_TASK_FAILED_FOR_OBJECT_RECONSTRUCTION: _ClassVar[ErrorType]
    OBJECT_UNRECONSTRUCTABLE_PUT: _ClassVar[ErrorType]
    OBJECT_UNRECONSTRUCTABLE_RETRIES_DISABLED: _ClassVar[ErrorType]
    OBJECT_UNRECONSTRUCTABLE_BORROWED: _ClassVar[ErrorType]
    OBJECT_UNRECONSTRUCTABLE_REF_NOT_FOUND: _ClassVar[ErrorType]
    OBJECT_UNRECONSTRUCTABLE_TASK_CANCELLED: _ClassVar[ErrorType]
    OBJECT_UNRECONSTRUCTABLE_LINEAGE_DISABLED: _ClassVar[ErrorType]
    WORKER_STARTUP_FAILED: _ClassVar[ErrorType]
    STREAMING_GENERATOR_REPLAY_INCONSISTENT: _ClassVar[ErrorType]

class PlacementStrategy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PACK: _ClassVar[PlacementStrategy]
    SPREAD: _ClassVar[PlacementStrategy]
    STRICT_PACK: _ClassVar[PlacementStrategy]
    STRICT_SPREAD: _ClassVar[PlacementStrategy]

class WorkerExitType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SYSTEM_ERROR: _ClassVar[WorkerExitType]
    INTENDED_SYSTEM_EXIT: _ClassVar[WorkerExitType]
    USER_ERROR: _ClassVar[WorkerExitType]
    INTENDED_USER_EXIT: _ClassVar[WorkerExitType]
    NODE_OUT_OF_MEMORY: _ClassVar[WorkerExitType]

class WorkerType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WORKER: _ClassVar[WorkerType]
    DRIVER: _ClassVar[WorkerType]
    SPILL_WORKER: _ClassVar[WorkerType]
    RESTORE_WORKER: _ClassVar[WorkerType]
NORMAL_TASK: TaskType
ACTOR_CREATION_TASK: TaskType
ACTOR_TASK: TaskType
DRIVER_TASK: TaskType
PYTHON: Language
JAVA: Language
CPP: Language
LABEL_OPERATOR_UNSPECIFIED: LabelSelectorOperator
LABEL_OPERATOR_IN: LabelSelectorOperator
LABEL_OPERATOR_NOT_IN: LabelSelectorOperator
NIL: TaskStatus
PENDING_ARGS_AVAIL: TaskStatus
PENDING_NODE_ASSIGNMENT: TaskStatus
PENDING_OBJ_STORE_MEM_AVAIL: TaskStatus
PENDING_ARGS_FETCH: TaskStatus
SUBMITTED_TO_WORKER: TaskStatus
PENDING_ACTOR_TASK_ARGS_FETCH: TaskStatus
PENDING_ACTOR_TASK_ORDERING_OR_CONCURRENCY: TaskStatus
RUNNING: TaskStatus
RUNNING_IN_RAY_GET: TaskStatus
RUNNING_IN_RAY_WAIT: TaskStatus
FINISHED: TaskStatus
FAILED: TaskStatus
GETTING_AND_PINNING_ARGS: TaskStatus
WORKER_DIED: ErrorType
ACTOR_DIED: ErrorType
TASK_EXECUTION_EXCEPTION: ErrorType
OBJECT_IN_PLASMA: ErrorType
TASK_CANCELLED: ErrorType
ACTOR_CREATION_FAILED: ErrorType
RUNTIME_ENV_SETUP_FAILED: ErrorType
OBJECT_LOST: ErrorType
OWNER_DIED: ErrorType
OBJECT_DELETED: ErrorType
DEPENDENCY_RESOLUTION_FAILED: ErrorType
OBJECT_UNRECONSTRUCTABLE_MAX_ATTEMPTS_EXCEEDED: ErrorType
OBJECT_UNRECONSTRUCTABLE_LINEAGE_EVICTED: ErrorType
OBJECT_FETCH_TIMED_OUT: ErrorType
LOCAL_RAYLET_DIED: ErrorType
TASK_PLACEMENT_GROUP_REMOVED: ErrorType
ACTOR_PLACEMENT_GROUP_REMOVED: ErrorType
TASK_UNSCHEDULABLE_ERROR: ErrorType
ACTOR_UNSCHEDULABLE_ERROR: ErrorType
OUT_OF_DISK_ERROR: ErrorType
OBJECT_FREED: ErrorType
OUT_OF_MEMORY: ErrorType
NODE_DIED: ErrorType
END_OF_STREAMING_GENERATOR: ErrorType
ACTOR_UNAVAILABLE: ErrorType
GENERATOR_TASK_FAILED_FOR_OBJECT_RECONSTRUCTION: ErrorType
OBJECT_UNRECONSTRUCTABLE_PUT: ErrorType
OBJECT_UNRECONSTRUCTABLE_RETRIES_DISABLED: ErrorType
OBJECT_UNRECONSTRUCTABLE_BORROWED: ErrorType
OBJECT_UNRECONSTRUCTABLE_REF_NOT_FOUND: ErrorType
OBJECT_UNRECONSTRUCTABLE_TASK_CANCELLED: ErrorType
OBJECT_UNRECONSTRUCTABLE_LINEAGE_DISABLED: ErrorType
WORKER_STARTUP_FAILED: ErrorType
STREAMING_GENERATOR_REPLAY_INCONSISTENT: ErrorType
PACK: PlacementStrategy
SPREAD: PlacementStrategy
STRICT_PACK: PlacementStrategy
STRICT_SPREAD: PlacementStrategy
SYSTEM_ERROR: WorkerExitType
INTENDED_SYSTEM_EXIT: WorkerExitType
USER_ERROR: WorkerExitType
INTENDED_USER_EXIT: WorkerExitType
NODE_OUT_OF_MEMORY: WorkerExitType
WORKER: WorkerType
DRIVER: WorkerType
SPILL_WORKER: WorkerType
RESTORE_WORKER: WorkerType

class FunctionDescriptor(_message.Message):
    __slots__ = ("java_function_descriptor", "python_function_descriptor", "cpp_function_descriptor")
    JAVA_FUNCTION_DESCRIPTOR_FIELD_NUMBER: _ClassVar[int]
    PYTHON_FUNCTION_DESCRIPTOR_FIELD_NUMBER: _ClassVar[int]
    CPP_FUNCTION_DESCRIPTOR_FIELD_NUMBER: _ClassVar[int]
    java_function_descriptor: JavaFunctionDescriptor
    python_function_descriptor: PythonFunctionDescriptor
    cpp_function_descriptor: CppFunctionDescriptor
    def __init__(self, java_function_descriptor: _Optional[_Union[JavaFunctionDescriptor, _Mapping]] = ..., python_function_descriptor: _Optional[_Union[PythonFunctionDescriptor, _Mapping]] = ..., cpp_function_descriptor: _Optional[_Union[CppFunctionDescriptor, _Mapping]] = ...) -> None: ...

class JavaFunctionDescriptor(_message.Message):
    __slots__ = ("class_name", "function_name", "signature")
    CLASS_NAME_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_NAME_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    class_name: str
    function_name: str
    signature: str
    def __init__(self, class_name: _Optional[str] = ..., function_name: _Optional[str] = ..., signature: _Optional[str] = ...) -> None: ...

class PythonFunctionDescriptor(_message.Message):
    __slots__ = ("module_name", "class_name", "function_name", "function_hash")
    MODULE_NAME_FIELD_NUMBER: _ClassVar[int]
    CLASS_NAME_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_NAME_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_HASH_FIELD_NUMBER: _ClassVar[int]
    module_name: str
    class_name: str
    function_name: str
    function_hash: str
    def __init__(self, module_name: _Optional[str] = ..., class_name: _Optional[str] = ..., function_name: _Optional[str] = ..., function_hash: _Optional[str] = ...) -> None: ...

class CppFunctionDescriptor(_message.Message):
    __slots__ = ("function_name", "caller", "class_name")
    FUNCTION_NAME_FIELD_NUMBER: _ClassVar[int]
    CALLER_FIELD_NUMBER: _ClassVar[int]
    CLASS_NAME_FIELD_NUMBER: _ClassVar[int]
    function_name: str
    caller: str
    class_name: str
    def __init__(self, function_name: _Optional[str] = ..., caller: _Optional[str] = ..., class_name: _Optional[str] = ...) -> None: ...

class FallbackStrategy(_message.Message):
    __slots__ = ("options",)
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    options: _containers.RepeatedCompositeFieldContainer[FallbackOption]
    def __init__(self, options: _Optional[_Iterable[_Union[FallbackOption, _Mapping]]] = ...) -> None: ...

class FallbackOption(_message.Message):
    __slots__ = ("label_selector",)
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    label_selector: LabelSelector
    def __init__(self, label_selector: _Optional[_Union[LabelSelector, _Mapping]] = ...) -> None: ...

class LabelSelector(_message.Message):
    __slots__ = ("label_constraints",)
    LABEL_CONSTRAINTS_FIELD_NUMBER: _ClassVar[int]
    label_constraints: _containers.RepeatedCompositeFieldContainer[LabelSelectorConstraint]
    def __init__(self, label_constraints: _Optional[_Iterable[_Union[LabelSelectorConstraint, _Mapping]]] = ...) -> None: ...

class LabelSelectorConstraint(_message.Message):
    __slots__ = ("label_key", "operator", "label_values")
    LABEL_KEY_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    LABEL_VALUES_FIELD_NUMBER: _ClassVar[int]
    label_key: str
    operator: LabelSelectorOperator
    label_values: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, label_key: _Optional[str] = ..., operator: _Optional[_Union[LabelSelectorOperator, str]] = ..., label_values: _Optional[_Iterable[str]] = ...) -> None: ...

class RayErrorInfo(_message.Message):
    __slots__ = ("actor_died_error", "runtime_env_setup_failed_error", "actor_unavailable_error", "error_message", "error_type")
    ACTOR_DIED_ERROR_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_ENV_SETUP_FAILED_ERROR_FIELD_NUMBER: _ClassVar[int]
    ACTOR_UNAVAILABLE_ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ERROR_TYPE_FIELD_NUMBER: _ClassVar[int]
    actor_died_error: ActorDeathCause
    runtime_env_setup_failed_error: RuntimeEnvFailedContext
    actor_unavailable_error: ActorUnavailableContext
    error_message: str
    error_type: ErrorType
    def __init__(self, actor_died_error: _Optional[_Union[ActorDeathCause, _Mapping]] = ..., runtime_env_setup_failed_error: _Optional[_Union[RuntimeEnvFailedContext, _Mapping]] = ..., actor_unavailable_error: _Optional[_Union[ActorUnavailableContext, _Mapping]] = ..., error_message: _Optional[str] = ..., error_type: _Optional[_Union[ErrorType, str]] = ...) -> None: ...

class ActorDeathCause(_message.Message):
    __slots__ = ("creation_task_failure_context", "runtime_env_failed_context", "actor_died_error_context", "actor_unschedulable_context", "oom_context")
    CREATION_TASK_FAILURE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_ENV_FAILED_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    ACTOR_DIED_ERROR_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    ACTOR_UNSCHEDULABLE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    OOM_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    creation_task_failure_context: RayException
    runtime_env_failed_context: RuntimeEnvFailedContext
    actor_died_error_context: ActorDiedErrorContext
    actor_unschedulable_context: ActorUnschedulableContext
    oom_context: OomContext
    def __init__(self, creation_task_failure_context: _Optional[_Union[RayException, _Mapping]] = ..., runtime_env_failed_context: _Optional[_Union[RuntimeEnvFailedContext, _Mapping]] = ..., actor_died_error_context: _Optional[_Union[ActorDiedErrorContext, _Mapping]] = ..., actor_unschedulable_context: _Optional[_Union[ActorUnschedulableContext, _Mapping]] = ..., oom_context: _Optional[_Union[OomContext, _Mapping]] = ...) -> None: ...

class RayException(_message.Message):
    __slots__ = ("language", "serialized_exception", "formatted_exception_string")
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    SERIALIZED_EXCEPTION_FIELD_NUMBER: _ClassVar[int]
    FORMATTED_EXCEPTION_STRING_FIELD_NUMBER: _ClassVar[int]
    language: Language
    serialized_exception: bytes
    formatted_exception_string: str
    def __init__(self, language: _Optional[_Union[Language, str]] = ..., serialized_exception: _Optional[bytes] = ..., formatted_exception_string: _Optional[str] = ...) -> None: ...

class RuntimeEnvFailedContext(_message.Message):
    __slots__ = ("error_message",)
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    error_message: str
    def __init__(self, error_message: _Optional[str] = ...) -> None: ...

class ActorDiedErrorContext(_message.Message):
    __slots__ = ("error_message", "owner_id", "owner_ip_address", "node_ip_address", "pid", "name", "ray_namespace", "class_name", "actor_id", "never_started", "node_death_info", "reason")
    class Reason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UNSPECIFIED: _ClassVar[ActorDiedErrorContext.Reason]
        WORKER_DIED: _ClassVar[ActorDiedErrorContext.Reason]
        OWNER_DIED: _ClassVar[ActorDiedErrorContext.Reason]
        NODE_DIED: _ClassVar[ActorDiedErrorContext.Reason]
        RAY_KILL: _ClassVar[ActorDiedErrorContext.Reason]
        OUT_OF_SCOPE: _ClassVar[ActorDiedErrorContext.Reason]
        REF_DELETED: _ClassVar[ActorDiedErrorContext.Reason]
    UNSPECIFIED: ActorDiedErrorContext.Reason
    WORKER_DIED: ActorDiedErrorContext.Reason
    OWNER_DIED: ActorDiedErrorContext.Reason
    NODE_DIED: ActorDiedErrorContext.Reason
    RAY_KILL: ActorDiedErrorContext.Reason
    OUT_OF_SCOPE: ActorDiedErrorContext.Reason
    REF_DELETED: ActorDiedErrorContext.Reason
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    OWNER_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_IP_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    NODE_IP_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    RAY_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    CLASS_NAME_FIELD_NUMBER: _ClassVar[int]
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    NEVER_STARTED_FIELD_NUMBER: _ClassVar[int]
    NODE_DEATH_INFO_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    error_message: str
    owner_id: bytes
    owner_ip_address: str
    node_ip_address: str
    pid: int
    name: str
    ray_namespace: str
    class_name: str
    actor_id: bytes
    never_started: bool
    node_death_info: NodeDeathInfo
    reason: ActorDiedErrorContext.Reason
    def __init__(self, error_message: _Optional[str] = ..., owner_id: _Optional[bytes] = ..., owner_ip_address: _Optional[str] = ..., node_ip_address: _Optional[str] = ..., pid: _Optional[int] = ..., name: _Optional[str] = ..., ray_namespace: _Optional[str] = ..., class_name: _Optional[str] = ..., actor_id: _Optional[bytes] = ..., never_started: _Optional[bool] = ..., node_death_info: _Optional[_Union[NodeDeathInfo, _Mapping]] = ..., reason: _Optional[_Union[ActorDiedErrorContext.Reason, str]] = ...) -> None: ...

class NodeDeathInfo(_message.Message):
    __slots__ = ("reason", "reason_message")
    class Reason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UNSPECIFIED: _ClassVar[NodeDeathInfo.Reason]
        EXPECTED_TERMINATION: _ClassVar[NodeDeathInfo.Reason]
        UNEXPECTED_TERMINATION: _ClassVar[NodeDeathInfo.Reason]
        AUTOSCALER_DRAIN_PREEMPTED: _ClassVar[NodeDeathInfo.Reason]
        AUTOSCALER_DRAIN_IDLE: _ClassVar[NodeDeathInfo.Reason]
    UNSPECIFIED: NodeDeathInfo.Reason
    EXPECTED_TERMINATION: NodeDeathInfo.Reason
    UNEXPECTED_TERMINATION: NodeDeathInfo.Reason
    AUTOSCALER_DRAIN_PREEMPTED: NodeDeathInfo.Reason
    AUTOSCALER_DRAIN_IDLE: NodeDeathInfo.Reason
    REASON_FIELD_NUMBER: _ClassVar[int]
    REASON_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    reason: NodeDeathInfo.Reason
    reason_message: str
    def __init__(self, reason: _Optional[_Union[NodeDeathInfo.Reason, str]] = ..., reason_message: _Optional[str] = ...) -> None: ...

class ActorUnschedulableContext(_message.Message):
    __slots__ = ("error_message",)
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    error_message: str
    def __init__(self, error_message: _Optional[str] = ...) -> None: ...

class OomContext(_message.Message):
    __slots__ = ("error_message", "fail_immediately")
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FAIL_IMMEDIATELY_FIELD_NUMBER: _ClassVar[int]
    error_message: str
    fail_immediately: bool
    def __init__(self, error_message: _Optional[str] = ..., fail_immediately: _Optional[bool] = ...) -> None: ...

class ActorUnavailableContext(_message.Message):
    __slots__ = ("actor_id",)
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    actor_id: bytes
    def __init__(self, actor_id: _Optional[bytes] = ...) -> None: ...

class TaskAttempt(_message.Message):
    __slots__ = ("task_id", "attempt_number")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_NUMBER_FIELD_NUMBER: _ClassVar[int]
    task_id: bytes
    attempt_number: int
    def __init__(self, task_id: _Optional[bytes] = ..., attempt_number: _Optional[int] = ...) -> None: ...
