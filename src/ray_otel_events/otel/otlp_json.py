"""Spec OTLP/JSON <-> OTLP protobuf messages, for traces and logs requests.

OTLP/JSON is not proto3 JSON: trace and span ids are hex (not base64), enums are integers, int64s
are strings, keys are lowerCamelCase. `google.protobuf.json_format` gets the ids wrong both ways
(it writes base64, and `Parse` silently base64-decodes hex into ids of the wrong length), so this
module walks the message descriptors itself.

Reading is as lenient as the spec allows and strict where data would otherwise be corrupted:
unknown keys are ignored (forward compatibility), int64s may be strings or numbers, enum names are
accepted besides integers, proto field names besides camelCase (the Collector reads both); ids that
are not hex of the exact length are an error naming the path, e.g.
`resourceSpans[0].scopeSpans[0].spans[2].traceId: expected 32 hex characters ...`.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Callable
from typing import Any, TypeVar

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from ray_otel_events.encoding.proto_scalars import INT_RANGES

__all__ = [
    "OtlpJsonError",
    "from_json",
    "logs_request_from_json",
    "to_json",
    "traces_request_from_json",
]

# bytes fields that OTLP/JSON writes as hex, with their only valid non-empty lengths.
_ID_LENGTHS = {"trace_id": 16, "span_id": 8, "parent_span_id": 8}

_INT64_TYPES = frozenset(
    {
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_SFIXED64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_FIXED64,
    }
)
_FLOAT_TYPES = frozenset({FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT})
_SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class OtlpJsonError(ValueError):
    """A request body that is not valid OTLP/JSON; the message names the JSON path and the problem."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}" if path else problem)
        self.path = path
        self.problem = problem


# -- reading ------------------------------------------------------------------------------------

_field_tables: dict[str, dict[str, FieldDescriptor]] = {}
_INT_VALUE_FIELD = AnyValue.DESCRIPTOR.fields_by_name["int_value"]


def _fields(descriptor: Any) -> dict[str, FieldDescriptor]:
    """JSON key -> field, for both the camelCase json name and the proto name."""
    table = _field_tables.get(descriptor.full_name)
    if table is None:
        table = {}
        for field in descriptor.fields:
            table[field.name] = field
            table[field.json_name] = field
        _field_tables[descriptor.full_name] = table
    return table


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _read_id(field: FieldDescriptor, value: Any, path: str) -> bytes:
    size = _ID_LENGTHS[field.name]
    if not isinstance(value, str):
        raise OtlpJsonError(path, f"expected a hex string, got {_json_type(value)}")
    if value == "":
        return b""
    if len(value) != 2 * size:
        hint = " (base64? OTLP/JSON ids are hex)" if len(value) in (24, 12) else ""
        raise OtlpJsonError(
            path, f"expected {2 * size} hex characters, got {len(value)}: {_describe(value)}{hint}"
        )
    try:
        return bytes.fromhex(value)
    except ValueError:
        raise OtlpJsonError(
            path, f"expected {2 * size} hex characters, got {_describe(value)} (OTLP/JSON ids are hex)"
        ) from None


def _read_int(field: FieldDescriptor, value: Any, path: str) -> int:
    if isinstance(value, bool):
        raise OtlpJsonError(path, "expected an integer, got a boolean")
    if isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str):
        try:
            number = int(value.strip())
        except ValueError:
            raise OtlpJsonError(path, f"expected an integer, got {_describe(value)}") from None
    else:
        raise OtlpJsonError(path, f"expected an integer, got {_json_type(value)}")
    low, high = INT_RANGES[field.type]
    if not low <= number <= high:
        raise OtlpJsonError(path, f"integer {number} out of range [{low}, {high}]")
    return number


def _read_scalar(field: Any, value: Any, path: str) -> Any:
    kind = field.type
    if kind == FieldDescriptor.TYPE_STRING:
        if not isinstance(value, str):
            raise OtlpJsonError(path, f"expected a string, got {_json_type(value)}")
        return value
    if kind in INT_RANGES:
        return _read_int(field, value, path)
    if kind == FieldDescriptor.TYPE_BYTES:
        if field.name in _ID_LENGTHS:
            return _read_id(field, value, path)
        if not isinstance(value, str):
            raise OtlpJsonError(path, f"expected a base64 string, got {_json_type(value)}")
        try:
            padded = value + "=" * (-len(value) % 4)
            return base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
        except (binascii.Error, ValueError):
            raise OtlpJsonError(path, f"expected base64, got {_describe(value)}") from None
    if kind == FieldDescriptor.TYPE_BOOL:
        if not isinstance(value, bool):
            raise OtlpJsonError(path, f"expected true or false, got {_json_type(value)}")
        return value
    if kind in _FLOAT_TYPES:
        if isinstance(value, bool):
            raise OtlpJsonError(path, "expected a number, got a boolean")
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            if value in _SPECIAL_FLOATS:
                return _SPECIAL_FLOATS[value]
            try:
                return float(value)
            except ValueError:
                pass
        raise OtlpJsonError(path, f"expected a number, got {_describe(value)}")
    if kind == FieldDescriptor.TYPE_ENUM:
        if isinstance(value, str) and not value.lstrip("-").isdigit():
            named = field.enum_type.values_by_name.get(value)
            if named is None:
                raise OtlpJsonError(path, f"unknown {field.enum_type.name} value {_describe(value)}")
            return named.number
        # Unknown numbers are kept, as proto3 open enums are.
        return _read_int_enum(value, path)
    raise OtlpJsonError(path, f"unsupported field type {kind}")


def _read_int_enum(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise OtlpJsonError(path, f"expected an integer enum value, got {_json_type(value)}")
    try:
        number = int(value)
    except ValueError:
        raise OtlpJsonError(path, f"expected an integer enum value, got {_describe(value)}") from None
    if not -(2**31) <= number <= 2**31 - 1:
        raise OtlpJsonError(path, f"enum value {number} out of range")
    return number


# How deep messages may nest, counted from the request: protobuf's limit (upb's), so that a JSON body
# is refused where the same request as protobuf would be.
MAX_DEPTH = 100


def _check_depth(depth: int, path: str) -> None:
    if depth > MAX_DEPTH:
        raise OtlpJsonError(path, f"messages nested deeper than {MAX_DEPTH}, the limit protobuf has")


def _fill(message: Any, obj: Any, path: str, depth: int = 0) -> None:
    if not isinstance(obj, dict):
        raise OtlpJsonError(path, f"expected an object, got {_json_type(obj)}")
    _check_depth(depth, path)
    table = _fields(message.DESCRIPTOR)
    for key, value in obj.items():
        field: Any = table.get(key)
        if field is None or value is None:
            continue  # unknown keys are ignored (spec); null means "not set" (proto3 JSON)
        where = f"{path}.{key}" if path else key
        if field.is_repeated:
            if not isinstance(value, list):
                raise OtlpJsonError(where, f"expected an array, got {_json_type(value)}")
            container = getattr(message, field.name)
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                fill = _SPECIAL_FILL.get(field.message_type.full_name, _fill)
                for index, item in enumerate(value):
                    fill(container.add(), item, f"{where}[{index}]", depth + 1)
            else:
                container.extend(
                    _read_scalar(field, item, f"{where}[{index}]") for index, item in enumerate(value)
                )
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            child = getattr(message, field.name)
            _SPECIAL_FILL.get(field.message_type.full_name, _fill)(child, value, where, depth + 1)
            child.SetInParent()  # an empty object still selects a oneof member (e.g. kvlistValue: {})
        else:
            setattr(message, field.name, _read_scalar(field, value, where))


# Attributes dominate OTLP payloads: KeyValue and AnyValue get hand-written readers and writers.
_ANY_STRING = {"stringValue": "string_value", "string_value": "string_value"}
_ANY_BOOL = {"boolValue", "bool_value"}
_ANY_INT = {"intValue", "int_value"}
_ANY_DOUBLE = {"doubleValue", "double_value"}
_ANY_ARRAY = {"arrayValue", "array_value"}
_ANY_KVLIST = {"kvlistValue", "kvlist_value"}


def _fill_key_value(message: Any, obj: Any, path: str, depth: int) -> None:
    _check_depth(depth, path)
    if type(obj) is dict and len(obj) == 2 and type(obj.get("key")) is str:
        message.key = obj["key"]
        value = obj.get("value")
        if value is not None:
            _fill_any_value(message.value, value, path + ".value", depth + 1)
            message.value.SetInParent()
        return
    _fill(message, obj, path, depth)


def _fill_any_value(message: Any, obj: Any, path: str, depth: int) -> None:
    _check_depth(depth, path)
    if type(obj) is dict and len(obj) == 1:
        ((key, value),) = obj.items()
        if key in _ANY_STRING and type(value) is str:
            message.string_value = value
            return
        if key in _ANY_BOOL and type(value) is bool:
            message.bool_value = value
            return
        if key in _ANY_INT and type(value) in (str, int):
            message.int_value = _read_int(_INT_VALUE_FIELD, value, path + "." + key)
            return
        if key in _ANY_DOUBLE and type(value) in (float, int):
            message.double_value = float(value)
            return
        if key in _ANY_ARRAY and type(value) is dict:
            _fill_values(message.array_value, value, path + "." + key, depth + 1)
            return
        if key in _ANY_KVLIST and type(value) is dict:
            _fill_values(message.kvlist_value, value, path + "." + key, depth + 1)
            return
    _fill(message, obj, path, depth)


def _fill_values(message: Any, obj: dict[str, Any], path: str, depth: int) -> None:
    """ArrayValue / KeyValueList: `values` holds AnyValues or KeyValues."""
    message.SetInParent()
    _fill(message, obj, path, depth)


_SPECIAL_FILL: dict[str, Callable[[Any, Any, str, int], None]] = {
    "opentelemetry.proto.common.v1.KeyValue": _fill_key_value,
    "opentelemetry.proto.common.v1.AnyValue": _fill_any_value,
}


MessageT = TypeVar("MessageT", bound=Message)


def from_json(obj: Any, message_type: type[MessageT]) -> MessageT:
    """Build `message_type` from an already-parsed OTLP/JSON value; raises OtlpJsonError."""
    message = message_type()
    _fill(message, obj, "")
    return message


def traces_request_from_json(obj: Any) -> ExportTraceServiceRequest:
    return from_json(obj, ExportTraceServiceRequest)


def logs_request_from_json(obj: Any) -> ExportLogsServiceRequest:
    return from_json(obj, ExportLogsServiceRequest)


# -- writing ------------------------------------------------------------------------------------

_Writer = Callable[[Any], Any]


def _value_writer(field: Any) -> _Writer:
    kind = field.type
    if kind == FieldDescriptor.TYPE_MESSAGE:
        return _SPECIAL_WRITE.get(field.message_type.full_name, to_json)
    if kind == FieldDescriptor.TYPE_BYTES:
        if field.name in _ID_LENGTHS:
            return bytes.hex
        return lambda value: base64.b64encode(value).decode("ascii")
    if kind in _INT64_TYPES:
        return str
    if kind in _FLOAT_TYPES:
        return _write_float
    return _identity  # strings, bools, 32-bit ints and enums (already integers)


def _identity(value: Any) -> Any:
    return value


def _write_float(value: float) -> float | str:
    if math.isfinite(value):
        return value
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def _field_writers(descriptor: Any) -> dict[int, tuple[str, _Writer, bool]]:
    return {
        field.number: (field.json_name, _value_writer(field), field.is_repeated)
        for field in descriptor.fields
    }


_writer_tables: dict[str, dict[int, tuple[str, _Writer, bool]]] = {}


def to_json(message: Any) -> dict[str, Any]:
    """The spec OTLP/JSON value of a message: only set fields, hex ids, integer enums, int64 strings."""
    full_name = message.DESCRIPTOR.full_name
    table = _writer_tables.get(full_name)
    if table is None:
        table = _writer_tables[full_name] = _field_writers(message.DESCRIPTOR)
    out: dict[str, Any] = {}
    for field, value in message.ListFields():
        name, write, repeated = table[field.number]
        out[name] = [write(item) for item in value] if repeated else write(value)
    return out


def _key_value_json(kv: Any) -> dict[str, Any]:
    return {"key": kv.key, "value": _any_value_json(kv.value)}


def _any_value_json(value: Any) -> dict[str, Any]:
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return {"stringValue": value.string_value}
    if kind == "int_value":
        return {"intValue": str(value.int_value)}
    if kind == "bool_value":
        return {"boolValue": value.bool_value}
    if kind == "double_value":
        return {"doubleValue": _write_float(value.double_value)}
    if kind == "array_value":
        return {"arrayValue": {"values": [_any_value_json(v) for v in value.array_value.values]}}
    if kind == "kvlist_value":
        return {"kvlistValue": {"values": [_key_value_json(kv) for kv in value.kvlist_value.values]}}
    return to_json(value)  # bytes, string-table indices (profiles) or empty


_SPECIAL_WRITE: dict[str, _Writer] = {
    "opentelemetry.proto.common.v1.KeyValue": _key_value_json,
    "opentelemetry.proto.common.v1.AnyValue": _any_value_json,
}
