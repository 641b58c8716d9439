"""Recorder processes -> aggregator process (gRPC) -> sink process (HTTP): every event accounted for."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.agg_procs import CliServer, clean_env, read_jsonl, wait_for_lines

PRODUCER = Path(__file__).parent / "helpers" / "record_events.py"


def start_producer(address: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(PRODUCER), address, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )


def producer_stats(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    stats: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return stats


@pytest.fixture
def sink(tmp_path: Path) -> Iterator[tuple[CliServer, Path]]:
    out = tmp_path / "sink.jsonl"
    server = CliServer("sink", "--port", "0", "--out", str(out))
    yield server, out
    server.close()


def test_recorders_to_sink_every_event_delivered_or_counted(sink: tuple[CliServer, Path]) -> None:
    sink_server, out = sink
    aggregator = CliServer(
        "aggregator", "--grpc-port", "0", "--export-addr", f"http://{sink_server.address}/e"
    )
    try:
        # Three producer processes; one has a tiny buffer and no timer, so it must drop (and count).
        procs = [
            start_producer(aggregator.address, "--tasks", "300"),
            start_producer(aggregator.address, "--tasks", "300", "--start-first", "--interval-ms", "20"),
            start_producer(
                aggregator.address, "--tasks", "100", "--max-queued", "50", "--interval-ms", "60000"
            ),
        ]
        producers = [producer_stats(p) for p in procs]
        agg = aggregator.stop()
    finally:
        aggregator.close()
    delivered = read_jsonl(out)

    for stats in producers:
        assert stats["pending"] == 0
        assert stats["recorded"] == stats["sent_raw"] + stats["dropped"]
    assert producers[2]["dropped"] > 0 and producers[2]["dropped_by_source"] == {
        "CORE_WORKER": producers[2]["dropped"]
    }
    sent = sum(s["sent"] for s in producers)
    assert agg["received_total"] == sent
    publisher = next(iter(agg["publishers"].values()))
    assert publisher["accounted_total"] == sent
    assert sum(publisher["published"].values()) == len(delivered)
    assert len({e["eventId"] for e in delivered}) == len(delivered)
    # 600 tasks fully delivered: one definition and one merged lifecycle with 3 transitions each.
    lifecycles = [e for e in delivered if e["eventType"] == "TASK_LIFECYCLE_EVENT"]
    full = [e for e in lifecycles if len(e["taskLifecycleEvent"]["stateTransitions"]) == 3]
    assert len(full) >= 600


def test_events_recorded_while_the_aggregator_is_down_arrive_once_it_is_up(
    sink: tuple[CliServer, Path],
) -> None:
    """Ray's recorder drops a batch whose RPC fails; ours keeps it and sends it later."""
    sink_server, out = sink
    with socket.socket() as listener:  # where the aggregator will listen, answering nothing yet
        listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        listener.listen()
        listener.settimeout(60)
        producer = start_producer(
            f"127.0.0.1:{port}", "--tasks", "50", "--start-first", "--interval-ms", "50"
        )
        connection, _ = listener.accept()  # the recorder's first export: closed unanswered, it fails
        connection.close()
    aggregator = CliServer(
        "aggregator", "--grpc-port", str(port), "--export-addr", f"http://{sink_server.address}/e"
    )
    try:
        stats = producer_stats(producer)
        delivered = wait_for_lines(out, stats["sent"])
        aggregator.stop()
    finally:
        aggregator.close()
    assert stats["failed_rpcs"] >= 1 and stats["requeued"] >= 1
    assert stats["dropped"] == 0 and stats["sent_raw"] == stats["recorded"] == 200
    assert len(delivered) == stats["sent"] == 100  # 50 definitions + 50 merged lifecycles
