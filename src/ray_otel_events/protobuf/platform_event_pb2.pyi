from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PlatformEvent(_message.Message):
    __slots__ = ("source", "object_kind", "object_name", "message", "reason", "custom_fields")
    class CustomFieldsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    OBJECT_KIND_FIELD_NUMBER: _ClassVar[int]
    OBJECT_NAME_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CUSTOM_FIELDS_FIELD_NUMBER: _ClassVar[int]
    source: Source
    object_kind: str
    object_name: str
    message: str
    reason: str
    custom_fields: _containers.ScalarMap[str, str]
    def __init__(self, source: _Optional[_Union[Source, _Mapping]] = ..., object_kind: _Optional[str] = ..., object_name: _Optional[str] = ..., message: _Optional[str] = ..., reason: _Optional[str] = ..., custom_fields: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Source(_message.Message):
    __slots__ = ("platform", "component", "metadata")
    class Platform(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        PLATFORM_UNSPECIFIED: _ClassVar[Source.Platform]
        KUBERNETES: _ClassVar[Source.Platform]
    PLATFORM_UNSPECIFIED: Source.Platform
    KUBERNETES: Source.Platform
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PLATFORM_FIELD_NUMBER: _ClassVar[int]
    COMPONENT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    platform: Source.Platform
    component: str
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, platform: _Optional[_Union[Source.Platform, str]] = ..., component: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...
