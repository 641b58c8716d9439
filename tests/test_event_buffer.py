"""MultiConsumerEventBuffer: Ray's unit tests (ray_anchor §5.2) re-expressed, plus the byte bound,
per-consumer eviction counts, unknown types and the shutdown drain."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

from ray_otel_events.processors.event_buffer import (
    EVICTED,
    RECORD_OVERHEAD_BYTES,
    BufferClosedError,
    EventBatch,
    MultiConsumerEventBuffer,
)
from ray_otel_events.processors.exposable_filter import ExposableFilter

T = TypeVar("T")
TASK_DEF, TASK_LIFE, PROFILE = 1, 2, 4


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def ev(i: int) -> bytes:
    return f"event-{i}".encode()


def make(max_events: int = 100, max_bytes: int = 1 << 20) -> MultiConsumerEventBuffer:
    return MultiConsumerEventBuffer(max_events, max_bytes)


def test_add_and_consume_event_basic() -> None:
    async def body() -> None:
        buf = make()
        buf.register_consumer("c")
        assert len(buf) == 0
        buf.add(ev(0), TASK_DEF)
        assert len(buf) == 1
        batch = await buf.wait_for_batch("c", 10, timeout_s=0)
        assert batch.wires == [ev(0)] and batch.types == [TASK_DEF]

    run(body())


def test_add_event_buffer_overflow() -> None:
    buf = make(max_events=3)
    for i in range(4):
        buf.add(ev(i), TASK_DEF)
    assert len(buf) == 3


def test_wait_for_batch_multiple_events() -> None:
    async def body() -> None:
        buf = make()
        buf.register_consumer("c")
        for i in range(5):
            buf.add(ev(i), TASK_DEF)
        first = await buf.wait_for_batch("c", 3, timeout_s=0.01)
        second = await buf.wait_for_batch("c", 3, timeout_s=0.01)
        assert first.wires == [ev(i) for i in range(3)]
        assert second.wires == [ev(3), ev(4)]

    run(body())


def test_wait_for_batch_unknown_consumer() -> None:
    async def body() -> None:
        buf = make()
        with pytest.raises(KeyError, match="unknown consumer"):
            await buf.wait_for_batch("nobody", 1, timeout_s=0)
        with pytest.raises(KeyError, match="unknown consumer"):
            buf.take("nobody", 1)

    run(body())


def test_register_twice_is_an_error() -> None:
    buf = make()
    buf.register_consumer("c")
    with pytest.raises(ValueError, match="already registered"):
        buf.register_consumer("c")


def test_multiple_consumers_independent_cursors() -> None:
    async def body() -> None:
        buf = make(max_events=3)
        buf.register_consumer("fast")
        buf.register_consumer("slow")
        for i in range(3):
            buf.add(ev(i), TASK_DEF)
        assert (await buf.wait_for_batch("fast", 10, 0)).wires == [ev(0), ev(1), ev(2)]
        # Overflow: 0 and 1 go; only "slow" had not read them.
        buf.add(ev(3), TASK_DEF)
        buf.add(ev(4), TASK_LIFE)
        assert (await buf.wait_for_batch("slow", 10, 0)).wires == [ev(2), ev(3), ev(4)]
        assert (await buf.wait_for_batch("fast", 10, 0)).wires == [ev(3), ev(4)]
        assert buf.counters.get(EVICTED, consumer="slow") == 2
        assert buf.counters.get(EVICTED, consumer="fast") == 0
        assert buf.counters.get(EVICTED, consumer="slow", event_type="TASK_DEFINITION_EVENT") == 2

    run(body())


def test_wait_for_batch_blocks_until_event_available() -> None:
    async def body() -> None:
        buf = make()
        buf.register_consumer("c")
        waiter = asyncio.ensure_future(buf.wait_for_batch("c", 10, timeout_s=0.01))
        await asyncio.sleep(0.1)  # well past the batch timeout: still waiting for a first event
        assert not waiter.done()
        buf.add(ev(0), TASK_DEF)
        batch = await asyncio.wait_for(waiter, 10)
        assert batch.wires == [ev(0)]

    run(body())


def test_wait_for_batch_tops_up_after_first_event() -> None:
    async def body() -> None:
        buf = make()
        buf.register_consumer("c")
        buf.add(ev(0), TASK_DEF)
        waiter = asyncio.ensure_future(buf.wait_for_batch("c", 3, timeout_s=30))
        await asyncio.sleep(0)
        buf.add(ev(1), TASK_DEF)
        await asyncio.sleep(0)
        assert not waiter.done()  # 2 of 3, timeout far away
        buf.add(ev(2), TASK_DEF)
        batch = await asyncio.wait_for(waiter, 10)  # full: returns without waiting the 30 s
        assert batch.wires == [ev(0), ev(1), ev(2)]

    run(body())


def test_concurrent_producer_consumer_random_sleeps_with_overall_timeout() -> None:
    async def body() -> None:
        buf = make()
        buf.register_consumer("c")
        rng = random.Random(7)
        got: list[bytes] = []

        async def produce() -> None:
            for i in range(40):
                buf.add(ev(i), TASK_DEF)
                await asyncio.sleep(rng.uniform(0, 0.01))

        async def consume() -> None:
            while len(got) < 40:
                got.extend((await buf.wait_for_batch("c", 7, timeout_s=0.005)).wires)

        await asyncio.wait_for(asyncio.gather(produce(), consume()), timeout=30)
        assert got == [ev(i) for i in range(40)]  # exact order, no duplicates, nothing missing

    run(body())


def test_read_events_are_freed_once_every_consumer_has_them() -> None:
    async def body() -> None:
        buf = make()
        buf.register_consumer("a")
        buf.register_consumer("b")
        for i in range(10):
            buf.add(ev(i), TASK_DEF)
        await buf.wait_for_batch("a", 10, 0)
        assert len(buf) == 10  # "b" has not read them
        await buf.wait_for_batch("b", 4, 0)
        assert len(buf) == 6
        await buf.wait_for_batch("b", 10, 0)
        assert len(buf) == 0 and buf.size_bytes == 0

    run(body())


def test_byte_bound_evicts_oldest_and_counts_per_type() -> None:
    async def body() -> None:
        record = 100 + RECORD_OVERHEAD_BYTES
        buf = make(max_events=1000, max_bytes=5 * record)
        buf.register_consumer("c")
        for i in range(8):
            buf.add(bytes([i]) * 100, PROFILE if i < 2 else TASK_DEF)
        assert len(buf) == 5
        assert buf.size_bytes <= buf.max_bytes
        batch = await buf.wait_for_batch("c", 100, 0)
        assert batch.wires == [bytes([i]) * 100 for i in range(3, 8)]
        assert buf.counters.get(EVICTED, consumer="c", event_type="TASK_PROFILE_EVENT") == 2
        assert buf.counters.get(EVICTED, consumer="c", event_type="TASK_DEFINITION_EVENT") == 1

    run(body())


def test_event_larger_than_byte_bound_is_evicted_and_counted() -> None:
    buf = make(max_events=10, max_bytes=200)
    buf.register_consumer("c")
    buf.add(b"x" * 500, TASK_DEF)
    assert len(buf) == 0
    assert buf.counters.get(EVICTED, consumer="c") == 1


def test_batch_bigger_than_buffer_keeps_the_newest() -> None:
    async def body() -> None:
        buf = make(max_events=100)
        buf.register_consumer("c")
        buf.add_many([ev(i) for i in range(300)], [TASK_LIFE] * 300)
        assert buf.counters.get(EVICTED, consumer="c", event_type="TASK_LIFECYCLE_EVENT") == 200
        batch = await buf.wait_for_batch("c", 1000, 0)
        assert batch.wires == [ev(i) for i in range(200, 300)]

    run(body())


def test_unknown_event_type_numbers_are_carried_and_counted_by_number() -> None:
    async def body() -> None:
        buf = make(max_events=1)
        buf.register_consumer("c")
        buf.add(ev(0), 18)
        buf.add(ev(1), 99)
        assert buf.counters.get(EVICTED, consumer="c", event_type="unknown") == 1
        batch = await buf.wait_for_batch("c", 10, 0)
        assert batch.types == [99]

    run(body())


def test_many_adds_and_reads_stay_in_order_across_compactions() -> None:
    async def body() -> None:
        buf = make(max_events=50)
        buf.register_consumer("a")
        buf.register_consumer("b")
        seen: dict[str, list[bytes]] = {"a": [], "b": []}
        for i in range(2000):
            buf.add(ev(i), TASK_DEF)
            if i % 3 == 0:
                seen["a"].extend(buf.take("a", 2).wires)
            if i % 100 == 0:
                seen["b"].extend(buf.take("b", 10).wires)
        for name in ("a", "b"):
            seen[name].extend(buf.take(name, 10_000).wires)
            numbers = [int(w.split(b"-")[1]) for w in seen[name]]
            assert numbers == sorted(set(numbers))  # in order, no duplicates
            evicted = buf.counters.get(EVICTED, consumer=name)
            assert len(numbers) + evicted == 2000  # nothing lost without a count
        assert len(buf) == 0

    run(body())


def test_close_drains_without_waiting_then_returns_empty() -> None:
    async def body() -> None:
        buf = make()
        buf.register_consumer("c")
        idle = asyncio.ensure_future(buf.wait_for_batch("c", 10, timeout_s=60))
        await asyncio.sleep(0)
        buf.add(ev(0), TASK_DEF)
        buf.close()
        assert (await asyncio.wait_for(idle, 10)).wires == [ev(0)]
        assert len(await asyncio.wait_for(buf.wait_for_batch("c", 10, 60), 10)) == 0
        with pytest.raises(BufferClosedError):
            buf.add(ev(1), TASK_DEF)

    run(body())


def test_cancelled_wait_loses_nothing() -> None:
    async def body() -> None:
        buf = make()
        buf.register_consumer("c")
        buf.add(ev(0), TASK_DEF)
        waiter = asyncio.ensure_future(buf.wait_for_batch("c", 5, timeout_s=60))
        await asyncio.sleep(0.01)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert buf.take("c", 5).wires == [ev(0)]

    run(body())


def test_discard_unread_reports_types() -> None:
    buf = make()
    buf.register_consumer("c")
    buf.add_many([ev(0), ev(1), ev(2)], [TASK_DEF, PROFILE, PROFILE])
    assert buf.discard_unread("c") == {TASK_DEF: 1, PROFILE: 2}
    assert len(buf) == 0


def test_exposable_filter_default_all_and_unknown() -> None:
    batch = EventBatch([ev(0), ev(1), ev(2), ev(3)], [TASK_DEF, PROFILE, 18, TASK_LIFE])
    kept, dropped = ExposableFilter(frozenset({TASK_DEF, TASK_LIFE})).split(batch)
    assert kept.wires == [ev(0), ev(3)] and kept.types == [TASK_DEF, TASK_LIFE]
    assert dropped.types == [PROFILE, 18]
    kept_all, dropped_all = ExposableFilter(None).split(batch)
    assert kept_all.wires == batch.wires and not dropped_all
