"""Run E: the JSON arrays a real Ray 2.60 cluster's aggregator POSTed (fixtures/bridge/runE), in the
order they were sent, read as the bridge tests replay them."""

from __future__ import annotations

from pathlib import Path

import orjson
from google.protobuf import json_format

from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent

RUN_E = Path(__file__).resolve().parent.parent / "fixtures" / "bridge" / "runE"


def run_e_bodies() -> list[bytes]:
    """Every POST's body, as sent."""
    return [path.read_bytes() for path in sorted(RUN_E.glob("*.body"))]


def run_e_posts() -> list[list[RayEvent]]:
    """Every POST's events."""
    return [
        [json_format.ParseDict(item, RayEvent()) for item in orjson.loads(body)] for body in run_e_bodies()
    ]


def run_e_events() -> list[RayEvent]:
    """Every event, in the order posted."""
    return [event for post in run_e_posts() for event in post]
