"""EventPublisher + HttpJsonPublisherClient against a real local HTTP server (aiohttp on 127.0.0.1:0).

Ray's publisher tests (ray_anchor §5.2) plus: Ray's backoff schedule, the exact request shape,
filtering of unknown types, isolating an event that cannot be encoded, flush and bounded flush on
shutdown.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from aiohttp import web
from google.protobuf import json_format

from ray_otel_events.config import DEFAULT_EXPOSABLE_EVENT_TYPES
from ray_otel_events.encoding.ray_json import RayEventJsonEncoder
from ray_otel_events.exporters import publisher as pub
from ray_otel_events.exporters.http_json import HttpJsonPublisherClient
from ray_otel_events.processors.event_buffer import MultiConsumerEventBuffer
from ray_otel_events.processors.exposable_filter import ExposableFilter
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent

T = TypeVar("T")
FIXTURE = Path(__file__).parent / "fixtures" / "aggregator-ray-2.60" / "events.json"
NAME = "http_service"
FAST_RETRY = pub.RetryPolicy(max_retries=-1, initial_backoff_s=0.001, max_backoff_s=0.01)


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def fixture_events() -> list[RayEvent]:
    out = []
    for item in json.loads(FIXTURE.read_text()):
        event = RayEvent()
        json_format.ParseDict(item, event)
        out.append(event)
    return out


def events_of(type_name: str, n: int) -> list[RayEvent]:
    template = next(e for e in fixture_events() if RayEvent.EventType.Name(e.event_type) == type_name)
    out = []
    for i in range(n):
        event = RayEvent()
        event.CopyFrom(template)
        event.event_id = i.to_bytes(28, "big")
        out.append(event)
    return out


def add(buffer: MultiConsumerEventBuffer, events: list[RayEvent]) -> None:
    buffer.add_many([e.SerializeToString() for e in events], [int(e.event_type) for e in events])


@dataclass
class Recorder:
    """A real HTTP endpoint that records every request and fails the first `fail` ones."""

    fail: int = 0
    status: int = 503
    headers: dict[str, str] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        peer = request.transport.get_extra_info("peername") if request.transport else None
        self.requests.append(
            {
                "path": request.path_qs,
                "headers": dict(request.headers),
                "body": body,
                "peer": peer,
            }
        )
        if len(self.requests) <= self.fail:
            return web.Response(status=self.status, text="failing on purpose", headers=self.headers)
        return web.json_response({})

    @property
    def posted_events(self) -> list[dict[str, Any]]:
        return [e for r in self.requests[self.fail :] for e in json.loads(r["body"])]


@asynccontextmanager
async def http_server(
    recorder: Recorder, path: str = "/v1/events?x=1", port: int = 0
) -> AsyncIterator[Recorder]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", recorder.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    port = runner.addresses[0][1]
    recorder.url = f"http://127.0.0.1:{port}{path}"
    try:
        yield recorder
    finally:
        await runner.cleanup()


def make_publisher(
    url: str,
    buffer: MultiConsumerEventBuffer,
    retry: pub.RetryPolicy = FAST_RETRY,
    allowed: frozenset[int] | None = DEFAULT_EXPOSABLE_EVENT_TYPES,
    send_interval_s: float = 0.01,
    max_batch_size: int = 1000,
    preserve: bool = False,
) -> pub.EventPublisher[bytes]:
    client = HttpJsonPublisherClient(url, RayEventJsonEncoder(preserve), timeout_s=5)
    return pub.EventPublisher(
        NAME,
        buffer,
        client,
        ExposableFilter(allowed),
        retry,
        max_batch_size=max_batch_size,
        send_interval_s=send_interval_s,
        rng=random.Random(1),
    )


@asynccontextmanager
async def publishing(
    recorder: Recorder, events: list[RayEvent], path: str = "/v1/events?x=1", **options: Any
) -> AsyncIterator[tuple[Recorder, MultiConsumerEventBuffer, pub.EventPublisher[bytes]]]:
    """A publisher (`make_publisher` options) started on `events` in a buffer, posting to `recorder`."""
    async with http_server(recorder, path) as server:
        buffer = MultiConsumerEventBuffer(100, 1 << 20)
        publisher = make_publisher(server.url, buffer, **options)
        add(buffer, events)
        publisher.start()
        yield server, buffer, publisher


async def wait_until(predicate: Any, timeout_s: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


async def stop(
    publisher: pub.EventPublisher[bytes], buffer: MultiConsumerEventBuffer, timeout_s: float = 10
) -> None:
    buffer.close()
    await publisher.shutdown(timeout_s)


def count(publisher: pub.EventPublisher[bytes], counter: str, **labels: str) -> int:
    return publisher.counters.get(counter, publisher=NAME, **labels)


# -- Ray's publisher tests ------------------------------------------------------------------------


def test_publish_with_retries_failure_then_success() -> None:
    async def body() -> None:
        recorder = Recorder(fail=1)
        async with publishing(recorder, events_of("TASK_DEFINITION_EVENT", 3)) as (server, buffer, publisher):
            await wait_until(lambda: count(publisher, pub.PUBLISHED) == 3)
            await stop(publisher, buffer)
            assert len(server.requests) == 2  # exactly one failure and one success
            assert server.requests[0]["body"] == server.requests[1]["body"]  # the identical batch
            assert count(publisher, pub.FAILED_ATTEMPTS) == 1
            assert count(publisher, pub.SEND_FAILURES, event_type="TASK_DEFINITION_EVENT") == 3

    run(body())


def test_publish_with_retries_max_retries_exceeded_then_keeps_going() -> None:
    async def body() -> None:
        retry = pub.RetryPolicy(max_retries=2, initial_backoff_s=0.001, max_backoff_s=0.01)
        async with publishing(
            Recorder(fail=3, status=503), events_of("TASK_LIFECYCLE_EVENT", 4), retry=retry
        ) as (server, buffer, publisher):
            await wait_until(lambda: count(publisher, pub.DROPPED_AFTER_RETRIES) == 4)
            assert len(server.requests) == 3  # 1 + max_retries, then it gives up
            # The publisher is still alive: the next batch goes through.
            add(buffer, events_of("TASK_DEFINITION_EVENT", 2))
            await wait_until(lambda: count(publisher, pub.PUBLISHED) == 2)
            await stop(publisher, buffer)
            assert count(publisher, pub.DROPPED_AFTER_RETRIES, event_type="TASK_LIFECYCLE_EVENT") == 4

    run(body())


def test_backoff_schedule_matches_ray() -> None:
    policy = pub.RetryPolicy()  # Ray's defaults
    rng = random.Random(3)
    for n, base in [(1, 0.02), (2, 0.04), (3, 0.08), (4, 0.16), (9, 5.0), (30, 5.0)]:
        for _ in range(50):
            assert base * 0.9 - 1e-12 <= policy.backoff_s(n, rng) <= base * 1.1 + 1e-12
    exact = pub.RetryPolicy(jitter_ratio=0.0)
    assert [exact.backoff_s(n, rng) for n in (1, 2, 3)] == [0.02, 0.04, 0.08]
    assert not pub.RetryPolicy(max_retries=-1).gives_up(10**6)
    assert pub.RetryPolicy(max_retries=0).gives_up(0)
    assert not pub.RetryPolicy(max_retries=2).gives_up(1)
    assert pub.RetryPolicy(max_retries=2).gives_up(2)


# -- the HTTP request -----------------------------------------------------------------------------


@pytest.mark.parametrize("preserve", [False, True])
def test_request_shape_exact_url_json_array_keep_alive(preserve: bool) -> None:
    async def body() -> None:
        sent = events_of("TASK_DEFINITION_EVENT", 4)
        async with publishing(
            Recorder(), sent, path="/any/path?token=abc", max_batch_size=2, preserve=preserve
        ) as (server, buffer, publisher):
            await wait_until(lambda: count(publisher, pub.PUBLISHED) == 4)
            await stop(publisher, buffer)
        assert len(server.requests) == 2  # one POST per batch of 2
        for request in server.requests:
            assert request["path"] == "/any/path?token=abc"
            assert request["headers"]["Content-Type"] == "application/json"
        assert server.requests[0]["peer"] == server.requests[1]["peer"]  # one kept-alive connection
        expected = [
            json_format.MessageToDict(
                e, always_print_fields_with_no_presence=True, preserving_proto_field_name=preserve
            )
            for e in sent
        ]
        assert server.posted_events == expected

    run(body())


def test_default_filter_drops_profile_and_unknown_types_all_passes_them() -> None:
    unknown = RayEvent(event_id=b"u" * 28, message="newer schema")
    unknown.event_type = 18  # type: ignore[assignment]
    mixed = [*events_of("TASK_PROFILE_EVENT", 2), *events_of("NODE_DEFINITION_EVENT", 1), unknown]

    async def publish(allowed: frozenset[int] | None) -> tuple[Recorder, pub.EventPublisher[bytes]]:
        async with publishing(Recorder(), mixed, allowed=allowed) as (server, buffer, publisher):
            await stop(publisher, buffer)
        return server, publisher

    server, publisher = run(publish(DEFAULT_EXPOSABLE_EVENT_TYPES))
    assert [e["eventType"] for e in server.posted_events] == ["NODE_DEFINITION_EVENT"]
    assert count(publisher, pub.FILTERED, event_type="TASK_PROFILE_EVENT") == 2
    assert count(publisher, pub.FILTERED, event_type="unknown") == 1

    server, publisher = run(publish(None))
    types = [e["eventType"] for e in server.posted_events]
    assert types == ["TASK_PROFILE_EVENT", "TASK_PROFILE_EVENT", "NODE_DEFINITION_EVENT", 18]
    assert count(publisher, pub.PUBLISHED, event_type="unknown") == 1
    assert count(publisher, pub.FILTERED) == 0


def test_all_filtered_batch_makes_no_request() -> None:
    async def body() -> None:
        async with publishing(Recorder(), events_of("TASK_PROFILE_EVENT", 3)) as (server, buffer, publisher):
            await stop(publisher, buffer)
            assert server.requests == []
            assert count(publisher, pub.FILTERED) == 3

    run(body())


def test_event_that_cannot_be_encoded_is_counted_and_the_rest_sent() -> None:
    async def body() -> None:
        async with http_server(Recorder()) as server:
            buffer = MultiConsumerEventBuffer(100, 1 << 20)
            publisher = make_publisher(server.url, buffer)
            good = events_of("TASK_DEFINITION_EVENT", 2)
            # Field 7 (session_name, a string) holding invalid UTF-8: the wire framing is fine.
            bad = b"\x18\x01\x3a\x02\xff\xfe"
            buffer.add_many([good[0].SerializeToString(), bad, good[1].SerializeToString()], [1, 1, 1])
            publisher.start()
            await stop(publisher, buffer)
            assert [e["eventId"] for e in server.posted_events] == [
                json_format.MessageToDict(g)["eventId"] for g in good
            ]
            assert count(publisher, pub.ENCODE_FAILED, event_type="TASK_DEFINITION_EVENT") == 1
            assert count(publisher, pub.PUBLISHED) == 2

    run(body())


def test_unreachable_destination_is_retried_until_it_answers() -> None:
    async def body() -> None:
        recorder = Recorder()
        async with http_server(recorder):
            url = recorder.url
        # The server is gone: connection refused until a new one binds the same port.
        buffer = MultiConsumerEventBuffer(100, 1 << 20)
        publisher = make_publisher(url, buffer)
        add(buffer, events_of("ACTOR_DEFINITION_EVENT", 2))
        publisher.start()
        await wait_until(
            lambda: (
                count(publisher, pub.FAILED_ATTEMPTS) >= 3
                and count(publisher, pub.FAILURES_BY_STATUS, status="connection") >= 3
            )
        )
        second = Recorder()
        async with http_server(second, port=int(url.split(":")[2].split("/")[0])):
            await wait_until(lambda: count(publisher, pub.PUBLISHED) == 2)
            await stop(publisher, buffer)
        assert len(second.posted_events) == 2

    run(body())


# -- shutdown -------------------------------------------------------------------------------------


def test_shutdown_flushes_what_is_buffered() -> None:
    async def body() -> None:
        async with http_server(Recorder()) as server:
            buffer = MultiConsumerEventBuffer(100_000, 1 << 26)
            # A long send interval and a big batch: without a flush these would wait a minute.
            publisher = make_publisher(server.url, buffer, send_interval_s=60, max_batch_size=10_000)
            publisher.start()
            for _ in range(5):
                add(buffer, events_of("TASK_LIFECYCLE_EVENT", 10))
                await asyncio.sleep(0.01)
            await asyncio.wait_for(stop(publisher, buffer), 30)
            assert len(server.posted_events) == 50
            assert count(publisher, pub.PUBLISHED) == 50
            assert count(publisher, pub.DROPPED_AT_SHUTDOWN) == 0

    run(body())


def test_shutdown_with_dead_destination_counts_what_is_left() -> None:
    async def body() -> None:
        retry = pub.RetryPolicy(max_retries=-1, initial_backoff_s=0.5, max_backoff_s=5)
        async with publishing(
            Recorder(fail=10**9), events_of("TASK_DEFINITION_EVENT", 7), retry=retry, max_batch_size=3
        ) as (server, buffer, publisher):
            await wait_until(lambda: len(server.requests) >= 1)
            await asyncio.wait_for(stop(publisher, buffer, timeout_s=0.5), 30)
            # Retrying forever, but the flush is bounded: every event is accounted for as dropped.
            assert count(publisher, pub.DROPPED_AT_SHUTDOWN) == 7
            assert count(publisher, pub.PUBLISHED) == 0
            assert len(buffer) == 0

    run(body())


@pytest.mark.parametrize("status", [400, 401, 413, 500])
def test_non_retryable_status_is_a_counted_permanent_failure(status: int) -> None:
    """Only connection errors and 429/502/503/504 are retried; a 400 or 500 would fail forever."""

    async def body() -> None:
        recorder = Recorder(fail=1, status=status)
        async with publishing(recorder, events_of("TASK_LIFECYCLE_EVENT", 3)) as (server, buffer, publisher):
            await wait_until(lambda: count(publisher, pub.REJECTED) == 3)
            add(buffer, events_of("TASK_DEFINITION_EVENT", 2))  # the queue is not blocked
            await wait_until(lambda: count(publisher, pub.PUBLISHED) == 2)
            await stop(publisher, buffer)
            assert len(server.requests) == 2  # the refused batch was sent once, never again
            assert count(publisher, pub.FAILURES_BY_STATUS, status=str(status)) == 1
            assert count(publisher, pub.DROPPED_AFTER_RETRIES) == 0

    run(body())


@pytest.mark.parametrize("status", [429, 502, 503, 504])
def test_retryable_statuses_are_retried(status: int) -> None:
    async def body() -> None:
        recorder = Recorder(fail=2, status=status)
        async with publishing(recorder, events_of("TASK_LIFECYCLE_EVENT", 3)) as (server, buffer, publisher):
            await wait_until(lambda: count(publisher, pub.PUBLISHED) == 3)
            await stop(publisher, buffer)
            assert len(server.requests) == 3
            assert count(publisher, pub.FAILURES_BY_STATUS, status=str(status)) == 2

    run(body())


def test_retry_after_is_honoured_over_a_shorter_backoff(caplog: pytest.LogCaptureFixture) -> None:
    async def body() -> None:
        recorder = Recorder(fail=1, status=429, headers={"Retry-After": "1"})
        # The publisher's own backoff is ~1 ms.
        async with publishing(recorder, events_of("TASK_LIFECYCLE_EVENT", 1)) as (server, buffer, publisher):
            await wait_until(lambda: count(publisher, pub.PUBLISHED) == 1)
            await stop(publisher, buffer)
            assert len(server.requests) == 2  # the refused one, then the retry

    with caplog.at_level(logging.WARNING, logger=pub.__name__):
        run(body())
    # the wait it took before the retry: the server's Retry-After, not its own backoff
    waits = [r.getMessage() for r in caplog.records if "retrying in" in r.getMessage()]
    assert len(waits) == 1 and "(attempt 1), retrying in 1.00s" in waits[0], waits
