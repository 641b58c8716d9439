"""Every server on hostile input, as an attacker would send it: each answer is below 500 (400 with a
reason where the input is bad, a gRPC status, never UNKNOWN or INTERNAL), the connection is
answered rather than dropped, and the server still serves a good request afterwards. Each runs
twice, with the compiled helpers and with their Python twins (RAY_OTEL_EVENTS_PURE_PYTHON=1); where
both answer, they answer alike."""

from __future__ import annotations

import contextlib
import copy
import functools
import gzip
import json
import socket
import sqlite3
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import orjson
import pytest
import requests
from helpers.agg_procs import FIXTURE, CliServer, free_port, read_jsonl
from helpers.bridge_procs import ServerGroup, url, wait_until
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from ray_otel_events.durable.sqlite_queue import FILE_NAME as QUEUE_FILE
from ray_otel_events.durable.sqlite_queue import QueueDatabase, SqliteEventQueue
from ray_otel_events.otel import otlp_json, semconv
from ray_otel_events.otel.plain_records import python_to_any_value
from ray_otel_events.protobuf.events_event_aggregator_service_pb2 import AddEventsRequest
from tests.test_wire_reader import field, group, key, nested_groups, varint

LIMIT = 1024 * 1024  # the bridge's, set small so that "huge" stays cheap
SERVE_LIMIT = 64 * 1024 * 1024
MODES = {"compiled": {}, "python": {"RAY_OTEL_EVENTS_PURE_PYTHON": "1"}}
JSON = {"Content-Type": "application/json"}
PROTOBUF = {"Content-Type": "application/x-protobuf"}
EVENTS: list[dict[str, Any]] = json.loads(Path(FIXTURE).read_text())
DEEP = "[" * 1000 + "]" * 1000  # under orjson's 1024 levels: reaches the Python that reads the item


class Stack:
    """A bridge (HTTP and OTLP gRPC) with its sink, a `serve` and an aggregator, in one mode."""

    def __init__(self, group: ServerGroup, tmp: Path, env: dict[str, str]) -> None:
        self.sink, self.records = group.sink("records")
        self.bridge = group.bridge(
            "--export-addr",
            url(self.sink),
            "--spans-export-addr",
            url(self.sink),
            "--otlp-endpoint",
            url(self.sink),
            "--max-body-bytes",
            str(LIMIT),
            "--grpc-port",
            "0",
            env=env,
        )
        self.serve = CliServer("serve", "--store", str(tmp / "store.sqlite3"), env=env)
        group.started.append(self.serve)
        self.admin_port = free_port()
        self.aggregator = CliServer(
            "aggregator", "--export-addr", url(self.sink), "--metrics-port", str(self.admin_port), env=env
        )
        group.started.append(self.aggregator)


@pytest.fixture(scope="module")
def stacks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Stack]]:
    with ServerGroup(tmp_path_factory.mktemp("hostile")) as group:
        yield {mode: Stack(group, tmp_path_factory.mktemp(mode), env) for mode, env in MODES.items()}


def _post(server: CliServer, path: str, body: bytes, headers: dict[str, str]) -> requests.Response:
    return requests.post(f"http://{server.address}{path}", data=body, headers=headers, timeout=60)


def _reason(response: requests.Response) -> str:
    if response.headers.get("Content-Type", "").startswith("application/x-protobuf"):
        from google.rpc import status_pb2  # type: ignore[import-untyped]

        return str(status_pb2.Status.FromString(response.content).message)
    try:
        body = response.json()
    except ValueError:
        return response.text
    if isinstance(body, dict):
        return str(body.get("error") or body.get("message") or body.get("msg") or body)
    return str(body)


# -- regressions -------------------------------------------------------------------------------


def _grouped_traces() -> bytes:
    """A valid ExportTraceServiceRequest carrying unknown fields encoded as groups (which upb
    keeps) inside a span, an attribute's KeyValue and its AnyValue."""
    span = Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="grouped", start_time_unix_nano=1_000)
    span.end_time_unix_nano = 2_000
    span.events.add(name="e", time_unix_nano=1_500)
    value = AnyValue(string_value="w").SerializeToString() + group(9, key(1, 0) + b"\x01")
    span.attributes.append(KeyValue.FromString(field(1, b"g") + field(2, value) + group(7, group(7))))
    wire = span.SerializeToString() + group(99, field(1, b"x") + nested_groups(3, 5))
    request = ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.append(Span.FromString(wire))
    return request.SerializeToString()


def _grouped_logs() -> bytes:
    record = LogRecord(time_unix_nano=5, severity_text="INFO")
    record.body.string_value = "plain line"
    wire = record.SerializeToString() + group(40, field(1, b"y"))
    request = ExportLogsServiceRequest()
    request.resource_logs.add().scope_logs.add().log_records.append(LogRecord.FromString(wire))
    return request.SerializeToString()


@pytest.mark.parametrize("server", ["bridge", "serve"])
def test_otlp_with_unknown_groups_is_taken_as_python_takes_it(stacks: dict[str, Stack], server: str) -> None:
    answers = {}
    for mode, stack in stacks.items():
        target = getattr(stack, server)
        traces = _post(target, "/v1/traces", _grouped_traces(), PROTOBUF)
        logs = _post(target, "/v1/logs", _grouped_logs(), PROTOBUF)
        assert (traces.status_code, logs.status_code) == (200, 200), (mode, traces.content, logs.content)
        answers[mode] = (traces.content, logs.content)
    assert answers["compiled"] == answers["python"]
    if server == "bridge":
        written = {
            mode: wait_until(
                lambda stack=stack: [r for r in read_jsonl(stack.records) if "grouped" in json.dumps(r)], 1
            )
            for mode, stack in stacks.items()
        }
        # The exporter delivers at least once (a send that timed out on a busy machine is sent again):
        # the records are compared as distinct ones.
        distinct = {mode: sorted({_without_times([r]) for r in records}) for mode, records in written.items()}
        assert len(distinct["compiled"]) == 1
        assert distinct["compiled"] == distinct["python"]


def _without_times(records: list[dict[str, Any]]) -> str:
    return json.dumps(records, sort_keys=True).replace("\n", "")


def _item(**changes: Any) -> bytes:
    event = {
        "eventId": "AAAA",
        "sourceType": "GCS",
        "eventType": "NODE_DEFINITION_EVENT",
        "sessionName": "hostile",
        "timestamp": "2024-01-01T00:00:30.4Z",
        "nodeDefinitionEvent": {"nodeId": "AAAA"},
        **changes,
    }
    return json.dumps([event]).replace('"@DEEP@"', DEEP).encode()


@pytest.mark.parametrize(
    ("server", "body", "reason"),
    [
        ("serve", _item(eventType="@DEEP@"), "an event without eventType"),
        ("serve", _item(sessionName="@DEEP@"), "sessionName: nested too deep"),
        ("bridge", _item(timestamp="@DEEP@"), "nested too deep"),
        ("bridge", _item(timestamp="2024-01-01T00:00:30.4E999Z"), "out of range"),
    ],
    ids=["serve deep eventType", "serve deep sessionName", "bridge deep timestamp", "bridge huge exponent"],
)
def test_hostile_json_items_are_rejected_with_a_reason(
    stacks: dict[str, Stack], server: str, body: bytes, reason: str
) -> None:
    for mode, stack in stacks.items():
        response = _post(getattr(stack, server), "/v1/ray-events", body, JSON)
        assert response.status_code == 200, (mode, response.text)
        answer = response.json()
        assert answer["accepted"] == 0 and answer["rejected"] == 1, (mode, answer)
        assert reason in answer["errors"][0], (mode, answer)


# -- the battery -------------------------------------------------------------------------------


def _deep_json(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


# Cached, as are the two builders below: each is asked for the same bodies several times while the
# module is collected, which every xdist worker does (seconds under load, before any test runs).
@functools.cache
def _bomb(inflated: int) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = b"\0" * (1 << 20)
    return b"".join([*(compressor.compress(chunk) for _ in range(inflated >> 20)), compressor.flush()])


ODD_VALUES: list[Any] = [
    None,
    True,
    0,
    -1,
    1.5,
    2**70,
    -(2**70),
    1e308,
    "",
    "x" * 5000,
    "\u0000",
    [],
    {},
    [1],
    {"a": 1},
]


@functools.cache
def _wrong_type_logs() -> dict[str, bytes]:
    """`_wrong_types`' events as OTLP log records carrying RayEvents (as the OTLP bridge writes
    them), one logs request per event type; values past int64 left out (an AnyValue cannot hold
    them)."""
    bodies: dict[str, bytes] = {}
    for kind, body in _wrong_types().items():
        request = ExportLogsServiceRequest()
        scope = request.resource_logs.add().scope_logs.add()
        for item in json.loads(body):
            name = item.get("eventType")
            record = scope.log_records.add(
                time_unix_nano=1,
                event_name=semconv.event_name_for(name) if isinstance(name, str) else "ray.x",
            )
            with contextlib.suppress(ValueError, TypeError):
                python_to_any_value(item, record.body)
        bodies[kind] = request.SerializeToString()
    return bodies


@functools.cache
def _wrong_types() -> dict[str, bytes]:
    """Per event type, one array holding a captured event of that type once for each key path (top
    level and one down) and odd value: that key set to that value. Items are answered one by one,
    so a single POST per type tries them all."""
    bodies: dict[str, bytes] = {}
    for event in EVENTS:
        kind = str(event.get("eventType"))
        if kind in bodies:
            continue
        paths = [(name,) for name in event] + [
            (name, inner) for name, value in event.items() if isinstance(value, dict) for inner in value
        ]
        items = []
        for path in paths:
            for odd in ODD_VALUES:
                changed = copy.deepcopy(event)
                target = changed
                for name in path[:-1]:
                    target = target[name]
                target[path[-1]] = odd
                items.append(changed)
        bodies[kind] = json.dumps(items).encode()
    return bodies


JSON_BODIES: dict[str, bytes] = {
    "empty": b"",
    "whitespace": b"   ",
    "null": b"null",
    "number": b"1e999",
    "NaN": b"NaN",
    "string": b'"x"',
    "object": b"{}",
    "nested 10k": _deep_json(10_000),
    "nested 1000": _deep_json(1000),
    "invalid UTF-8": b'["\xff\xfe"]',
    "lone surrogate": b'["\\ud800"]',
    "huge integer": b"[" + b"9" * 5000 + b"]",
    "non-object items": b'[1, "x", null, [], true, 1.5e308, {"eventType": null}]',
    "truncated": b'[{"eventType": "TASK_DEFI',
    "duplicate keys": b'[{"eventType": "TASK_DEFINITION_EVENT", "eventType": 5}]',
}


def _logs_json(record: dict[str, Any]) -> bytes:
    return orjson.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": [record]}]}]})


OTLP_JSON_BODIES: dict[str, bytes] = {
    "resource nested": orjson.dumps(
        {
            "resourceSpans": [
                {
                    "resource": {
                        "attributes": [{"key": "k", "value": {"kvlistValue": {"values": [{"key": "k"}] * 3}}}]
                    }
                }
            ]
        }
    ),
    "deep kvlist": b'{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":'
    + b'{"arrayValue":{"values":[' * 300
    + b"]}}" * 300
    + b"}]}]}]}",
    "bad base64": b'{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":{"bytesValue":"!!!"}}]}]}]}',
    "huge time": _logs_json(
        {"timeUnixNano": "99999999999999999999999", "traceId": "01" * 16, "spanId": "02" * 8}
    ),
    "NaN time": b'{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"timeUnixNano":NaN}]}]}]}',
    "wrong types": _logs_json({"timeUnixNano": [], "severityNumber": "x", "body": 5, "attributes": {}}),
    "ray body wrong": _logs_json(
        {
            "eventName": "ray.task_definition_event",
            "body": {"kvlistValue": {"values": [{"key": "eventType", "value": {"arrayValue": {}}}]}},
        }
    ),
}


def _nested_fields(depth: int) -> bytes:
    body = b""
    for _ in range(depth):
        body = field(1, body)
    return body


PROTOBUF_BODIES: dict[str, bytes] = {
    "empty": b"",
    "garbage": b"\xff" * 64,
    "truncated": _grouped_traces()[:-7],
    "field number 0": key(0, 0) + b"\x01",
    "field number 2^29": key(1 << 29, 0) + b"\x01",
    "wire type 7": key(1, 7),
    "unmatched end group": key(1, 4),
    "groups 101 deep": nested_groups(101),
    "groups 100 deep": nested_groups(100),
    "nested messages 200 deep": _nested_fields(200),
    "huge length": b"\x0a" + varint(1 << 40),
    "invalid UTF-8 name": ExportTraceServiceRequest().SerializeToString()
    + field(1, field(2, field(2, field(5, b"\xff")))),
}


def _http_cases() -> list[tuple[str, str, str, bytes, dict[str, str]]]:
    cases = []
    for server in ("bridge", "serve"):
        for path in ("/v1/ray-events", "/v1/traces", "/v1/logs"):
            for name, body in JSON_BODIES.items():
                cases.append((f"{server} {path} json {name}", server, path, body, JSON))
        for path in ("/v1/traces", "/v1/logs"):
            for name, body in PROTOBUF_BODIES.items():
                cases.append((f"{server} {path} protobuf {name}", server, path, body, PROTOBUF))
            for name, body in OTLP_JSON_BODIES.items():
                cases.append((f"{server} {path} otlp json {name}", server, path, body, JSON))
        huge = b"\0" * ((LIMIT if server == "bridge" else SERVE_LIMIT) + 1)
        cases.append((f"{server} huge body", server, "/v1/traces", huge, PROTOBUF))
        for path in ("/v1/ray-events", "/v1/traces"):
            for name, headers, body in [
                ("not gzip", {**JSON, "Content-Encoding": "gzip"}, b"[]"),
                ("truncated gzip", {**JSON, "Content-Encoding": "gzip"}, gzip.compress(b"[]" * 100)[:-9]),
                ("gzip bomb", {**JSON, "Content-Encoding": "gzip"}, _bomb(64 << 20)),
                (
                    "gzip twice",
                    {**JSON, "Content-Encoding": "gzip, gzip"},
                    gzip.compress(gzip.compress(b"[]")),
                ),
                ("unknown coding", {**JSON, "Content-Encoding": "zstd"}, b"[]"),
                ("wrong type", {"Content-Type": "text/html"}, b"[]"),
                ("type with junk", {"Content-Type": "application/json; charset=\x7f; x"}, b"[]"),
            ]:
                cases.append((f"{server} {path} {name}", server, path, body, headers))
        for kind, body in _wrong_types().items():
            cases.append((f"{server} wrong types in {kind}", server, "/v1/ray-events", body, JSON))
        for kind, body in _wrong_type_logs().items():
            cases.append((f"{server} wrong types in {kind} logs", server, "/v1/logs", body, PROTOBUF))
    cases.append(("sink empty", "sink", "/", b"", JSON))
    cases.append(("sink not JSON", "sink", "/x", b"[{", JSON))
    cases.append(("sink nested", "sink", "/x", _deep_json(10_000), JSON))
    cases.append(("sink not an array", "sink", "/x", b'{"a": 1}', JSON))
    cases.append(("sink gzip bomb", "sink", "/x", _bomb(64 << 20), {**JSON, "Content-Encoding": "gzip"}))
    return cases


HTTP_CASES = _http_cases()


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize(
    ("case", "server", "path", "body", "headers"), HTTP_CASES, ids=[c[0] for c in HTTP_CASES]
)
def test_hostile_posts_get_an_answer_below_500(
    stacks: dict[str, Stack],
    mode: str,
    case: str,
    server: str,
    path: str,
    body: bytes,
    headers: dict[str, str],
) -> None:
    response = _post(getattr(stacks[mode], server), path, body, headers)
    assert response.status_code < 500, (case, response.status_code, response.text[:500])
    if response.status_code >= 400:
        assert _reason(response).strip(), (case, response.text)


GETS = [
    "/api/v0/tasks?limit=abc",
    "/api/v0/tasks?limit=-1",
    "/api/v0/tasks?limit=99999999999999999999999999",
    "/api/v0/tasks?limit=" + "9" * 5000,
    "/api/v0/tasks?timeout=abc",
    "/api/v0/tasks?timeout=1e999",
    "/api/v0/tasks?detail=maybe",
    "/api/v0/tasks?exclude_driver=%FF",
    "/api/v0/tasks?filter_keys=state",
    "/api/v0/tasks?filter_keys=state&filter_predicates=%3D%3D&filter_values=x",
    "/api/v0/tasks?filter_keys=nope&filter_predicates=%3D&filter_values=x",
    "/api/v0/tasks?filter_keys=state&filter_predicates=%3D&filter_values=%00%FF",
    "/api/v0/tasks?filter_keys=task_id&filter_predicates=%3D&filter_values=" + "f" * 10000,
    "/api/v0/tasks?filter_keys=attempt_number&filter_predicates=%3D&filter_values=1e999",
    "/api/v0/tasks?filter_keys=start_time_ms&filter_predicates=%21%3D&filter_values=NaN",
    "/api/v0/actors?filter_keys=state&filter_keys=state&filter_predicates=%3D&filter_values=x",
    "/api/v0/nope",
    "/api/v0/tasks/summarize?summary_by=%FF",
    "/api/v0/actors/summarize?limit=x",
    "/api/v0/jobs?limit=0",
    "/api/v0/nodes?detail=1&limit=1&offset=-5",
    "/api/v0/workers?filter_keys=&filter_predicates=&filter_values=",
    "/api/v0/placement_groups?%zz=1",
    "/api/ui/tasks?sort=nope",
    "/api/ui/tasks?limit=0&offset=-1",
    "/api/ui/tasks?q=%22%27%3B%20DROP%20TABLE%20tasks%3B--",
    "/api/ui/tasks?q=%25_%5C%00",
    "/api/ui/tasks?q=" + "a" * 100_00,
    "/api/ui/tasks?state=%FF&job=%00&order=sideways",
    "/api/ui/tasks/ZZ",
    "/api/ui/tasks/" + "a" * 10000,
    "/api/ui/traces?limit=-1",
    "/api/ui/traces/" + "0" * 32,
    "/api/ui/timeline?job_id=%FF%FE",
    "/api/ui/overview?x=1",
    "/api/ui/generation",
    "/api/version?x=%zz",
    "/api/" + "x/" * 1000,
    "/task/%00%FF",
    "/task/" + "x" * 5000,
    "/static/..%2f..%2fetc%2fpasswd",
    "/static/%00.js",
    "/static/.hidden.css",
    "/metrics",
    "/healthz",
    "/readyz",
    "/nope",
]


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("path", GETS)
def test_hostile_reads_of_serve_get_an_answer_below_500(
    stacks: dict[str, Stack], mode: str, path: str
) -> None:
    response = requests.get(f"http://{stacks[mode].serve.address}{path}", timeout=60)
    assert response.status_code < 500, (path, response.status_code, response.text[:500])


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("server", ["bridge", "serve", "sink", "admin"])
def test_wrong_methods_and_raw_requests_are_answered(
    stacks: dict[str, Stack], mode: str, server: str
) -> None:
    stack = stacks[mode]
    address = f"127.0.0.1:{stack.admin_port}" if server == "admin" else getattr(stack, server).address
    for method, path in [
        ("GET", "/v1/traces"),
        ("PUT", "/v1/ray-events"),
        ("DELETE", "/"),
        ("POST", "/metrics"),
    ]:
        response = requests.request(method, f"http://{address}{path}", timeout=60)
        assert response.status_code < 500, (server, method, path, response.status_code)
    host, port = address.rsplit(":", 1)
    for raw in [
        b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
        b"Content-Length: 99999999999999\r\n\r\nabc",
        b"POST /v1/ray-events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: -5\r\n\r\n[]",
        b"POST /v1/ray-events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\nzz\r\n[]\r\n0\r\n\r\n",
        b"GET /api/v0/tasks?limit=%%% HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GARBAGE\r\n\r\n",
    ]:
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(raw)
            answer = sock.recv(4096)
        assert answer.startswith(b"HTTP/1."), (server, raw[:40], answer[:100])
        status = int(answer.split()[1])
        assert status < 500, (server, raw[:60], answer[:300])


GRPC_BODIES = {name: body for name, body in PROTOBUF_BODIES.items()}


@pytest.mark.parametrize("mode", list(MODES))
def test_hostile_grpc_calls_get_a_status_not_a_crash(stacks: dict[str, Stack], mode: str) -> None:
    stack = stacks[mode]
    targets = [
        (stack.bridge.addresses["grpc"], "/opentelemetry.proto.collector.trace.v1.TraceService/Export"),
        (stack.bridge.addresses["grpc"], "/opentelemetry.proto.collector.logs.v1.LogsService/Export"),
        (stack.aggregator.address, "/ray.rpc.events.EventAggregatorService/AddEvents"),
    ]
    add_events = AddEventsRequest()
    add_events.events_data.events.add(event_id=b"\x01", event_type=7)  # a task definition without a payload
    bodies = {
        **GRPC_BODIES,
        "grouped traces": _grouped_traces(),
        "add events": add_events.SerializeToString(),
        "add events with a group": add_events.SerializeToString() + group(77),
    }
    too_big = field(1, b"\0" * LIMIT)
    with grpc.insecure_channel(stack.bridge.addresses["grpc"]) as channel:
        with pytest.raises(grpc.RpcError) as refused:
            channel.unary_unary(targets[0][1])(too_big, timeout=30)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
    for target, method in targets:
        with grpc.insecure_channel(target) as channel:
            call = channel.unary_unary(method)
            for name, body in bodies.items():
                try:
                    call(body, timeout=30)
                except grpc.RpcError as exc:
                    code = exc.code()  # type: ignore[attr-defined]
                    assert code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED), (
                        method,
                        name,
                        code,
                        exc.details(),  # type: ignore[attr-defined]
                    )


@pytest.mark.parametrize("mode", list(MODES))
def test_every_server_still_serves_after_the_battery(stacks: dict[str, Stack], mode: str) -> None:
    stack = stacks[mode]
    good = [EVENTS[0]]
    for server in (stack.bridge, stack.serve):
        response = _post(server, "/v1/ray-events", orjson.dumps(good), JSON)
        assert response.status_code == 200 and response.json()["accepted"] == 1, response.text
        traces = _post(server, "/v1/traces", otlp_json_traces(), JSON)
        assert traces.status_code == 200, traces.text
    assert requests.get(f"http://127.0.0.1:{stack.admin_port}/healthz", timeout=30).status_code == 200
    for server in (stack.bridge, stack.serve, stack.aggregator, stack.sink):
        assert server.proc.poll() is None, server.stderr()


def otlp_json_traces() -> bytes:
    request = ExportTraceServiceRequest()
    span = (
        request.resource_spans.add()
        .scope_spans.add()
        .spans.add(trace_id=b"\x01" * 16, span_id=b"\x03" * 8, name="after")
    )
    span.start_time_unix_nano = 1
    return orjson.dumps(otlp_json.to_json(request))


def _any_value_levels(levels: int) -> bytes:
    """A logs request whose record body nests AnyValues until the innermost message sits `levels`
    messages below the request (request 0, resource 1, scope 2, record 3, body 4; each array 2)."""
    value = AnyValue(string_value="x").SerializeToString()
    for _ in range((levels - 4) // 2):
        value = field(5, field(1, value))  # AnyValue{array_value: ArrayValue{values: [value]}}
    return field(1, field(2, field(2, field(5, value))))


def _json_any_value_levels(levels: int) -> bytes:
    value: dict[str, Any] = {"stringValue": "x"}
    for _ in range((levels - 4) // 2):
        value = {"arrayValue": {"values": [value]}}
    return orjson.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": [{"body": value}]}]}]})


# Input at and past each limit of the README's "Limits on input", and the answer expected.
LIMITS: list[tuple[str, str, bytes, dict[str, str], int, str]] = [
    ("body size", "/v1/ray-events", b" " * (LIMIT + 1), JSON, 413, "exceeds the limit"),
    ("body size", "/v1/logs", b"\0" * (LIMIT + 1), PROTOBUF, 413, "exceeds the limit"),
    ("JSON nesting 1024", "/v1/ray-events", _deep_json(1024), JSON, 200, ""),
    ("JSON nesting 1025", "/v1/ray-events", _deep_json(1025), JSON, 400, "depth limit exceeded"),
    ("JSON nesting 1025", "/v1/traces", _deep_json(1025), JSON, 400, "depth limit exceeded"),
    ("messages 100 deep", "/v1/logs", _any_value_levels(100), PROTOBUF, 200, ""),
    ("messages 102 deep", "/v1/logs", _any_value_levels(102), PROTOBUF, 400, "not a valid"),
    ("messages 100 deep", "/v1/logs", _json_any_value_levels(100), JSON, 200, ""),
    ("messages 102 deep", "/v1/logs", _json_any_value_levels(102), JSON, 400, "nested deeper than 100"),
    ("groups 100 deep", "/v1/logs", field(1, b"") + nested_groups(100), PROTOBUF, 200, ""),
    ("groups 101 deep", "/v1/logs", field(1, b"") + nested_groups(101), PROTOBUF, 400, "not a valid"),
    ("field number 2^29-1", "/v1/traces", key((1 << 29) - 1, 0) + b"\x01", PROTOBUF, 200, ""),
    ("field number 2^29", "/v1/traces", key(1 << 29, 0) + b"\x01", PROTOBUF, 400, "not a valid"),
    ("field number 0", "/v1/traces", key(0, 0) + b"\x01", PROTOBUF, 400, "not a valid"),
]


@pytest.mark.parametrize("server", ["bridge", "serve"])
@pytest.mark.parametrize(
    ("limit", "path", "body", "headers", "status", "reason"), LIMITS, ids=[f"{c[0]} {c[1]}" for c in LIMITS]
)
def test_limits_answer_alike_on_both_paths(
    stacks: dict[str, Stack],
    server: str,
    limit: str,
    path: str,
    body: bytes,
    headers: dict[str, str],
    status: int,
    reason: str,
) -> None:
    if server == "serve" and limit == "body size":
        body = body + b" " * (SERVE_LIMIT - LIMIT)
    answers = {}
    for mode, stack in stacks.items():
        response = _post(getattr(stack, server), path, body, headers)
        answers[mode] = (response.status_code, _reason(response) if response.status_code >= 400 else "")
    assert answers["compiled"] == answers["python"], answers
    assert answers["compiled"][0] == status and reason in answers["compiled"][1], answers


@pytest.mark.parametrize("mode", list(MODES))
def test_a_damaged_stored_piece_is_dropped_and_the_bridge_starts(tmp_path: Path, mode: str) -> None:
    """Rows of the durable queue reach the converter without upb on the compiled path: one whose
    bytes upb refuses (a field number past 2^29-1) is deleted with a warning, and the rest resume."""
    queue_dir = tmp_path / "queue"
    with ServerGroup(tmp_path) as group:
        sink, _ = group.sink("events")
        args = ("--export-addr", url(sink), "--spans-export-addr", url(sink), "--queue-dir", str(queue_dir))
        group.bridge(*args, env=MODES[mode]).stop()
        database = sqlite3.connect(queue_dir / QUEUE_FILE)
        tables = [row[0] for row in database.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        database.close()
        queue = QueueDatabase(queue_dir, tables)
        SqliteEventQueue(queue, "pending", 1 << 20).append(
            [field(1, b"AAAA") + key(1 << 29, 0) + b"\x01"], [7], [b"entity"]
        )
        queue.close()
        bridge = group.bridge(*args, env=MODES[mode])
        assert bridge.proc.poll() is None
        assert "stored pieces are not RayEvents; deleted" in bridge.stderr()
        bridge.stop()
        queue = QueueDatabase(queue_dir, tables)
        assert SqliteEventQueue(queue, "pending", 1 << 20).read_all().wires == []
        queue.close()
