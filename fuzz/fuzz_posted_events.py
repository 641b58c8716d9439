"""The bridge's one-pass reader of a RayEvent JSON POST (native/_posted_events.c `read`) against its
Python twin (otel/posted_events.read_posted_events_python: orjson and the RayEvent reader): the
same events (heads, wire bytes, log records) and rejections, or the same refusal (status, reason)."""

from __future__ import annotations

import engine
import seeds
from known import EMPTY_OBJECT_NULL

from ray_otel_events.otel.posted_events import read_posted_events, read_posted_events_python
from tests.test_posted_events import _outcome


def check(data: bytes) -> None:
    assert _outcome(data, read_posted_events) == _outcome(data, read_posted_events_python)


if __name__ == "__main__":
    engine.main(check, seeds.posted_bodies, [EMPTY_OBJECT_NULL])
