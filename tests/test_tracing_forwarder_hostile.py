"""A spool line that cannot be turned into OTLP (spool files are written by other processes) is
dropped, logged once per reason and counted, and the lines after it are still sent: by a real
forwarder process, on the compiled path and on its Python twin."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import orjson
import pytest
from helpers.agg_procs import check_ended_well
from helpers.otlp_receiver import RecordingReceiver, serve_receiver
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "spool"
# a Ray worker's spool: an actor's creation (its __init__ execution span) and normal tasks
ACTOR_WORKER = FIXTURES / "ray" / "26818.4433a69a.000001.spool"


def _poisoned(line: bytes) -> list[bytes]:
    """Ways a span line from another process can be odd: values of the right JSON type that no
    RayEvent or span can hold, values of the wrong type, ids that are no ids, broken text."""
    return [
        line.replace(b'"ray.pid":"', b'"ray.pid":"-'),  # a negative pid (uint32 in the event)
        line.replace(b'"ray.pid":"', b'"ray.pid":"99999999999999999999'),
        line.replace(b'"ray.job_id":"', b'"ray.job_id":"zz'),
        line.replace(b'"ray.actor_id":"', b'"ray.actor_id":"x'),
        line.replace(b'"ray.task_id":"', b'"ray.task_id":"-'),
        line.replace(b'"ray.pid":"', b'"ray.pid":["', 1).replace(b'","ray.job_id"', b'"],"ray.job_id"', 1),
        line.replace(b",4,", b',"4",', 1),  # the kind as a string
        line.replace(b",4,", b",99999999999999999999999,", 1),
        line.replace(b'["E",', b'["E",' + b"1" * 400 + b",", 1),
        line.replace(b"A.__init__", "A.\udcff__init__".encode("utf-8", "surrogatepass"), 1),
        line.replace(b"A.__init__", b"A.\xff\xfe__init__", 1),
        line[: len(line) // 2],
        b'["E"]',
        b"[]",
        b"{}",
        b"null",
        b'["s",[1]]',
        b'["s",{"a":1}]',
        b'["S",1,2,3]',
        b'["E","l",1,2,3,1,"",0,false,0,1,2,0,"",{},[],[["zz",1,1,"",{},false]],"s","","",0,0,0]',
        b'["E","a",1,2,3,1,"",0,false,0,1,2,0,"",{"n":18446744073709551616},[],[],"s","","",0,0,0]',
        b'["E","t",1,2,3,1,"",0,false,0,1,2,0,"",{},[],[],"s",[],"",0,0,0]',
        # log record lines (`spool.log_record_line`)
        b'["L"]',
        b'["L",1,2,9,"INFO","x",[],0,0,0,0,"s","","",0,null]',  # attributes no object
        b'["L",-1,2,9,"INFO","x",{},0,0,0,0,"s","","",0,null]',  # a time before the epoch
        b'["L",1,2,9,"INFO","x",{},0,0,-5,0,"s","","",0,null]',  # a span id that is no id
        b'["L",1,2,9,7,"x",{},0,0,0,0,"s","","",0,null]',  # severity text no string
        b'["L",1,2,9,"INFO","x",{},0,0,0,0,["s"],"","",0,null]',  # scope name no string
    ]


def _spool(folder: Path, bad: list[bytes]) -> Counter[str]:
    """The fixture's lines, each bad line first; the names of the good lines' spans."""
    header, body = ACTOR_WORKER.read_bytes().split(b"\n", 1)
    lines = body.splitlines()
    folder.mkdir(parents=True)
    (folder / ACTOR_WORKER.name).write_bytes(b"\n".join([header, *bad, *lines]) + b"\n")
    return Counter(str(orjson.loads(line)[1]) for line in lines if line.startswith(b'["E"'))


def _run_forwarder(folder: Path, endpoint: str, pure_python: bool) -> int:
    """A real forwarder on `folder` until it exits by itself (all sent, no writer left)."""
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "RAY_OTEL_EVENTS_FORWARDER_IDLE_SECONDS": "0.2",
        "RAY_OTEL_EVENTS_FORWARDER_RETRY_SECONDS": "2",
        "RAY_OTEL_EVENTS_FORWARDER_NICE": "0",
        "RAY_OTEL_EVENTS_PURE_PYTHON": "1" if pure_python else "0",
    }
    with open(folder / "forwarder.log", "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "ray_otel_events.tracing.forwarder", str(folder)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            pytest.fail("the forwarder did not finish its spool: a line blocks it")
    check_ended_well(process, (folder / "forwarder.log").read_text(errors="replace"), ended_by_test=False)
    return process.returncode


@pytest.mark.parametrize("pure_python", [False, True], ids=["compiled", "python"])
def test_a_poisoned_line_is_dropped_counted_and_the_rest_sent(tmp_path: Path, pure_python: bool) -> None:
    actor_line = next(
        line
        for line in ACTOR_WORKER.read_bytes().splitlines()
        if line.startswith(b'["E","A.__init__ ray.remote_worker"')
    )
    bad = [line for line in _poisoned(actor_line) if line != actor_line]
    folder = tmp_path / "spool" / "dest"
    good_names = _spool(folder, bad)
    receiver = RecordingReceiver()
    with serve_receiver(receiver) as endpoint:
        assert _run_forwarder(folder, endpoint, pure_python) == 0
    assert not list(folder.glob("*.spool")), "the spool is not left blocked"
    sent = [
        ExportTraceServiceRequest.FromString(body)
        for path, (_, body) in zip(receiver.paths, receiver.requests, strict=True)
        if path == "/v1/traces"
    ]
    names = [
        s.name for request in sent for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans
    ]
    assert not good_names - Counter(names), "every good line's span is sent"
    counters = orjson.loads((folder / "forwarder.stats.json").read_bytes())["counters"]
    dropped = {str(s["labels"]["reason"]): s["value"] for s in counters.get("dropped_lines", [])}
    assert counters["exported_records"][0]["value"] > 0  # the good lines' events, too
    assert dropped.get("invalid", 0) >= 2  # the pids no RayEvent holds
    assert dropped.get("unreadable", 0) >= len(bad) - 6  # a few odd values still make a span
    log = (folder / "forwarder.log").read_text()
    assert "Traceback" not in log and "a sweep failed" not in log
    assert "reported once" in log
    assert log.count("reported once") <= 4  # once per reason, not once per line
