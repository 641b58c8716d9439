"""Send N real-shaped RayEvents over gRPC AddEvents and time their delivery to a counting sink.

Ported from the team's yardstick (`aggload.py`, written for measuring Ray 2.60's
aggregator); changes: templates come from this repository's fixture file, Ray's generated classes
are used when `ray` is importable and this package's otherwise (`--impl`), and `--no-wait` only
sends (for memory measurements with no sink).

Usage: python aggload.py TARGET_HOST:PORT COUNTFILE N BATCH SESSION_TOKEN FIXTURE [--impl ray|ours]
                         [--no-wait]
Events are copies of captured task definition + lifecycle events with fresh event and task ids and
session name SESSION_TOKEN (the countsink counts that token). All requests are built before the
clock starts. Prints JSON: impl, sent, delivered, send_s, seconds, events_per_s.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import grpc
from google.protobuf import json_format


def load_classes(impl: str) -> tuple[str, Any, Any, Any]:
    if impl in ("auto", "ray"):
        try:
            from ray.core.generated import events_base_event_pb2 as be
            from ray.core.generated import events_event_aggregator_service_pb2 as svc
            from ray.core.generated import events_event_aggregator_service_pb2_grpc as svc_grpc

            return "ray", be, svc, svc_grpc
        except ImportError:
            if impl == "ray":
                raise
    from ray_otel_events.protobuf import events_base_event_pb2 as be
    from ray_otel_events.protobuf import events_event_aggregator_service_pb2 as svc
    from ray_otel_events.protobuf import events_event_aggregator_service_pb2_grpc as svc_grpc

    return "ours", be, svc, svc_grpc


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("target", "countfile", "n", "batch", "token", "fixture"):
        parser.add_argument(name)
    parser.add_argument("--impl", choices=("auto", "ray", "ours"), default="auto")
    parser.add_argument("--no-wait", action="store_true")
    args = parser.parse_args()
    n, batch = int(args.n), int(args.batch)
    impl, be, svc, svc_grpc = load_classes(args.impl)

    templates = []
    with open(args.fixture) as f:
        for item in json.load(f):
            if item["eventType"] in ("TASK_DEFINITION_EVENT", "TASK_LIFECYCLE_EVENT"):
                m = be.RayEvent()
                json_format.ParseDict(item, m)
                m.session_name = args.token
                templates.append(m)

    def count() -> int:
        try:
            with open(args.countfile) as f:
                return int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            return 0

    base = count()
    chan = grpc.insecure_channel(args.target, options=[("grpc.max_send_message_length", 512 * 1024 * 1024)])
    grpc.channel_ready_future(chan).result(timeout=120)
    stub = svc_grpc.EventAggregatorServiceStub(chan)
    reqs = []
    i = 0
    while i < n:
        req = svc.AddEventsRequest()
        for j in range(min(batch, n - i)):
            ev = req.events_data.events.add()
            ev.CopyFrom(templates[(i + j) % len(templates)])
            ev.event_id = os.urandom(28)
            which = (
                ev.task_definition_event if ev.HasField("task_definition_event") else ev.task_lifecycle_event
            )
            which.task_id = (i + j).to_bytes(24, "big")
        reqs.append(req)
        i += batch
    t0 = time.time()
    for req in reqs:
        stub.AddEvents(req, timeout=120)
    t_sent = time.time()
    got = 0
    if not args.no_wait:
        deadline = t0 + float(os.environ.get("AGGLOAD_TIMEOUT", "300"))
        while count() - base < n and time.time() < deadline:
            time.sleep(0.01)
        got = count() - base
    t1 = time.time()
    print(
        json.dumps(
            {
                "impl": impl,
                "sent": n,
                "delivered": got,
                "send_s": round(t_sent - t0, 3),
                "seconds": round(t1 - t0, 3),
                "events_per_s": round(got / (t1 - t0), 1),
            }
        )
    )


if __name__ == "__main__":
    main()
