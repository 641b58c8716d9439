"""Ray's own client against our aggregator: what reaches the sink equals what Ray's aggregator posts.

The client is built from Ray 2.60's generated code (stub and messages); the expected JSON per event
is Ray's own conversion, `json.loads(message_to_json(e, always_print_fields_with_no_presence=True,
preserving_proto_field_name=P))`, applied to Ray's message objects.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from helpers.agg_procs import CliServer, wait_for_lines

ray_generated = pytest.importorskip("ray.core.generated.events_event_aggregator_service_pb2_grpc")

import grpc  # noqa: E402
from google.protobuf import json_format  # noqa: E402
from ray._private.protobuf_compat import message_to_json  # noqa: E402
from ray.core.generated import common_pb2 as ray_common  # noqa: E402
from ray.core.generated import events_base_event_pb2 as ray_events  # noqa: E402
from ray.core.generated import events_event_aggregator_service_pb2 as ray_svc  # noqa: E402

pytestmark = pytest.mark.ray

FIXTURE = Path(__file__).parent / "fixtures" / "aggregator-ray-2.60" / "events.json"


def ray_events_from_fixture(copies: int) -> list[Any]:
    """Ray's RayEvent messages for every captured event, `copies` times, each with a fresh id."""
    out = []
    items = json.loads(FIXTURE.read_text())
    for _ in range(copies):
        for item in items:
            event = ray_events.RayEvent()
            json_format.ParseDict(item, event)
            event.event_id = os.urandom(28)
            out.append(event)
    return out


def send_with_ray_stub(address: str, events: list[Any], batch: int, dropped_attempts: int = 0) -> None:
    with grpc.insecure_channel(address) as channel:
        stub = ray_generated.EventAggregatorServiceStub(channel)
        for start in range(0, len(events), batch):
            request = ray_svc.AddEventsRequest()
            request.events_data.events.extend(events[start : start + batch])
            for i in range(dropped_attempts if start == 0 else 0):
                request.events_data.task_events_metadata.dropped_task_attempts.append(
                    ray_common.TaskAttempt(task_id=os.urandom(24), attempt_number=i)
                )
            reply = stub.AddEvents(request, timeout=60)
            assert reply == ray_svc.AddEventsReply()  # Ray's aggregator answers an empty reply too


@pytest.mark.parametrize("preserve", [False, True])
def test_sink_receives_exactly_what_ray_would_post(
    servers: list[CliServer], tmp_path: Path, preserve: bool
) -> None:
    out = tmp_path / "events.jsonl"
    sink = CliServer("sink", "--out", str(out))
    servers.append(sink)
    flags = ["--exposable-event-types", "ALL"] + (["--preserve-proto-field-name"] if preserve else [])
    agg = CliServer("aggregator", "--export-addr", f"http://{sink.address}/v1/events", *flags)
    servers.append(agg)

    events = ray_events_from_fixture(copies=3)
    send_with_ray_stub(agg.address, events, batch=20, dropped_attempts=2)
    options = {"always_print_fields_with_no_presence": True, "preserving_proto_field_name": preserve}
    expected = [json.loads(message_to_json(e, **options)) for e in events]
    received = wait_for_lines(out, len(expected))
    stats = agg.stop()
    assert received == expected  # every event, every field, in order
    assert stats["received_total"] == len(events)
    assert stats["producer_dropped_task_attempts"] == 2


def test_default_filter_matches_rays_exposable_list(servers: list[CliServer], tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    sink = CliServer("sink", "--out", str(out))
    servers.append(sink)
    agg = CliServer("aggregator", "--export-addr", f"http://{sink.address}/")
    servers.append(agg)
    events = ray_events_from_fixture(copies=1)
    send_with_ray_stub(agg.address, events, batch=100)
    profile = ray_events.RayEvent.EventType.TASK_PROFILE_EVENT
    expected = [
        json.loads(message_to_json(e, always_print_fields_with_no_presence=True))
        for e in events
        if e.event_type != profile
    ]
    received = wait_for_lines(out, len(expected))
    stats = agg.stop()
    assert received == expected
    assert stats["publishers"]["http_service"]["filtered"] == {"TASK_PROFILE_EVENT": 1}
