"""AddEvents from core workers of other Ray releases: an event is taken as the type its number names
only when its payload is in that type's field; one from a Ray whose numbers differ (submission-job
events numbered 11/12 in some branches, where 11/12 are placement groups here) is kept raw, counted
and listed, never passed on as a placement group. A type number ours do not know (a newer Ray's
autoscaler events, 18-20) is passed on as it came; Ray 2.49's execution event (type 2, field 9) is
wire-compatible with TaskLifecycleEvent and read as one.
"""

from __future__ import annotations

import base64
from pathlib import Path

import grpc
import requests
from helpers.agg_procs import CliServer, metric_total, start, start_aggregator, wait_for_lines

from ray_otel_events.protobuf import add_events_views_pb2
from ray_otel_events.protobuf import events_event_aggregator_service_pb2 as svc
from ray_otel_events.protobuf import events_event_aggregator_service_pb2_grpc as svc_grpc
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent
from ray_otel_events.protobuf.events_task_lifecycle_event_pb2 import TaskLifecycleEvent


def _event(n: int, event_type: int) -> RayEvent:
    return RayEvent(event_id=n.to_bytes(4, "big"), event_type=event_type, session_name="s")  # type: ignore[arg-type]


def test_the_view_sees_every_payload_field_of_ray_event() -> None:
    """`make proto` adding a payload to RayEvent without the view would let its type be misjudged."""
    view = add_events_views_pb2.EventTypeView.DESCRIPTOR.fields_by_number
    payloads = {f.number: f.name for f in RayEvent.DESCRIPTOR.fields if f.message_type and f.number >= 8}
    assert {n: view[n].name for n in payloads if n in view} == payloads


def test_a_type_whose_payload_is_elsewhere_is_kept_raw_not_misread(
    servers: list[CliServer], tmp_path: Path
) -> None:
    sink = start(servers, "sink", "--out", str(tmp_path / "out.jsonl"))
    aggregator, admin = start_aggregator(servers, sink, "--exposable-event-types", "ALL")
    lifecycle = _event(1, RayEvent.TASK_LIFECYCLE_EVENT)
    transition = TaskLifecycleEvent.StateTransition(state=11)  # type: ignore[arg-type]
    lifecycle.task_lifecycle_event.CopyFrom(
        TaskLifecycleEvent(task_id=b"t" * 24, state_transitions=[transition])
    )
    # A branch's SUBMISSION_JOB_DEFINITION_EVENT numbered 11 (PLACEMENT_GROUP_DEFINITION_EVENT here),
    # its payload in the submission-job field.
    branch = _event(2, RayEvent.PLACEMENT_GROUP_DEFINITION_EVENT)
    branch.submission_job_definition_event.submission_id = "raysubmit_1"
    no_payload = _event(3, RayEvent.ACTOR_LIFECYCLE_EVENT)
    newer = _event(4, 19)  # a newer Ray's autoscaler event: a number ours do not know
    newer_wire = newer.SerializeToString() + b"\xda\x01\x02\x08\x01"  # with its payload, field 27
    request = svc.AddEventsRequest()
    for wire in (lifecycle.SerializeToString(), branch.SerializeToString(), no_payload.SerializeToString()):
        request.events_data.events.add().MergeFromString(wire)
    request.events_data.events.add().MergeFromString(newer_wire)
    with grpc.insecure_channel(aggregator.address) as channel:
        svc_grpc.EventAggregatorServiceStub(channel).AddEvents(request, timeout=30)
    delivered = wait_for_lines(tmp_path / "out.jsonl", 2)
    assert sorted(str(e["eventType"]) for e in delivered) == ["19", "TASK_LIFECYCLE_EVENT"]
    listed = requests.get(f"{admin}/unrecognized", timeout=10).json()["events"]
    assert [(e["event_type"], base64.b64decode(e["wire"])) for e in listed] == [
        (RayEvent.PLACEMENT_GROUP_DEFINITION_EVENT, branch.SerializeToString()),
        (RayEvent.ACTOR_LIFECYCLE_EVENT, no_payload.SerializeToString()),
    ]
    port = int(admin.rsplit(":", 1)[1])
    assert metric_total(port, "ray_otel_events_receiver_unrecognized_total") == 2
