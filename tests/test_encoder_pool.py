"""JSON encoding in worker processes: same bytes as on the loop, and Ctrl-C does not break the flush."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from google.protobuf import json_format
from helpers.agg_procs import check_ended_well, clean_env, read_jsonl, run_producer

from ray_otel_events.encoding.process_pool import EncoderProcessPool
from ray_otel_events.encoding.ray_json import RayEventJsonEncoder
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent

FIXTURE = Path(__file__).parent / "fixtures" / "aggregator-ray-2.60" / "events.json"


def _wires() -> list[bytes]:
    wires = []
    for item in json.loads(FIXTURE.read_text()):
        event = RayEvent()
        json_format.ParseDict(item.get("event", item), event)
        wires.append(event.SerializeToString())
    return [*wires, b"\xff not a RayEvent"]


def test_pool_output_equals_encoding_on_the_loop() -> None:
    wires = _wires()
    for preserve in (False, True):
        pool = EncoderProcessPool(preserve, processes=2)
        try:
            pool.warm_up()
            remote = asyncio.run(pool.try_encode_serialized(wires))
        finally:
            pool.close()
        local = RayEventJsonEncoder(preserve_proto_field_name=preserve).try_encode_serialized(wires)
        # Map entry order follows each process's upb hash tables (json_format's too): compare values.
        assert json.loads(remote.json) == json.loads(local.json)
        assert (remote.encoded, remote.failures) == (local.encoded, local.failures)
        assert [f.index for f in remote.failures] == [len(wires) - 1]  # the broken one, reported


def test_ctrl_c_to_the_whole_process_group_still_flushes(tmp_path: Path) -> None:
    """A terminal's Ctrl-C reaches the aggregator and its workers; workers must keep encoding."""
    out = tmp_path / "events.jsonl"
    sink_log, agg_log = tmp_path / "sink.stderr", tmp_path / "aggregator.stderr"
    sink = subprocess.Popen(
        [sys.executable, "-m", "ray_otel_events", "sink", "--port", "0", "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=sink_log.open("w"),
        text=True,
        env=clean_env(),
    )
    agg = None
    try:
        assert sink.stdout is not None
        sink_addr = sink.stdout.readline().strip().split("=", 1)[1]
        agg = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ray_otel_events",
                "aggregator",
                "--log-format",
                "json",
                "--grpc-port",
                "0",
                "--export-addr",
                f"http://{sink_addr}/e",
                "--send-interval",
                "600",
                "--max-batch-size",
                "100000",
                "--exposable-event-types",
                "ALL",
                "--encoder-processes",
                "2",
            ],
            stdout=subprocess.PIPE,
            stderr=agg_log.open("w"),
            text=True,
            env=clean_env(),
            start_new_session=True,  # its own process group, as under a terminal
        )
        assert agg.stdout is not None
        agg_addr = agg.stdout.readline().strip().split("=", 1)[1]
        sent = run_producer(agg_addr, "--fixture", str(FIXTURE), "--count", "300", "--batch", "100")
        os.killpg(agg.pid, signal.SIGINT)
        stats_line = agg.stdout.readline()
        assert agg.wait(60) == 0
        stats = json.loads(stats_line.removeprefix("stats "))
        assert stats["received_total"] == sent["sent"] == 300
        assert sum(stats["publishers"]["http_service"]["published"].values()) == 300
    finally:
        if agg is not None and agg.poll() is None:
            agg.kill()
        sink.send_signal(signal.SIGTERM)
        sink.wait(30)
    assert len(read_jsonl(out)) == 300
    check_ended_well(agg, agg_log.read_text(), ended_by_test=False)
    check_ended_well(sink, sink_log.read_text(), ended_by_test=False)
