"""Bad input gets the right status and a reason, the server keeps serving, accepted data is not lost.

One bridge process takes the whole matrix (a small body limit so "huge" stays cheap); a final good
request proves it still serves. Separate bridges check queue-full backpressure (503 + Retry-After)
and that SIGTERM delivers everything accepted.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import requests
from google.rpc import status_pb2  # type: ignore[import-untyped]
from helpers.agg_procs import CliServer, read_jsonl
from helpers.bridge_procs import ServerGroup, otlp_spans, url, wait_until
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from ray_otel_events.encoding.ray_json import RayEventJsonEncoder
from ray_otel_events.events import ids
from ray_otel_events.events.builders import EventFactory, TaskStatus, python_function
from ray_otel_events.otel import otlp_json
from ray_otel_events.otel.log_records import to_log_record
from ray_otel_events.otel.plain_records import key_values, python_to_any_value
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent

LIMIT = 1024 * 1024
PROTOBUF = {"Content-Type": "application/x-protobuf"}
JSON = {"Content-Type": "application/json"}


def _span_request(
    n: int = 3, trace_id: bytes = b"\x01" * 16, span_id: bytes = b"\x02" * 8
) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    for i in range(n):
        span = scope.spans.add(trace_id=trace_id, span_id=span_id[:-1] + bytes([i + 1]), name=f"s{i}")
        span.start_time_unix_nano = 1_000 + i
        span.end_time_unix_nano = 2_000 + i
    return request


def _ray_log_request(n: int, session: str = "s") -> ExportLogsServiceRequest:
    factory = EventFactory(session_name=session)
    job = ids.job_id(1)
    request = ExportLogsServiceRequest()
    scope = request.resource_logs.add().scope_logs.add()
    for _ in range(n):
        event = factory.task_lifecycle(task_id=ids.new_task_id(job), job_id=job, state=TaskStatus.RUNNING)
        event.event_id = ids.new_unique_id()
        fields = to_log_record(event)
        record = scope.log_records.add(time_unix_nano=fields.timestamp_ns, event_name=fields.event_name)
        python_to_any_value(fields.body, record.body)
        record.attributes.extend(key_values(fields.attributes))
    return request


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[CliServer, Path, Path]]:
    with ServerGroup(tmp_path_factory.mktemp("bad")) as group:
        sink, events_path = group.sink("events")
        records_sink, records_path = group.sink("records")
        bridge = group.bridge(
            "--export-addr",
            url(sink),
            "--spans-export-addr",
            url(records_sink),
            "--otlp-endpoint",
            url(sink),
            "--max-body-bytes",
            str(LIMIT),
        )
        yield bridge, events_path, records_path


def _post(bridge: CliServer, path: str, body: Any, headers: dict[str, str]) -> requests.Response:
    return requests.post(url(bridge, path), data=body, headers=headers, timeout=60)


def _status_message(response: requests.Response) -> str:
    if response.headers.get("Content-Type", "").startswith("application/x-protobuf"):
        return str(status_pb2.Status.FromString(response.content).message)
    body = response.json()
    return str(body.get("message") or body.get("error"))


def _bomb(inflated_bytes: int) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = b"\0" * (1 << 20)
    parts = [compressor.compress(chunk) for _ in range(inflated_bytes >> 20)]
    return b"".join([*parts, compressor.flush()])


def _peak_rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


GOOD = _span_request().SerializeToString()
VALID_JSON = otlp_json.to_json(_span_request())


def _with_base64_ids() -> bytes:
    value = orjson.loads(orjson.dumps(VALID_JSON))
    value["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] = "AQEBAQEBAQEBAQEBAQEBAQ=="
    return orjson.dumps(value)


def _with_unknown_fields() -> bytes:
    value = orjson.loads(orjson.dumps(VALID_JSON))
    value["someNewTopLevelThing"] = [1, 2]
    value["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["futureField"] = {"x": 1}
    return orjson.dumps(value)


CASES: list[tuple[str, str, bytes, dict[str, str], int, str]] = [
    (
        "truncated protobuf",
        "/v1/traces",
        GOOD[: len(GOOD) // 2],
        PROTOBUF,
        400,
        "not a valid ExportTraceService",
    ),
    ("protobuf garbage", "/v1/logs", b"\xff\xff\xff\xff", PROTOBUF, 400, "not a valid ExportLogsService"),
    ("invalid JSON", "/v1/traces", b'{"resourceSpans": [', JSON, 400, "not valid JSON"),
    ("base64 ids", "/v1/traces", _with_base64_ids(), JSON, 400, "traceId: expected 32 hex characters"),
    (
        "JSON of the wrong shape",
        "/v1/logs",
        b'{"resourceLogs": 5}',
        JSON,
        400,
        "resourceLogs: expected an array",
    ),
    (
        "wrong content type",
        "/v1/traces",
        GOOD,
        {"Content-Type": "text/plain"},
        415,
        "unsupported Content-Type",
    ),
    ("no content type", "/v1/logs", GOOD, {}, 415, "unsupported Content-Type"),
    (
        "unsupported coding",
        "/v1/traces",
        GOOD,
        {**PROTOBUF, "Content-Encoding": "br"},
        415,
        "Content-Encoding",
    ),
    ("not gzip", "/v1/traces", GOOD, {**PROTOBUF, "Content-Encoding": "gzip"}, 400, "not valid gzip"),
    (
        "truncated gzip",
        "/v1/traces",
        gzip.compress(GOOD)[:-12],
        {**PROTOBUF, "Content-Encoding": "gzip"},
        400,
        "gzip",
    ),
    ("huge body", "/v1/traces", b"\0" * (LIMIT + 1), PROTOBUF, 413, "exceeds the limit"),
    ("huge body", "/v1/ray-events", b" " * (LIMIT + 1), JSON, 413, "exceeds the limit"),
    ("ray-events not JSON", "/v1/ray-events", b"[{", JSON, 400, "not valid JSON"),
    ("ray-events not an array", "/v1/ray-events", b'{"eventType": 1}', JSON, 400, "must be a JSON array"),
    (
        "ray-events wrong type",
        "/v1/ray-events",
        b"[]",
        {"Content-Type": "text/csv"},
        415,
        "unsupported Content-Type",
    ),
]


@pytest.mark.parametrize(
    ("case", "path", "body", "headers", "status", "reason"), CASES, ids=[c[0] for c in CASES]
)
def test_bad_input_gets_status_and_reason(
    servers: tuple[CliServer, Path, Path],
    case: str,
    path: str,
    body: bytes,
    headers: dict[str, str],
    status: int,
    reason: str,
) -> None:
    bridge = servers[0]
    response = _post(bridge, path, body, headers)
    assert response.status_code == status, (case, response.text)
    assert reason in _status_message(response), (case, response.text)
    # Errors come in the request's encoding: a google.rpc.Status for OTLP protobuf requests.
    if path != "/v1/ray-events" and headers.get("Content-Type") == PROTOBUF["Content-Type"]:
        assert response.headers["Content-Type"] == "application/x-protobuf"


def test_chunked_huge_body_is_refused_while_streaming(servers: tuple[CliServer, Path, Path]) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(4):
            yield b"\0" * (LIMIT // 2)

    response = _post(servers[0], "/v1/traces", chunks(), PROTOBUF)  # no Content-Length: chunked
    assert response.status_code == 413 and "exceeds the limit" in _status_message(response)


def test_gzip_bomb_is_refused_without_being_inflated(servers: tuple[CliServer, Path, Path]) -> None:
    bridge = servers[0]
    bomb = _bomb(256 * 1024 * 1024)  # 256 MiB of zeros in ~250 KB
    assert len(bomb) < LIMIT
    before = _peak_rss_kib(bridge.proc.pid)
    response = _post(bridge, "/v1/traces", bomb, {**PROTOBUF, "Content-Encoding": "gzip"})
    assert response.status_code == 413
    assert "decompressed body exceeds the limit of 1048576 bytes" in _status_message(response)
    after = _peak_rss_kib(bridge.proc.pid)
    if before is not None and after is not None:
        assert after - before < 64 * 1024, f"peak RSS grew by {after - before} KiB"


def test_unknown_fields_are_ignored(servers: tuple[CliServer, Path, Path]) -> None:
    bridge, _, records_path = servers
    before = len(read_jsonl(records_path))
    response = _post(bridge, "/v1/traces", _with_unknown_fields(), JSON)
    assert response.status_code == 200 and response.json() == {}
    assert len(wait_until(lambda: read_jsonl(records_path)[before:], 3)) == 3


def test_invalid_ids_in_protobuf_are_rejected_per_item(servers: tuple[CliServer, Path, Path]) -> None:
    bridge, _, records_path = servers
    request = _span_request(2)
    bad = (
        request.resource_spans[0]
        .scope_spans[0]
        .spans.add(trace_id=b"\x01" * 5, span_id=b"\x02" * 8, name="bad")
    )
    bad.start_time_unix_nano = 1
    zero = (
        request.resource_spans[0]
        .scope_spans[0]
        .spans.add(trace_id=bytes(16), span_id=b"\x03" * 8, name="zero")
    )
    zero.start_time_unix_nano = 1
    before = len(read_jsonl(records_path))
    response = _post(bridge, "/v1/traces", request.SerializeToString(), PROTOBUF)
    assert response.status_code == 200
    partial = ExportTraceServiceResponse.FromString(response.content).partial_success
    assert partial.rejected_spans == 2
    assert "trace id that is not 16 non-zero bytes" in partial.error_message
    records = wait_until(lambda: read_jsonl(records_path)[before:], 2)
    assert sorted(r["name"] for r in records) == ["s0", "s1"]


def test_log_record_claiming_a_ray_event_with_a_bad_body_is_rejected(
    servers: tuple[CliServer, Path, Path],
) -> None:
    request = _ray_log_request(2)
    broken = request.resource_logs[0].scope_logs[0].log_records.add(event_name="ray.task_lifecycle_event")
    python_to_any_value(
        {"eventType": "TASK_LIFECYCLE_EVENT", "taskLifecycleEvent": {"taskAttempt": "many"}}, broken.body
    )
    response = _post(servers[0], "/v1/logs", orjson.dumps(otlp_json.to_json(request)), JSON)
    assert response.status_code == 200
    partial = response.json()["partialSuccess"]
    assert partial["rejectedLogRecords"] == "1"  # int64 as a string, as OTLP/JSON writes it
    assert "body is not a RayEvent" in partial["errorMessage"]


def test_ray_events_array_of_only_unusable_events_is_not_an_error(
    servers: tuple[CliServer, Path, Path],
) -> None:
    # A 4xx would make Ray's publisher retry this batch forever, and it can never succeed.
    response = _post(servers[0], "/v1/ray-events", b'[{"eventType": "FROM_A_NEWER_RAY"}, 3]', JSON)
    assert response.status_code == 200
    answer = response.json()
    assert answer["accepted"] == 0 and answer["rejected"] == 2
    assert "eventType 'FROM_A_NEWER_RAY' is missing or unknown" in answer["errors"][0]


def test_ray_events_partly_bad_array_accepts_the_good_ones(servers: tuple[CliServer, Path, Path]) -> None:
    good = {
        "eventId": "AAAA",
        "sourceType": "GCS",
        "eventType": "NODE_DEFINITION_EVENT",
        "sessionName": "bad-test",
    }
    body = orjson.dumps([good, {"eventType": "NOT_A_TYPE"}, "text"])
    response = _post(servers[0], "/v1/ray-events", body, JSON)
    assert response.status_code == 200
    answer = response.json()
    assert answer["accepted"] == 1 and answer["rejected"] == 2
    assert answer["errors"][0].startswith("[1]:") and answer["errors"][1].startswith(
        "[2]: expected a RayEvent"
    )


def test_method_not_allowed(servers: tuple[CliServer, Path, Path]) -> None:
    assert requests.get(url(servers[0], "/v1/traces"), timeout=30).status_code == 405


def test_still_serving_after_the_matrix(servers: tuple[CliServer, Path, Path]) -> None:
    bridge, events_path, _ = servers
    request = _ray_log_request(3, session="still-serving")
    response = _post(bridge, "/v1/logs", request.SerializeToString(), PROTOBUF)
    assert response.status_code == 200 and response.content == b""

    def arrived() -> list[dict[str, Any]]:
        return [e for e in read_jsonl(events_path) if e.get("sessionName") == "still-serving"]

    assert len(wait_until(arrived, 3)) == 3


def test_full_queue_answers_503_with_retry_after(tmp_path: Path) -> None:
    with ServerGroup(tmp_path) as group:
        dead_sink, _ = group.sink("dead", "--fail-first", "1000000")
        bridge = group.bridge(
            "--export-addr",
            url(dead_sink),
            "--otlp-endpoint",
            url(dead_sink),
            "--queue-size",
            "5",
            "--shutdown-flush-timeout",
            "0.5",
        )
        statuses = []
        # Until the queue is full: the publisher holds a few batches itself (one sending, one
        # encoded), however many it has taken by then.
        while 503 not in statuses:
            assert len(statuses) < 20, statuses
            response = _post(bridge, "/v1/logs", _ray_log_request(3).SerializeToString(), PROTOBUF)
            statuses.append(response.status_code)
            if response.status_code == 503:
                assert response.headers["Retry-After"] == "1"
                assert "queue to ray-events is full" in _status_message(response)
        assert statuses[0] == 200 and set(statuses) == {200, 503}
        events = [_event_dict(i) for i in range(6)]
        response = _post(bridge, "/v1/ray-events", orjson.dumps(events), JSON)
        assert response.status_code == 503 and response.headers["Retry-After"] == "1"
        stats = bridge.stop()
    refused = stats["otlp_receiver"]["refused_requests"]
    assert sum(item["value"] for item in refused if item["labels"]["status"] == "503") == statuses.count(503)
    # Nothing accepted was silently evicted: the queue refused instead.
    assert stats["queues"]["ray-events"] == {}


def _event_dict(i: int) -> dict[str, Any]:
    factory = EventFactory(session_name="q")
    job = ids.job_id(1)
    event = factory.task_definition(
        task_id=ids.new_task_id(job), job_id=job, name=f"t{i}", function=python_function("m", "f")
    )
    event.event_id = ids.new_unique_id()
    return RayEventJsonEncoder().to_dict(event)


def test_sigterm_delivers_everything_accepted(tmp_path: Path) -> None:
    """A destination failing at first, SIGTERM right after the last 200: all of it still arrives."""
    with ServerGroup(tmp_path) as group:
        events_sink, events_path = group.sink("events", "--fail-first", "3")
        otlp_sink, otlp_path = group.sink("otlp")
        bridge = group.bridge("--export-addr", url(events_sink), "--otlp-endpoint", url(otlp_sink))
        sent = 0
        for _ in range(10):
            response = _post(bridge, "/v1/logs", _ray_log_request(20).SerializeToString(), PROTOBUF)
            assert response.status_code == 200
            sent += 20
        # Open (never finished) tasks: on SIGTERM they must leave as incomplete spans.
        factory = EventFactory(session_name="sigterm")
        job = ids.job_id(7)
        open_tasks = []
        for _ in range(5):
            event = factory.task_lifecycle(task_id=ids.new_task_id(job), job_id=job, state=TaskStatus.RUNNING)
            event.event_id = ids.new_unique_id()
            open_tasks.append(event)
        body = orjson.dumps([_camel(e) for e in open_tasks])
        assert _post(bridge, "/v1/ray-events", body, JSON).status_code == 200
        stats = bridge.stop()
        received = read_jsonl(events_path)
        spans = otlp_spans(otlp_path)
    assert len(received) == sent == 200
    assert len({e["eventId"] for e in received}) == 200
    published = sum(i["value"] for i in stats["publishers"]["ray-events"].get("published", []))
    assert published == 200
    assert "dropped_at_shutdown" not in stats["publishers"]["ray-events"]
    failed = stats["publishers"]["ray-events"]["failed_attempts"]
    assert sum(i["value"] for i in failed) == 3  # the sink refused the first three POSTs: retried
    incomplete = [s for s in spans if s["_attrs"].get("ray_otel_events.incomplete")]
    assert len(incomplete) == 5


def _camel(event: RayEvent) -> dict[str, Any]:
    return RayEventJsonEncoder().to_dict(event)
