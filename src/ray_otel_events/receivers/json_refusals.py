"""How the JSON receivers (`/v1/ray-events`, `/v1/ray-export-events`, `/v1/ray-log-files`) say no:
`{"error": reason}` with its status, counted by status, so a client and an operator read the same
reason; a body not read to its end closes the connection; a full queue asks for a retry."""

from __future__ import annotations

import math

import orjson
from aiohttp import web

from ray_otel_events.metrics import Counters
from ray_otel_events.receivers.http_body import BodyError
from ray_otel_events.receivers.otlp_http import QueueFullError

REFUSED_REQUESTS = "refused_requests"  # labelled status=<HTTP status>


def refusal(
    counters: Counters, status: int, reason: str, headers: dict[str, str] | None = None
) -> web.Response:
    counters.add(REFUSED_REQUESTS, status=str(status))
    return web.Response(
        status=status, body=orjson.dumps({"error": reason}), content_type="application/json", headers=headers
    )


def body_refusal(counters: Counters, exc: BodyError) -> web.Response:
    response = refusal(counters, exc.status, exc.reason, exc.headers)
    if exc.close:  # what is left of the body is not read: the connection goes
        response.force_close()
    return response


def queue_full_refusal(counters: Counters, exc: QueueFullError) -> web.Response:
    return refusal(counters, 503, exc.reason, {"Retry-After": str(max(1, math.ceil(exc.retry_after_s)))})
