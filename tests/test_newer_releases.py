"""Events of a Ray newer than our protos (Ray 2.60's): Ray's main branch after 2.60 adds autoscaler
events (types 18-20, posted by name) and base-event fields `sourceHostname` (29) and `sourcePid` (30).

`serve` keeps an event of a type it cannot name raw (no row, never folded as another type), counts
it by its name (bounded) and lists it at GET /unrecognized; a later Ray's fields show in `get` and
on the task page; the bridge carries such events through OTLP both ways as they were posted; a type
number our protos lack, sent over gRPC, reaches `serve` and is kept, counted and listed there.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import orjson
import requests
from helpers.agg_procs import CliServer, clean_env, free_port, metric_total, read_jsonl, start, wait_until
from helpers.bridge_procs import ServerGroup, url
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from ray_otel_events.encoding.newer_releases import OTHER, UnknownTypes, unknown_type_events
from ray_otel_events.otel import unknown_type_records
from ray_otel_events.protobuf import events_event_aggregator_service_pb2 as svc
from ray_otel_events.protobuf import events_event_aggregator_service_pb2_grpc as svc_grpc
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent
from ray_otel_events.store import raw_events

SESSION = "session_2026-12-02_04-00-00_000000_1"
LATER = "AUTOSCALER_SCALING_DECISION_EVENT"
TASK_ID = bytes(range(1, 25))


def _later(event_id: str, event_type: str | int) -> dict[str, Any]:
    """A later Ray's event of a type our protos lack, with values of every JSON kind."""
    return {
        "eventId": event_id,
        "sourceType": "AUTOSCALER",
        "eventType": event_type,
        "timestamp": "2026-12-02T04:00:01.123456789Z",
        "severity": "INFO",
        "sessionName": SESSION,
        "sourceHostname": "head-1",
        "autoscalerScalingDecisionEvent": {
            "launch": [{"nodeType": "gpu", "count": 2}],
            "utilization": 0.75,
            "dryRun": False,
            "reason": None,
        },
    }


def _task_definition() -> dict[str, Any]:
    """A task's definition with a later Ray's fields: two on the base event, one in the payload."""
    return {
        "eventId": "dGFzay1kZWY=",
        "sourceType": "CORE_WORKER",
        "eventType": "TASK_DEFINITION_EVENT",
        "timestamp": "2026-12-02T04:00:00Z",
        "severity": "INFO",
        "sessionName": SESSION,
        "sourceHostname": "worker-3",
        "sourcePid": 4242,
        "taskDefinitionEvent": {
            "taskId": base64.b64encode(TASK_ID).decode(),
            "taskAttempt": 0,
            "taskName": "train",
            "laterRayField": {"shards": [1, 2]},
        },
    }


def test_serve_keeps_counts_and_lists_events_of_unknown_types(
    servers: list[CliServer], tmp_path: Any
) -> None:
    serve = start(servers, "serve", "--store", str(tmp_path / "events.sqlite3"))
    base = f"http://{serve.address}"
    events = [
        _task_definition(),
        _later("bGF0ZXIx", LATER),
        _later("bGF0ZXIy", 19),
        _later("bGF0ZXIz", "LATER_X"),
    ]
    answer = requests.post(f"{base}/v1/ray-events", json=events, timeout=30)
    assert answer.status_code == 200 and answer.json() == {"accepted": 4, "rejected": 0, "errors": []}

    def listed() -> dict[str, Any]:
        found: dict[str, Any] = requests.get(f"{base}/unrecognized", timeout=10).json()
        return found

    wait_until(lambda: len(listed()["events"]) == 3, "the events of unknown type listed")
    assert listed()["event_types"] == {LATER: 1, "19": 1, "LATER_X": 1}
    assert [(e["event_type"], e["event"]) for e in listed()["events"]] == [
        (LATER, events[1]),
        ("19", events[2]),
        ("LATER_X", events[3]),
    ]
    assert metric_total(serve.port, "ray_otel_events_serve_unknown_type_events_total") == 3
    # Folded as nothing else: one task, no other rows.
    for resource, count in (("tasks", 1), ("actors", 0), ("jobs", 0), ("nodes", 0), ("placement_groups", 0)):
        rows = requests.get(f"{base}/api/v0/{resource}", timeout=30).json()["data"]["result"]["result"]
        assert len(rows) == count, resource
    shown = subprocess.run(
        [sys.executable, "-m", "ray_otel_events", "get", "tasks", TASK_ID.hex(), "--address", base],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(),
    )
    assert shown.returncode == 0, shown.stderr
    task = json.loads(shown.stdout)
    assert (task["name"], task["source_hostname"], task["source_pid"]) == ("train", "worker-3", 4242)
    assert task["later_ray_field"] == {"shards": [1, 2]}
    page = requests.get(f"{base}/api/ui/tasks/{TASK_ID.hex()}", timeout=30).json()
    assert page["attempts"][0]["unread_fields"] == ["later_ray_field", "source_hostname", "source_pid"]

    # The same by OTLP (what the bridge makes of it): kept and listed as it came, never a log line.
    by_otlp = _later("bGF0ZXI0", LATER)
    request = ExportLogsServiceRequest()
    records = request.resource_logs.add().scope_logs.add().log_records
    records.append(unknown_type_records.log_record(by_otlp, time.time_ns()))
    records.add().body.string_value = "a plain log line"
    answer = requests.post(
        f"{base}/v1/logs",
        data=request.SerializeToString(),
        headers={"Content-Type": "application/x-protobuf"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    last = listed()["events"][-1]
    assert (last["event_type"], last["event"]) == (LATER, by_otlp)
    stats = serve.stop()
    assert stats["unknown_type_events"] == 4 and stats["log_lines"] == 1, stats


def test_names_are_counted_apart_up_to_a_bound() -> None:
    """The names are the sender's: past the bound, one label for the rest."""
    counts = UnknownTypes(max_names=2)
    counts.add([(name, {"eventId": name}) for name in ("A", "B", "C", "D", "A")])
    assert counts.listing()["event_types"] == {"A": 2, "B": 1, OTHER: 2}
    assert [e["event_type"] for e in counts.listing()["events"]] == ["A", "B", "C", "D", "A"]
    # ...and so are the events listed: by count and by bytes, the oldest going first
    few = UnknownTypes(kept=2)
    few.add([(name, {"eventId": name}) for name in ("A", "B", "C")])
    assert [e["event"] for e in few.listing()["events"]] == [{"eventId": "B"}, {"eventId": "C"}]
    small = UnknownTypes(kept_bytes=40)
    small.add([(name, {"eventId": name * 10}) for name in ("A", "B", "C")])
    assert [e["event_type"] for e in small.listing()["events"]] == ["C"]
    huge = {"eventId": "H", "eventType": "X", "blob": "x" * (1 << 20)}
    small.add([("X", huge)])
    (kept,) = [e for e in small.listing()["events"] if e["event_type"] == "X"]
    assert kept["event"] is None and kept["bytes"] == len(orjson.dumps(huge))


def test_only_bodies_naming_an_unknown_type_are_read() -> None:
    known = orjson.dumps([_task_definition()])
    later = _later("bGF0ZXIx", "LATER\\u0058")  # an escaped name is read as its text
    unnamed = {**_later("", LATER)}  # no id: rejected, so not counted
    assert unknown_type_events([known]) == []
    body = orjson.dumps([_task_definition(), later, unnamed, _later("bGF0ZXIy", 2)])
    assert unknown_type_events([known, body]) == [("LATER\\u0058", later)]
    assert unknown_type_events([b'[{"eventId": "a", "eventType": 123456789012345678901234567890}]']) == []


def test_the_bridge_carries_unknown_types_both_ways_as_posted(tmp_path: Path) -> None:
    """RayEvent JSON -> bridge -> OTLP -> bridge -> RayEvent JSON: an event of a type our protos
    lack, by name or by number, arrives with the keys and values it was posted with (through the
    bridges' queues on disk)."""
    with ServerGroup(tmp_path) as group:
        sink, out = group.sink("events")
        # OTLP -> RayEvent JSON, and RayEvent JSON -> OTLP; each with its queues on disk
        back = group.bridge("--export-addr", f"{url(sink)}/v1/ray-events", "--queue-dir", str(tmp_path / "b"))
        there = group.bridge("--otlp-endpoint", url(back), "--queue-dir", str(tmp_path / "t"))
        events = [_later("bGF0ZXIx", LATER), _later("bGF0ZXIy", 19), _task_definition()]
        answer = requests.post(url(there, "/v1/ray-events"), json=events, timeout=30)
        assert answer.status_code == 200 and answer.json()["accepted"] == 3, answer.text
        wait_until(lambda: len(read_jsonl(out)) >= 3, "the events back as RayEvent JSON")
    arrived = {e["eventId"]: e for e in read_jsonl(out)}
    assert arrived["bGF0ZXIx"] == events[0]
    assert arrived["bGF0ZXIy"] == events[1]
    assert arrived["dGFzay1kZWY="]["taskDefinitionEvent"]["taskName"] == "train"


def test_an_unknown_type_number_over_grpc_is_kept_counted_and_listed(
    servers: list[CliServer], tmp_path: Any
) -> None:
    """A newer core worker's autoscaler event (type 19, payload in field 27) through our
    aggregator to `serve`: kept raw there, counted and listed by its number, in no row."""
    serve = start(servers, "serve", "--store", str(tmp_path / "events.sqlite3"))
    aggregator = start(
        servers,
        "aggregator",
        "--export-addr",
        f"http://{serve.address}/v1/ray-events",
        "--exposable-event-types",
        "ALL",
        "--metrics-port",
        str(free_port()),
    )
    newer = RayEvent(event_id=b"\x00\x00\x00\x04", event_type=19, session_name=SESSION)  # type: ignore[arg-type]
    request = svc.AddEventsRequest()
    request.events_data.events.add().MergeFromString(newer.SerializeToString() + b"\xda\x01\x02\x08\x01")
    with grpc.insecure_channel(aggregator.address) as channel:
        svc_grpc.EventAggregatorServiceStub(channel).AddEvents(request, timeout=30)
    base = f"http://{serve.address}"
    wait_until(
        lambda: requests.get(f"{base}/unrecognized", timeout=10).json()["event_types"] == {"19": 1},
        "the aggregator's event of type 19 listed by serve",
    )
    (listed,) = requests.get(f"{base}/unrecognized", timeout=10).json()["events"]
    assert listed["event"]["eventType"] == 19 and listed["event"]["eventId"] == "AAAABA=="
    rows = requests.get(f"{base}/api/v0/placement_groups", timeout=30).json()["data"]["result"]["result"]
    assert rows == []


def test_the_base_fields_beyond_the_envelope_show_in_the_detail() -> None:
    """Beside its payload, an event's fields beyond the envelope every event has show (by either
    name), whether or not our protos name them: a later Ray's still shows after `make proto`."""
    event = {**_task_definition(), "message": "", "nodeId": "AQ==", "source_pid_v2": 1}
    shown = raw_events.new_fields([event])
    assert shown == {
        "source_hostname": "worker-3",
        "source_pid": 4242,
        "source_pid_v2": 1,
        "later_ray_field": {"shards": [1, 2]},
    }
