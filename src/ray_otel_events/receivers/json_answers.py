"""How the receivers of Ray's posts (`/v1/ray-events`, `/v1/ray-export-events`, `/v1/ray-log-files`)
answer: a refusal is `{"error": reason}` with its status, counted by status, so a client and an
operator read the same reason; a body not read to its end closes the connection; a full queue asks
for a retry; what was taken is counted and answered alike by each."""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable

import orjson
from aiohttp import web

from ray_otel_events.metrics import Counters
from ray_otel_events.receivers.http_body import BodyError, media_type, read_body
from ray_otel_events.receivers.otlp_http import QueueFullError

logger = logging.getLogger(__name__)

MAX_ERRORS_LISTED = 10

# Counter names.
REQUESTS = "requests"
ACCEPTED_EVENTS = "accepted_events"
REJECTED_EVENTS = "rejected_events"
REFUSED_REQUESTS = "refused_requests"  # labelled status=<HTTP status>


class Refused(Exception):
    """The answer a request gets instead of being taken."""

    def __init__(self, response: web.Response) -> None:
        super().__init__(response.status)
        self.response = response


def refusal(
    counters: Counters, status: int, reason: str, headers: dict[str, str] | None = None
) -> web.Response:
    counters.add(REFUSED_REQUESTS, status=str(status))
    return web.Response(
        status=status, body=orjson.dumps({"error": reason}), content_type="application/json", headers=headers
    )


def check_post(request: web.Request, counters: Counters, expected_type: str, what: str) -> None:
    """Counts the request; Refused 415 unless its body is `expected_type` (`what` says what to post)."""
    counters.add(REQUESTS)
    kind = media_type(request)
    if kind != expected_type:
        reason = f"unsupported Content-Type {kind!r}: post {what} ({expected_type})"
        raise Refused(refusal(counters, 415, reason))


async def read_post_body(
    request: web.Request, counters: Counters, max_body_bytes: int, decoded_by_server: bool = False
) -> bytes:
    """The whole body, or Refused with the body's own 400/408/413/503 (closing the connection when
    the rest of it was not read)."""
    try:
        return await read_body(request, max_body_bytes, decoded_by_server)
    except BodyError as exc:
        response = refusal(counters, exc.status, exc.reason, exc.headers)
        if exc.close:
            response.force_close()
        raise Refused(response) from None


async def read_post(
    request: web.Request,
    counters: Counters,
    expected_type: str,
    what: str,
    max_body_bytes: int,
    decoded_by_server: bool = False,
) -> bytes:
    """`check_post`, then `read_post_body`."""
    check_post(request, counters, expected_type, what)
    return await read_post_body(request, counters, max_body_bytes, decoded_by_server)


async def hand_over(counters: Counters, taking: Awaitable[None], what: str) -> None:
    """Waits for the consumer to take `what`; Refused 503 with Retry-After when its queue is full,
    500 (logged once with its traceback: our fault, not the client's) when it failed."""
    try:
        await taking
    except QueueFullError as exc:
        retry = {"Retry-After": str(max(1, math.ceil(exc.retry_after_s)))}
        raise Refused(refusal(counters, 503, exc.reason, retry)) from None
    except Exception:
        logger.exception("the consumer of %s failed", what)
        raise Refused(refusal(counters, 500, f"internal error while handling {what}")) from None


def taken(counters: Counters, accepted: int, errors: list[str]) -> web.Response:
    """200 `{"accepted": n, "rejected": m, "errors": [the first few]}`, counted."""
    counters.add(ACCEPTED_EVENTS, accepted)
    counters.add(REJECTED_EVENTS, len(errors))
    answer = {"accepted": accepted, "rejected": len(errors), "errors": errors[:MAX_ERRORS_LISTED]}
    return web.Response(body=orjson.dumps(answer), content_type="application/json")


def refused_by_path(receivers: dict[str, Counters]) -> dict[tuple[str, ...], float]:
    """{(path, status): refusals} over receivers named by their paths, for one labelled metric."""
    return {
        (path, status): float(count)
        for path, counters in receivers.items()
        for status, count in counters.by_label(REFUSED_REQUESTS, "status").items()
    }
