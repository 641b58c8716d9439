"""A producer process: send real-shaped RayEvents to an aggregator over gRPC AddEvents.

Usage: send_add_events.py HOST:PORT --fixture FILE [--count N] [--batch B] [--types T1,T2]
                          [--unknown-type K --unknown-count M] [--session S]

Events cycle through the fixture's captured events (JSON, as Ray posts them) with a fresh eventId
each; `--unknown-type` adds M events whose type number the schema does not know. Uses this
package's generated stub. Prints one JSON line: {"sent", "by_type", "event_ids"} (ids in base64,
the way the sink will show them).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from collections import Counter

import grpc
from google.protobuf import json_format

from ray_otel_events.events.registry import event_type_label
from ray_otel_events.protobuf import events_event_aggregator_service_pb2 as svc
from ray_otel_events.protobuf import events_event_aggregator_service_pb2_grpc as svc_grpc
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("target")
    parser.add_argument("--fixture", required=True)
    parser.add_argument("--count", type=int, default=0, help="fixture-based events to send")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--types", default="", help="only fixture events of these type names")
    parser.add_argument("--unknown-type", type=int, default=0)
    parser.add_argument("--unknown-count", type=int, default=0)
    parser.add_argument("--session", default="test_session")
    args = parser.parse_args()

    wanted = {t for t in args.types.split(",") if t}
    templates = []
    with open(args.fixture) as f:
        for item in json.load(f):
            if wanted and item["eventType"] not in wanted:
                continue
            event = RayEvent()
            json_format.ParseDict(item, event)
            templates.append(event)
    events: list[RayEvent] = []
    for i in range(args.count):
        event = RayEvent()
        event.CopyFrom(templates[i % len(templates)])
        events.append(event)
    for _ in range(args.unknown_count):
        event = RayEvent(message="from a newer schema")
        event.event_type = args.unknown_type  # type: ignore[assignment]
        events.append(event)
    for event in events:
        event.event_id = os.urandom(28)
        event.session_name = args.session

    channel = grpc.insecure_channel(args.target)
    stub = svc_grpc.EventAggregatorServiceStub(channel)
    for start in range(0, len(events), args.batch):
        request = svc.AddEventsRequest()
        request.events_data.events.extend(events[start : start + args.batch])
        try:
            stub.AddEvents(request, timeout=60, wait_for_ready=True)
        except grpc.RpcError as exc:
            print(f"AddEvents failed: {exc.code()} {exc.details()}", file=sys.stderr)
            return 1
    channel.close()
    print(
        json.dumps(
            {
                "sent": len(events),
                "by_type": dict(Counter(event_type_label(e.event_type) for e in events)),
                "event_ids": [base64.b64encode(e.event_id).decode() for e in events],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
