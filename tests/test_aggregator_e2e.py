"""Real processes: producer (gRPC AddEvents) -> `ray-otel-events aggregator` -> `ray-otel-events sink`.

The rule every test checks: each event sent is either in the sink's file or counted in the
aggregator's final `stats` line, and the numbers add up exactly.
"""

from __future__ import annotations

import asyncio
import socket
from collections import Counter
from pathlib import Path
from typing import Any

import grpc
import pytest
from helpers.agg_procs import (
    FIXTURE,
    TASK_TYPES,
    CliServer,
    free_port,
    metric_total,
    read_jsonl,
    refused_by_cli,
    run_producer,
    start,
    wait_for_lines,
    wait_until,
)

from ray_otel_events.config import AggregatorConfig
from ray_otel_events.protobuf import events_event_aggregator_service_pb2 as svc
from ray_otel_events.protobuf import events_event_aggregator_service_pb2_grpc as svc_grpc
from ray_otel_events.services.aggregator import HTTP_PUBLISHER, AggregatorService


def start_pair(
    servers: list[CliServer],
    out: Path,
    agg_args: tuple[str, ...] = (),
    sink_args: tuple[str, ...] = (),
    **kw: Any,
) -> tuple[CliServer, CliServer]:
    sink = start(servers, "sink", "--out", str(out), *sink_args)
    agg = start(servers, "aggregator", "--export-addr", f"http://{sink.address}/v1/events", *agg_args, **kw)
    return sink, agg


def publisher_stats(stats: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = stats["publishers"][HTTP_PUBLISHER]
    return result


def total(per_type: dict[str, int]) -> int:
    return sum(per_type.values())


def assert_accounted(stats: dict[str, Any], sent: dict[str, Any], sink_events: list[dict[str, Any]]) -> None:
    """Every sent event is in the sink or counted; no duplicates, nothing unknown in the sink."""
    p = publisher_stats(stats)
    assert stats["received_total"] == sent["sent"]
    assert stats["received"] == sent["by_type"]
    assert p["accounted_total"] == sent["sent"]
    ids = [e.get("eventId", e.get("event_id")) for e in sink_events]
    assert len(ids) == len(set(ids)), "duplicates in the sink"
    assert set(ids) <= set(sent["event_ids"])
    assert len(sink_events) == total(p["published"])
    assert stats["buffer"]["held_events"] == 0


def test_delivers_everything_default_filter_counts_profile_and_unknown(
    servers: list[CliServer], tmp_path: Path
) -> None:
    out = tmp_path / "events.jsonl"
    sink, agg = start_pair(servers, out)
    sent = run_producer(
        agg.address,
        "--fixture",
        FIXTURE,
        "--count",
        "230",
        "--batch",
        "40",
        "--unknown-type",
        "18",
        "--unknown-count",
        "3",
    )
    expected = sent["sent"] - sent["by_type"]["TASK_PROFILE_EVENT"] - 3
    events = wait_for_lines(out, expected)
    stats = agg.stop()
    sink.stop()
    assert_accounted(stats, sent, events)
    p = publisher_stats(stats)
    assert len(events) == expected
    # Counted under one label whatever the number: a client cannot add series without bound.
    assert p["filtered"] == {"TASK_PROFILE_EVENT": sent["by_type"]["TASK_PROFILE_EVENT"], "unknown": 3}
    assert stats["received"]["unknown"] == 3
    delivered = [e["eventId"] for e in events]
    assert delivered == [i for i in sent["event_ids"] if i in set(delivered)]  # in the order sent
    assert {e["eventType"] for e in events} == set(sent["by_type"]) - {"TASK_PROFILE_EVENT", "unknown"}


def test_all_from_env_passes_profile_and_unknown_type(servers: list[CliServer], tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    env = {"RAY_DASHBOARD_AGGREGATOR_AGENT_EXPOSABLE_EVENT_TYPES": "ALL"}
    _sink, agg = start_pair(servers, out, env=env)
    sent = run_producer(
        agg.address, "--fixture", FIXTURE, "--count", "23", "--unknown-type", "18", "--unknown-count", "2"
    )
    events = wait_for_lines(out, sent["sent"])
    stats = agg.stop()
    assert_accounted(stats, sent, events)
    assert len(events) == sent["sent"]
    assert publisher_stats(stats)["filtered"] == {}
    unknown = [e for e in events if e["eventType"] == 18]
    assert len(unknown) == 2 and unknown[0]["message"] == "from a newer schema"
    assert Counter(e["eventType"] for e in events)["TASK_PROFILE_EVENT"] == 1


def test_preserve_proto_field_name(servers: list[CliServer], tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    _sink, agg = start_pair(servers, out, agg_args=("--preserve-proto-field-name",))
    sent = run_producer(agg.address, "--fixture", FIXTURE, "--count", "10", "--types", TASK_TYPES)
    events = wait_for_lines(out, 10)
    stats = agg.stop()
    assert len(events) == 10
    assert all("event_id" in e and "session_name" in e and "eventId" not in e for e in events)
    assert [e["event_id"] for e in events] == sent["event_ids"]
    assert stats["received_total"] == 10


def test_sink_failing_first_requests_then_accepting(servers: list[CliServer], tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    sink, agg = start_pair(servers, out, sink_args=("--fail-first", "3", "--fail-status", "503"))
    sent = run_producer(agg.address, "--fixture", FIXTURE, "--count", "50", "--types", TASK_TYPES)
    events = wait_for_lines(out, 50)
    stats = agg.stop()
    sink_stats = sink.stop()
    assert_accounted(stats, sent, events)
    assert len(events) == 50
    assert publisher_stats(stats)["failed_attempts"] == 3
    assert sink_stats["failed_on_purpose"] == 3


def test_max_retries_exhausted_events_are_counted_dropped(servers: list[CliServer], tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    metrics_port = free_port()
    _sink, agg = start_pair(
        servers,
        out,
        agg_args=("--max-retries", "1", "--metrics-port", str(metrics_port)),
        sink_args=("--fail-first", "2"),
    )
    first = run_producer(agg.address, "--fixture", FIXTURE, "--count", "30", "--types", TASK_TYPES)
    # The first batch fails twice and is given up before more arrive.
    wait_until(
        lambda: metric_total(metrics_port, "ray_otel_events_publisher_dropped_after_retries_total") >= 1,
        "ray_otel_events_publisher_dropped_after_retries_total >= 1",
    )
    second = run_producer(agg.address, "--fixture", FIXTURE, "--count", "20", "--types", TASK_TYPES)
    sent = {
        "sent": first["sent"] + second["sent"],
        "by_type": dict(Counter(first["by_type"]) + Counter(second["by_type"])),
        "event_ids": first["event_ids"] + second["event_ids"],
    }
    stats = agg.stop()
    events = read_jsonl(out)
    assert_accounted(stats, sent, events)
    p = publisher_stats(stats)
    assert total(p["dropped_after_retries"]) > 0
    assert total(p["dropped_after_retries"]) + total(p["published"]) == 50


def test_sink_down_then_up(servers: list[CliServer], tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "events.jsonl"
    metrics_port = free_port()
    agg = start(
        servers,
        "aggregator",
        "--export-addr",
        f"http://127.0.0.1:{port}/",
        "--max-backoff",
        "0.5",
        "--metrics-port",
        str(metrics_port),
    )
    sent = run_producer(agg.address, "--fixture", FIXTURE, "--count", "40", "--types", TASK_TYPES)
    # The publisher meets the closed port, five times as its backoff grows.
    wait_until(
        lambda: metric_total(metrics_port, "ray_otel_events_publisher_failed_attempts_total") >= 5,
        "ray_otel_events_publisher_failed_attempts_total >= 5",
    )
    start(servers, "sink", "--out", str(out), "--port", str(port))
    events = wait_for_lines(out, 40)
    stats = agg.stop()
    assert_accounted(stats, sent, events)
    assert len(events) == 40
    assert publisher_stats(stats)["failed_attempts"] >= 1


def test_sigterm_flushes_buffered_events_before_exit(servers: list[CliServer], tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    # A 10-minute send interval and a huge batch: only the shutdown flush can deliver these.
    _sink, agg = start_pair(servers, out, agg_args=("--send-interval", "600", "--max-batch-size", "100000"))
    sent = run_producer(
        agg.address, "--fixture", FIXTURE, "--count", "500", "--batch", "50", "--types", TASK_TYPES
    )
    stats = agg.stop(timeout_s=60)  # far shorter than the send interval
    events = read_jsonl(out)
    assert_accounted(stats, sent, events)
    assert len(events) == 500
    assert total(publisher_stats(stats)["dropped_at_shutdown"]) == 0


def test_sigterm_with_dead_sink_counts_what_it_could_not_flush(
    servers: list[CliServer], tmp_path: Path
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    agg = start(
        servers, "aggregator", "--export-addr", f"http://127.0.0.1:{port}/", "--shutdown-flush-timeout", "1"
    )
    sent = run_producer(agg.address, "--fixture", FIXTURE, "--count", "60", "--types", TASK_TYPES)
    stats = agg.stop()
    assert_accounted(stats, sent, [])
    assert total(publisher_stats(stats)["dropped_at_shutdown"]) == 60


def test_batch_bigger_than_buffer_counts_evictions(servers: list[CliServer], tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    _sink, agg = start_pair(servers, out, agg_args=("--max-buffer-size", "100"))
    sent = run_producer(
        agg.address, "--fixture", FIXTURE, "--count", "300", "--batch", "300", "--types", TASK_TYPES
    )
    events = wait_for_lines(out, 100)
    stats = agg.stop()
    assert_accounted(stats, sent, events)
    p = publisher_stats(stats)
    assert total(p["evicted"]) == 200 and total(p["published"]) == 100
    assert [e["eventId"] for e in events] == sent["event_ids"][200:]  # drop-oldest keeps the newest


def test_no_export_address_accepts_and_counts(servers: list[CliServer]) -> None:
    agg = start(servers, "aggregator")
    sent = run_producer(agg.address, "--fixture", FIXTURE, "--count", "25")
    stats = agg.stop()
    assert stats["publishers"] == {}
    assert stats["received"] == sent["by_type"]
    assert stats["not_processed"] == sent["by_type"]


def test_publishing_disabled_by_env_sends_nothing(servers: list[CliServer], tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    env = {"RAY_DASHBOARD_AGGREGATOR_AGENT_PUBLISH_EVENTS_TO_EXTERNAL_HTTP_SERVICE": "False"}
    sink, agg = start_pair(servers, out, env=env)
    sent = run_producer(agg.address, "--fixture", FIXTURE, "--count", "12")
    stats = agg.stop()
    assert stats["publishers"] == {} and stats["not_processed"] == sent["by_type"]
    assert sink.stop()["requests"] == 0
    assert read_jsonl(out) == []


def test_malformed_request_gets_invalid_argument_and_the_server_goes_on(servers: list[CliServer]) -> None:
    agg = start(servers, "aggregator")
    with grpc.insecure_channel(agg.address) as channel:
        raw = channel.unary_unary("/ray.rpc.events.EventAggregatorService/AddEvents")
        with pytest.raises(grpc.RpcError) as info:
            raw(b"\x0a\x05\xff", timeout=30)  # events_data claims 5 bytes, has 1
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "malformed AddEventsRequest" in (info.value.details() or "")
        stub = svc_grpc.EventAggregatorServiceStub(channel)
        assert stub.AddEvents(svc.AddEventsRequest(), timeout=30) == svc.AddEventsReply()
    sent = run_producer(agg.address, "--fixture", FIXTURE, "--count", "5")
    stats = agg.stop()
    assert stats["rejected_requests"] == {"malformed": 1}
    assert stats["received_total"] == sent["sent"]


def test_calls_during_shutdown_get_unavailable() -> None:
    async def body() -> None:
        service = AggregatorService(AggregatorConfig(export_addr="http://127.0.0.1:9/"))
        port = await service.start()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = svc_grpc.EventAggregatorServiceStub(channel)
            await stub.AddEvents(svc.AddEventsRequest(), timeout=30)
            service.receiver.begin_shutdown()
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.AddEvents(svc.AddEventsRequest(), timeout=30)
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "shutting down" in (info.value.details() or "")
        await service.shutdown()
        assert service.stats()["rejected_requests"] == {"shutting_down": 1}

    asyncio.run(body())


@pytest.mark.parametrize(
    ("args", "env", "needle"),
    [
        (["--export-addr", "ftp://example"], {}, "http:// or https://"),
        (["--exposable-event-types", "NOT_A_TYPE"], {}, "unknown event type 'NOT_A_TYPE'"),
        (["--max-buffer-size", "0"], {}, "MAX_EVENT_BUFFER_SIZE must be > 0"),
        ([], {"RAY_DASHBOARD_AGGREGATOR_AGENT_MAX_EVENT_SEND_BATCH_SIZE": "lots"}, "expected an integer"),
        (["--log-level", "LOUD"], {}, "--log-level 'LOUD'"),
    ],
)
def test_bad_configuration_exits_2_with_a_message(args: list[str], env: dict[str, str], needle: str) -> None:
    result = refused_by_cli("aggregator", *args, env=env)
    assert needle in result.stderr
    assert result.stdout == ""
