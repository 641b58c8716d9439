"""The one-pass reader of RayEvents carried in an OTLP logs request (native/_log_events.c `read`)
against its Python twin (ExportLogsServiceRequest.FromString, then otel/to_ray_events'
claims_ray_event and ray_event_from_log_record a record): where the pass takes the request, the
same events, event types and RayEvent JSON; it never takes what the Python path would refuse."""

from __future__ import annotations

import engine
import seeds

from tests.test_log_events import _checked, _of_events


def check(data: bytes) -> None:
    _checked(data)


def _seeds() -> list[bytes]:
    events = seeds.events()
    requests = [_of_events(events[start : start + 4]) for start in range(0, len(events), 4)]
    return requests + [request.SerializeToString() for request in seeds.logs_requests()]


if __name__ == "__main__":
    engine.main(check, _seeds)
