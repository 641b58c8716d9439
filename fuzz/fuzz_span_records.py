"""The span record writer (native/_span_records.c `records`: a ScopeSpans' spans as plain JSON
records, from their wire bytes) against its Python twin (otel/plain_records: the Python span_parts,
span_record, orjson), on every ScopeSpans of an OTLP traces request in protobuf or OTLP/JSON (the
first byte picks which): each span's record the same bytes, or left to Python (None). On bytes upb
never saw the writer must still only answer or refuse (ValueError), never crash."""

from __future__ import annotations

import contextlib

import engine
import orjson
import seeds
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from ray_otel_events.native import _span_records
from ray_otel_events.otel import otlp_json, plain_records
from ray_otel_events.otel.plain_records import RecordContext, span_record, span_records_json
from tests.test_compiled_helpers import _python_span_parts

assert plain_records._records_compiled, "the compiled writer is not bound: nothing would be compared"

PROTOBUF, JSON = 0, 1


def _request(mode: int, data: bytes) -> ExportTraceServiceRequest | None:
    if mode == PROTOBUF:
        try:
            return ExportTraceServiceRequest.FromString(data)
        except DecodeError:
            return None
    try:
        return otlp_json.traces_request_from_json(orjson.loads(data))
    except (orjson.JSONDecodeError, otlp_json.OtlpJsonError):
        return None


def check(data: bytes) -> None:
    if not data:
        return
    mode, body = data[0] % 2, data[1:]
    with contextlib.suppress(ValueError):
        _span_records.records(body, b"}")
    request = _request(mode, body)
    for resource_spans in request.resource_spans if request is not None else ():
        for scope_spans in resource_spans.scope_spans:
            context = RecordContext(resource_spans.resource, scope_spans.scope)
            written = span_records_json(scope_spans, context)
            assert len(written) == len(scope_spans.spans)
            for span, line in zip(scope_spans.spans, written, strict=True):
                parts = _python_span_parts(span)
                assert engine.same(plain_records.span_parts(span), parts)
                if line is not None:
                    assert line == orjson.dumps(span_record(parts, context))


def _seeds() -> list[bytes]:
    requests = seeds.traces_requests()
    return [bytes([PROTOBUF]) + r.SerializeToString() for r in requests] + [
        bytes([JSON]) + seeds.as_json(r) for r in requests
    ]


if __name__ == "__main__":
    engine.main(check, _seeds)
