"""The fault suite: real processes, real failures, and a count of every event.

Each test sends events with known ids and checks, at the sink, that every acknowledged event
arrived (at least once; exactly once after de-duplicating by eventId), or that the aggregator's
own counters say where each missing one went.
"""

from __future__ import annotations

import base64
import os
import re
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import grpc
import pytest
import requests
from helpers.agg_procs import (
    FIXTURE,
    TASK_TYPES,
    CliServer,
    free_port,
    metric_total,
    read_jsonl,
    run_producer,
    start,
    start_aggregator,
    wait_for_lines,
    wait_until,
)

from ray_otel_events.config import RecorderConfig
from ray_otel_events.events import ids
from ray_otel_events.events.builders import EventFactory, python_function
from ray_otel_events.producer import RayEventRecorder
from ray_otel_events.protobuf import events_event_aggregator_service_pb2 as svc
from ray_otel_events.protobuf import events_event_aggregator_service_pb2_grpc as svc_grpc
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent


def sink_ids(path: Path) -> list[str]:
    return [event["eventId"] for event in read_jsonl(path)]


def wait_for_ids(path: Path, wanted: set[str], timeout_s: float = 60.0) -> set[str]:
    deadline = time.monotonic() + timeout_s
    while True:
        got = set(sink_ids(path))
        if wanted <= got or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def total(per_type: dict[str, int]) -> int:
    return sum(per_type.values())


def test_sink_down_for_a_while_then_back(servers: list[CliServer], tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    port = free_port()
    metrics_port = free_port()
    agg = start(
        servers,
        "aggregator",
        "--export-addr",
        f"http://127.0.0.1:{port}/e",
        "--max-backoff",
        "0.2",
        "--metrics-port",
        str(metrics_port),
    )
    sent = run_producer(agg.address, "--fixture", FIXTURE, "--count", "200", "--types", TASK_TYPES)
    # several connection failures
    wait_until(
        lambda: metric_total(metrics_port, "ray_otel_events_publisher_failed_attempts_total") >= 3,
        "three failed attempts",
    )
    start(servers, "sink", "--out", str(out), "--port", str(port))
    got = wait_for_ids(out, set(sent["event_ids"]))
    assert set(sent["event_ids"]) <= got
    stats = agg.stop()
    publisher = stats["publishers"]["http_service"]
    assert publisher["failed_attempts"] >= 2 and total(publisher["published"]) == 200


@pytest.mark.parametrize(
    ("status", "retry_after", "delivered"),
    [("429", "1", True), ("503", "", True), ("500", "", False), ("400", "", False)],
)
def test_sink_status_codes(
    servers: list[CliServer], tmp_path: Path, status: str, retry_after: str, delivered: bool
) -> None:
    """429 (with Retry-After) and 503 are retried until delivered; 500 and 400 are refused for good,
    counted with their status, and the queue moves on."""
    out = tmp_path / "out.jsonl"
    # Retryable: the first batch fails twice, then goes. Not retryable: the first batch is refused.
    sink_args = ["--fail-first", "2" if delivered else "1", "--fail-status", status]
    if retry_after:
        sink_args += ["--retry-after", retry_after]
    sink = start(servers, "sink", "--out", str(out), *sink_args)
    agg, metrics = start_aggregator(servers, sink, "--send-interval", "0")
    first = run_producer(agg.address, "--fixture", FIXTURE, "--count", "30", "--types", TASK_TYPES)
    if delivered:
        assert set(first["event_ids"]) <= wait_for_ids(out, set(first["event_ids"]))
        if retry_after:  # both waits are the sink's Retry-After, not the publisher's shorter backoff
            waits = re.findall(r"send failed \(attempt \d+\), retrying in ([0-9.]+)s", agg.logged())
            assert [float(wait) for wait in waits] == [float(retry_after)] * 2, waits
    else:
        wait_until(
            lambda: f'status="{status}"' in requests.get(f"{metrics}/metrics", timeout=5).text,
            f"the refusal counted with status {status}",
        )
    second = run_producer(agg.address, "--fixture", FIXTURE, "--count", "10", "--types", TASK_TYPES)
    # Either way the next events go through (a refused batch does not block the queue).
    assert set(second["event_ids"]) <= wait_for_ids(out, set(second["event_ids"]))
    stats = agg.stop()
    publisher = stats["publishers"]["http_service"]
    if delivered:
        assert total(publisher["published"]) == 40 and total(publisher["rejected"]) == 0
        assert publisher["failed_attempts"] == 2
    else:
        refused = total(publisher["rejected"])
        assert refused > 0 and total(publisher["published"]) + refused == 40
        assert len(read_jsonl(out)) == 40 - refused
        assert publisher["failed_attempts"] == 1  # the refused batch was tried once, never again


def test_slow_sink_keeps_memory_bounded(servers: list[CliServer], tmp_path: Path) -> None:
    """A sink taking 0.5 s per POST: the buffer holds at most its bound, the excess is counted."""
    out = tmp_path / "out.jsonl"
    sink = start(servers, "sink", "--out", str(out), "--delay", "0.5")
    agg, metrics = start_aggregator(servers, sink, "--max-buffer-size", "300", "--max-batch-size", "100")
    peak = 0.0
    sent = 0
    for _ in range(4):
        sent += run_producer(agg.address, "--fixture", FIXTURE, "--count", "500", "--types", TASK_TYPES)[
            "sent"
        ]
        text = requests.get(f"{metrics}/metrics", timeout=5).text
        held = next(line for line in text.splitlines() if line.startswith("ray_otel_events_queue_events{"))
        peak = max(peak, float(held.rsplit(" ", 1)[1]))
    stats = agg.stop(timeout_s=90)
    publisher = stats["publishers"]["http_service"]
    assert peak <= 300
    assert total(publisher["evicted"]) > 0
    assert publisher["accounted_total"] == stats["received_total"] == sent == 2000
    assert len(read_jsonl(out)) == total(publisher["published"])


def _ids_of(path: Path) -> Counter[str]:
    return Counter(sink_ids(path))


def test_kill_9_of_the_aggregator_with_a_queue_dir_loses_nothing(
    servers: list[CliServer], tmp_path: Path
) -> None:
    out = tmp_path / "out.jsonl"
    queue = tmp_path / "queue"
    sink_port = free_port()
    slow = start(servers, "sink", "--out", str(out), "--port", str(sink_port), "--delay", "0.3")
    args = (
        "--export-addr",
        f"http://127.0.0.1:{sink_port}/e",
        "--queue-dir",
        str(queue),
        "--max-batch-size",
        "100",
        "--send-interval",
        "0",
    )
    agg = start(servers, "aggregator", *args)
    sent = run_producer(agg.address, "--fixture", FIXTURE, "--count", "2000", "--types", TASK_TYPES)
    # a batch delivered, the rest still queued (the sink takes 0.3 s a POST, 20 POSTs in all)
    wait_until(lambda: len(read_jsonl(out)) > 0, "a first delivered batch")
    agg.send_signal(signal.SIGKILL)
    agg.proc.wait(10)
    delivered_before = len(read_jsonl(out))
    assert 0 < delivered_before < 2000, "the kill must land mid-stream"
    slow.stop()
    sink = start(servers, "sink", "--out", str(out), "--port", str(sink_port))
    restarted = start(servers, "aggregator", *args)
    wanted = set(sent["event_ids"])
    got = wait_for_ids(out, wanted)
    stats = restarted.stop()
    sink.stop()
    seen = _ids_of(out)
    assert wanted <= got, f"{len(wanted - got)} acknowledged events lost"
    assert set(seen) == wanted  # nothing else arrived, and after de-dup by eventId: exactly once
    duplicates = sum(n - 1 for n in seen.values())
    assert duplicates <= 100 + 100  # at most the batches in flight at the kill are sent twice
    assert stats["durable_queue"]["replayed"] >= 2000 - delivered_before - duplicates
    assert stats["durable_queue"]["held_events"] == 0


def _produce_until_refused(address: str, acked: list[str], stop: threading.Event) -> None:
    """Send batches of 50 until the aggregator refuses; record the ids of acknowledged batches."""
    with grpc.insecure_channel(address) as channel:
        stub = svc_grpc.EventAggregatorServiceStub(channel)  # type: ignore[no-untyped-call]
        while not stop.is_set():
            request = svc.AddEventsRequest()
            batch = []
            for _ in range(50):
                event = RayEvent(event_id=os.urandom(28), event_type=RayEvent.TASK_DEFINITION_EVENT)
                event.task_definition_event.task_name = "under load"
                request.events_data.events.append(event)
                batch.append(base64.b64encode(event.event_id).decode())
            try:
                stub.AddEvents(request, timeout=10)
            except grpc.RpcError:
                return
            acked.extend(batch)


@pytest.mark.parametrize("durable", [False, True])
def test_sigterm_under_load_loses_nothing_accepted(
    servers: list[CliServer], tmp_path: Path, durable: bool
) -> None:
    out = tmp_path / "out.jsonl"
    sink = start(servers, "sink", "--out", str(out))
    extra = ("--queue-dir", str(tmp_path / "q")) if durable else ()
    agg = start(servers, "aggregator", "--export-addr", f"http://{sink.address}/e", *extra)
    acked: list[str] = []
    stop = threading.Event()
    producers = [
        threading.Thread(target=_produce_until_refused, args=(agg.address, acked, stop)) for _ in range(2)
    ]
    for thread in producers:
        thread.start()
    wait_until(lambda: len(acked) >= 3000, "3000 acknowledged events")
    stats = agg.stop()  # SIGTERM while both producers are still sending
    stop.set()
    for thread in producers:
        thread.join(30)
    sink.stop()
    got = set(sink_ids(out))
    assert len(acked) >= 3000
    missing = set(acked) - got
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged events lost"
    assert stats["received_total"] == len(acked) == total(stats["publishers"]["http_service"]["published"])


def test_queue_dir_full_drops_oldest_counted_and_keeps_serving(
    servers: list[CliServer], tmp_path: Path
) -> None:
    out = tmp_path / "out.jsonl"
    sink = start(servers, "sink", "--out", str(out), "--fail-first", "1000000", "--fail-status", "503")
    agg = start(
        servers,
        "aggregator",
        "--export-addr",
        f"http://{sink.address}/e",
        "--queue-dir",
        str(tmp_path / "q"),
        "--queue-max-bytes",
        "40000",
        "--max-backoff",
        "0.2",
        "--shutdown-flush-timeout",
        "1",
    )
    for _ in range(3):
        run_producer(agg.address, "--fixture", FIXTURE, "--count", "300", "--types", TASK_TYPES)
    stats = agg.stop(timeout_s=60)
    evicted = total(stats["publishers"]["http_service"]["evicted"])
    assert stats["received_total"] == 900
    assert evicted > 0
    assert stats["durable_queue"]["held_bytes"] <= 40000
    # What was not evicted is still on disk for the next start (the sink never took anything).
    assert stats["durable_queue"]["held_events"] == 900 - evicted


def test_corrupt_queue_file_is_moved_aside_and_the_aggregator_starts(
    servers: list[CliServer], tmp_path: Path
) -> None:
    queue = tmp_path / "q"
    queue.mkdir()
    (queue / "events.sqlite3").write_bytes(b"this is not a database" * 100)
    out = tmp_path / "out.jsonl"
    sink = start(servers, "sink", "--out", str(out))
    agg = start(servers, "aggregator", "--export-addr", f"http://{sink.address}/e", "--queue-dir", str(queue))
    sent = run_producer(agg.address, "--fixture", FIXTURE, "--count", "20", "--types", TASK_TYPES)
    assert set(sent["event_ids"]) <= wait_for_ids(out, set(sent["event_ids"]))
    stats = agg.stop()
    assert "corrupt" in stats["durable_queue"]["recovered_from"]
    assert list(queue.glob("events.sqlite3.corrupt-*"))
    assert "unreadable" in agg.stderr()


def test_damaged_queue_salvages_the_readable_rows(tmp_path: Path) -> None:
    """Rows written by a run, then the file's tail overwritten: the readable rows come back."""
    from ray_otel_events.durable.sqlite_queue import SqliteEventQueue

    queue = SqliteEventQueue.single(tmp_path, 10**9)
    wires = [os.urandom(3000) for _ in range(200)]
    queue.append(wires, [1] * 200)
    queue.close()
    path = tmp_path / "events.sqlite3"
    data = bytearray(path.read_bytes())
    data[len(data) // 2 :] = b"\x00garbage" * (len(data) // 2 // 8 + 1)
    path.write_bytes(bytes(data[: len(data)]))
    reopened = SqliteEventQueue.single(tmp_path, 10**9)
    assert reopened.database.recovered_from is not None
    stored = reopened.read_all()
    assert stored.wires, "nothing salvaged"
    assert stored.wires == wires[: len(stored.wires)]  # what came back is exact and in order
    reopened.close()


def test_producer_keeps_events_until_the_aggregator_is_up(servers: list[CliServer], tmp_path: Path) -> None:
    """Ray loses events emitted before its aggregator is ready; our recorder holds and resends them."""
    out = tmp_path / "out.jsonl"
    port = free_port()
    recorder = RayEventRecorder.to_aggregator(
        f"127.0.0.1:{port}", config=RecorderConfig(report_interval_ms=100, rpc_timeout_s=1.0)
    )
    recorder.start()
    factory = EventFactory(session_name="early")
    job = ids.job_id(7)
    for i in range(10):
        recorder.add(
            factory.task_definition(
                task_id=ids.new_task_id(job),
                job_id=job,
                name=f"early-{i}",
                function=python_function("m", "f"),
            )
        )
    # several export attempts fail: nothing listens yet
    wait_until(lambda: (recorder.stats()["failed_rpcs"] or 0) >= 3, "three failed RPCs")
    assert recorder.pending() >= 10
    sink = start(servers, "sink", "--out", str(out))
    start(servers, "aggregator", "--grpc-port", str(port), "--export-addr", f"http://{sink.address}/e")
    events = wait_for_lines(out, 10)
    assert recorder.stop(timeout_s=10)
    names = sorted(e["taskDefinitionEvent"]["taskName"] for e in events)
    assert names == sorted(f"early-{i}" for i in range(10))


def test_retried_batch_is_not_counted_twice(servers: list[CliServer], tmp_path: Path) -> None:
    """Ray's producers resend a whole batch when a reply is lost: the eventId window drops the copy."""
    out = tmp_path / "out.jsonl"
    sink = start(servers, "sink", "--out", str(out))
    agg = start(servers, "aggregator", "--export-addr", f"http://{sink.address}/e")
    request = svc.AddEventsRequest()
    for i in range(5):
        event = RayEvent(event_id=bytes([i]) * 28, event_type=RayEvent.TASK_DEFINITION_EVENT)
        event.task_definition_event.task_name = "retried"  # a payload: one without is kept raw
        request.events_data.events.append(event)
    with grpc.insecure_channel(agg.address) as channel:
        stub = svc_grpc.EventAggregatorServiceStub(channel)  # type: ignore[no-untyped-call]
        stub.AddEvents(request, timeout=10)
        stub.AddEvents(request, timeout=10)  # the retry
    wait_for_lines(out, 5)
    stats = agg.stop()
    assert stats["received_total"] == 5
    assert stats["duplicates"] == {"TASK_DEFINITION_EVENT": 5}
    assert len(read_jsonl(out)) == 5
