"""The OTLP value readers (native/_any_value_wire.c: `any_value`, `key_values`, `span_parts`) against
their Python twins (otel/plain_records: any_value_to_python, attributes_to_dict, the Python
span_parts) on what upb reads of the input: an AnyValue, a Span, or an OTLP logs request in
protobuf or OTLP/JSON (the first byte picks which). The readers are given upb's bytes; on any other
bytes they must still only answer or refuse (ValueError), never crash."""

from __future__ import annotations

import contextlib
from typing import Any

import engine
import orjson
import seeds
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from ray_otel_events.native import _any_value_wire
from ray_otel_events.otel import otlp_json, plain_records
from ray_otel_events.otel.plain_records import (
    any_value_to_python,
    attributes_of,
    attributes_to_dict,
    value_of,
)
from tests.test_compiled_helpers import _python_span_parts

assert plain_records._compiled, "the compiled readers are not bound: nothing would be compared"

ANY_VALUE, SPAN, LOGS, LOGS_JSON = range(4)


def _raw(read: Any, *args: Any) -> None:
    """Bytes upb never saw: an answer or a ValueError, nothing else."""
    with contextlib.suppress(ValueError):
        read(*args)


def _parsed(cls: type[Message], data: bytes) -> Any:
    try:
        return cls.FromString(data)
    except DecodeError:
        return None


def _logs_request(mode: int, data: bytes) -> ExportLogsServiceRequest | None:
    if mode == LOGS:
        return _parsed(ExportLogsServiceRequest, data)
    try:
        return otlp_json.logs_request_from_json(orjson.loads(data))
    except (orjson.JSONDecodeError, otlp_json.OtlpJsonError):
        return None


def _same_attributes(message: Any) -> None:
    assert engine.same(attributes_of(message), attributes_to_dict(message.attributes))


def check(data: bytes) -> None:
    if not data:
        return
    mode, body = data[0] % 4, data[1:]
    if mode == ANY_VALUE:
        _raw(_any_value_wire.any_value, body)
        value = _parsed(AnyValue, body)
        if value is not None:
            assert engine.same(value_of(value), any_value_to_python(value))
    elif mode == SPAN:
        _raw(_any_value_wire.span_parts, body)
        _raw(_any_value_wire.key_values, body, 9)
        span = _parsed(Span, body)
        if span is not None:
            assert engine.same(plain_records.span_parts(span), _python_span_parts(span))
            _same_attributes(span)
            for event in span.events:
                _same_attributes(event)
    else:
        request = _logs_request(mode, body)
        for resource_logs in request.resource_logs if request is not None else ():
            _same_attributes(resource_logs.resource)
            for scope_logs in resource_logs.scope_logs:
                for record in scope_logs.log_records:
                    assert engine.same(value_of(record.body), any_value_to_python(record.body))
                    _same_attributes(record)


def _seeds() -> list[bytes]:
    requests = seeds.logs_requests()
    out = [bytes([LOGS]) + r.SerializeToString() for r in requests]
    out += [bytes([LOGS_JSON]) + seeds.as_json(r) for r in requests[:8]]
    for request in requests:
        for record in request.resource_logs[0].scope_logs[0].log_records:
            out.append(bytes([ANY_VALUE]) + record.body.SerializeToString())
    for traces in seeds.traces_requests():
        out += [
            bytes([SPAN]) + span.SerializeToString() for span in traces.resource_spans[0].scope_spans[0].spans
        ]
    return out


if __name__ == "__main__":
    engine.main(check, _seeds)
