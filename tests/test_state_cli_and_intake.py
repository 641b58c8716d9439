"""Our own state commands and `serve`'s OTLP intake.

`list/get/summary/timeline/logs` answer the same from a store file (no server) as from a running
`serve`; bad input is a one-line message and a non-zero exit. OTLP from the real SDK exporters
(spans, plain log records, and records carrying RayEvents) lands in the store: RayEvents as state,
the other records as log lines tied to their task through the span they were written in. The
SQL-side filters give the same rows as Ray's filter rule applied to every row.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from google.protobuf import json_format
from helpers.agg_procs import FIXTURE, CliServer, clean_env, cli_in_process, start
from helpers.otlp_logs import emit_ray_events
from helpers.postgres import serve_store_args
from multidict import MultiDict
from opentelemetry._logs import SeverityNumber
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanContext

from ray_otel_events.events.builders import EventFactory, TaskStatus, python_function
from ray_otel_events.otel.task_spans import SpanEvent
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent
from ray_otel_events.store import state_query
from ray_otel_events.store.location import open_store
from ray_otel_events.store.sqlite_store import EventStore
from ray_otel_events.store.state_merge import TASKS, field_value
from ray_otel_events.store.views import StoreViews
from ray_otel_events.tracing.task_events import EventLogEmitter

EVENTS: list[dict[str, Any]] = json.loads(Path(FIXTURE).read_text())
FLAKY = "e0dc174c83599034ffffffffffffffffffffffff01000000"  # attempt 0 failed, attempt 1 pending


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ray_otel_events", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(env),
    )


@pytest.fixture
def store_file(store_location: str | Path) -> str | Path:
    """The fixture's events in a store, on each backend."""
    store = open_store(store_location)
    store.ingest(EVENTS)
    store.close()
    return store_location


def test_commands_answer_alike_from_the_file_and_the_server(
    servers: list[CliServer], store_file: str | Path, tmp_path: Path
) -> None:
    server = start(servers, "serve", *serve_store_args(store_file, tmp_path))
    by_file = ["--store", str(store_file)]
    by_server = ["--address", f"http://{server.address}"]
    # The answers are read in this process (an interpreter start each cost half a second); the
    # refusals and the environment's part further down are real processes.
    listed = [cli_in_process("list", "tasks", *source, "--format", "json") for source in (by_file, by_server)]
    assert all(p.returncode == 0 for p in listed), [p.stderr for p in listed]
    assert json.loads(listed[0].stdout) == json.loads(listed[1].stdout)
    assert len(json.loads(listed[0].stdout)) == 8  # 9 attempts stored, the driver's left out as Ray does

    failed = cli_in_process(
        "list", "tasks", *by_file, "--filter", "state=FAILED", "--filter", "type!=ACTOR_TASK"
    )
    assert failed.returncode == 0 and "2 of 2 matching" in failed.stdout and "flaky" in failed.stdout
    got = cli_in_process("get", "tasks", FLAKY, *by_server)
    attempts = json.loads(got.stdout)
    assert [(a["attempt_number"], a["state"]) for a in attempts] == [(0, "FAILED"), (1, "PENDING_ARGS_AVAIL")]
    assert (
        attempts[0]["error_type"] == "TASK_EXECUTION_EXCEPTION"
        and "first attempt" in attempts[0]["error_message"]
    )
    summary = cli_in_process("summary", "tasks", *by_file)
    assert summary.returncode == 0 and "flaky" in summary.stdout and "FAILED: 1" in summary.stdout

    out = tmp_path / "timeline.json"
    timeline = cli_in_process("timeline", "--out", str(out), *by_server)
    assert timeline.returncode == 0, timeline.stderr
    trace_events = json.loads(out.read_text())
    slices = [e for e in trace_events if e["ph"] == "X" and e["cat"] == "task"]
    assert slices and all(e["dur"] >= 0 and e["ts"] > 0 for e in slices)
    assert {e["name"] for e in trace_events if e["ph"] == "M"} == {"process_name", "thread_name"}
    assert [e for e in trace_events if e["ph"] == "X" and e["cat"] != "task"]  # profile events inside

    for args, code, message in (
        (("logs", "ab" * 24, *by_file), 1, "no task"),
        (("list", "tasks", *by_file, "--filter", "bogus=1"), 1, "Given filter column bogus is not supported"),
        (("list", "tasks", *by_file, "--filter", "state"), 2, "expected KEY=VALUE"),
        (("list", "tasks", "--store", str(tmp_path / "none.sqlite3")), 1, "no store at"),
        (("list", "tasks", "--address", "http://127.0.0.1:9"), 1, "cannot reach"),
        (("list", "tasks", "--address", "127.0.0.1:99999"), 2, "--address='127.0.0.1:99999'"),
    ):
        proc = _cli(*args)
        assert proc.returncode == code and message in proc.stderr and "Traceback" not in proc.stderr, (
            proc.stderr
        )

    # RAY_OTEL_EVENTS_ADDRESS stands for --address; an explicit --store wins over it.
    by_env = _cli("list", "tasks", "--format", "json", env={"RAY_OTEL_EVENTS_ADDRESS": server.address})
    assert by_env.returncode == 0 and json.loads(by_env.stdout) == json.loads(listed[0].stdout), by_env.stderr
    unreachable = {"RAY_OTEL_EVENTS_ADDRESS": "http://127.0.0.1:9"}
    assert _cli("list", "tasks", "--format", "json", *by_file, env=unreachable).stdout == listed[0].stdout
    assert "cannot reach http://127.0.0.1:9" in _cli("list", "tasks", env=unreachable).stderr
    bad = _cli("sessions", env={"RAY_OTEL_EVENTS_ADDRESS": "ftp://127.0.0.1:9"})
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "RAY_OTEL_EVENTS_ADDRESS='ftp://127.0.0.1:9': expected http://HOST:PORT" in bad.stderr


def test_sql_filters_agree_with_rays_rule_on_every_row(store_file: str | Path) -> None:
    store = open_store(store_file)
    every = store.select(TASKS, limit=10**6).rows
    views = StoreViews(store)
    cases = [
        ("state", "=", "failed"),  # Ray upper-cases state values
        ("state", "!=", "FAILED"),
        ("job_id", "=", "01000000"),
        ("name", "=", "flaky"),
        ("func_or_class_name", "!=", "Counter.inc"),
        ("attempt_number", "=", "1"),
        ("error_type", "=", "none"),  # no error: matches a missing value
        ("worker_pid", "=", "9317"),  # no column: the Python rule
        ("task_id", "=", FLAKY.upper()),
    ]
    for key, predicate, value in cases:
        params = MultiDict(
            [
                ("limit", "1000"),
                ("filter_keys", key),
                ("filter_predicates", predicate),
                ("filter_values", value),
            ]
        )
        status, body = views.answer("/api/v0/tasks", params)
        assert status == 200
        got = {(r["task_id"], r["attempt_number"]) for r in body["data"]["result"]["result"]}
        expected = {
            (r["task_id"], r["attempt_number"])
            for r in every
            if field_value(TASKS, r, "type") != "DRIVER_TASK"
            and state_query._matches(field_value(TASKS, r, key), value) == (predicate == "=")
        }
        assert got == expected and body["data"]["result"]["num_filtered"] == len(expected), (key, value)
    store.close()


def test_otlp_from_the_sdk_exporters_becomes_state_spans_and_task_logs(
    servers: list[CliServer], tmp_path: Path, store_location: str | Path
) -> None:
    server = start(servers, "serve", *serve_store_args(store_location, tmp_path))
    base = f"http://{server.address}"
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{base}/v1/traces")))
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(
        SimpleLogRecordProcessor(OTLPLogExporter(endpoint=f"{base}/v1/logs"))
    )
    logger = logger_provider.get_logger("test")

    emit_ray_events(logger, (json_format.ParseDict(item, RayEvent()) for item in EVENTS))
    tracer = tracer_provider.get_tracer("test")
    with tracer.start_as_current_span("flaky ray.remote_worker", attributes={"ray.task_id": FLAKY}) as span:
        logger.emit(
            body="a line from inside the task", severity_number=SeverityNumber.WARN, severity_text="WARNING"
        )
        trace_id = format(span.get_span_context().trace_id, "032x")
    logger.emit(body="a line outside any task")
    tracer_provider.shutdown()
    logger_provider.shutdown()

    def task() -> dict[str, Any]:
        answer: dict[str, Any] = requests.get(f"{base}/api/ui/tasks/{FLAKY}", timeout=10).json()
        return answer

    deadline = time.monotonic() + 20
    while not (task().get("logs") and task().get("spans")) and time.monotonic() < deadline:
        time.sleep(0.2)
    detail = task()
    assert [a["state"] for a in detail["attempts"]] == ["FAILED", "PENDING_ARGS_AVAIL"]  # RayEvents as state
    assert [line["body"] for line in detail["logs"]] == ["a line from inside the task"]
    assert detail["logs"][0]["severity"] == "WARNING" and detail["trace_id"] == trace_id
    assert detail["spans"][0]["name"] == "flaky ray.remote_worker"
    traces = requests.get(f"{base}/api/ui/traces", timeout=10).json()["traces"]
    assert [t["trace_id"] for t in traces] == [trace_id]
    stats = server.stop()
    assert stats["events_stored"] == len(EVENTS) and stats["spans"] == 1 and stats["log_lines"] == 2


def test_writes_are_checkpointed_off_the_write_path_and_on_close(tmp_path: Path) -> None:
    """The checkpointer copies the WAL into the file by itself a moment after writes; close leaves
    no log behind; an event id a row has folded is a duplicate after a reopen."""
    events = [item.get("event", item) for item in json.loads(Path(FIXTURE).read_text())]
    path = tmp_path / "s.sqlite3"
    store = EventStore(path)
    empty = path.stat().st_size
    first = store.ingest(events)
    assert first.stored == len(events) and store.ingest(events[:3]).duplicates == 3
    deadline = time.monotonic() + 30
    while path.stat().st_size == empty and time.monotonic() < deadline:
        time.sleep(0.05)
    assert path.stat().st_size > empty  # copied while the store stays open
    store.close()
    wal = Path(f"{path}-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    again = EventStore(path)
    assert again.ingest(events).duplicates == len(events)
    again.close()


def test_lifecycle_pieces_without_transitions_are_stored(store_location: str | Path) -> None:
    """A job or worker lifecycle piece may carry no transition yet: its row is kept, with no state."""
    events = [item.get("event", item) for item in json.loads(Path(FIXTURE).read_text())]
    store = open_store(store_location)
    pieces = []
    for kind, body in (
        ("DRIVER_JOB_LIFECYCLE_EVENT", "driverJobLifecycleEvent"),
        ("WORKER_LIFECYCLE_EVENT", "workerLifecycleEvent"),
    ):
        source = next(e for e in events if e["eventType"] == kind)
        pieces.append(
            dict(source, eventId=f"empty-{kind}", **{body: dict(source[body], stateTransitions=[])})
        )
    result = store.ingest(pieces)
    assert result.invalid == [] and result.stored == 2
    assert store.size()["state_rows"] == 2
    store.close()


def test_our_hooks_event_records_never_change_the_state_rays_events_give(
    servers: list[CliServer], tmp_path: Path
) -> None:
    """Ray's events POSTed, and records from the hook's own sink (`EventLogEmitter`, as the hooks
    make them) sent over OTLP to the same `serve`: the hook says the flaky task's second attempt
    finished, under the same session, a minute later. Ray's state stands, the hook's records are
    counted, not rejected (the forwarder would report each batch as refused)."""
    server = start(servers, "serve", "--store", str(tmp_path / "events.sqlite3"))
    base = f"http://{server.address}"
    assert requests.post(f"{base}/v1/ray-events", json=EVENTS, timeout=10).status_code == 200
    before = requests.get(f"{base}/api/v0/tasks?detail=1&limit=100", timeout=10).json()["data"]["result"]
    session = EVENTS[0]["sessionName"]
    factory = EventFactory(session_name=session, clock_ns=lambda: 2_000_000_000_000_000_000)
    flaky, job = bytes.fromhex(FLAKY), b"\x01\0\0\0"
    said = [
        factory.task_definition(task_id=flaky, job_id=job, name="other", function=python_function("m", "f")),
        factory.task_lifecycle(task_id=flaky, job_id=job, state=TaskStatus.FINISHED, attempt=1),
        factory.task_definition(  # a task id the hook derived: a task Ray never had
            task_id=b"\x07" * 8 + flaky[8:], job_id=job, name="derived", function=python_function("m", "g")
        ),
    ]
    logs = LoggerProvider()
    logs.add_log_record_processor(SimpleLogRecordProcessor(OTLPLogExporter(endpoint=f"{base}/v1/logs")))
    context = SpanContext(trace_id=1, span_id=2, is_remote=False)
    EventLogEmitter(logs.get_logger("test")).consume([SpanEvent(context, event=e) for e in said], False)
    logs.shutdown()
    after = requests.get(f"{base}/api/v0/tasks?detail=1&limit=100", timeout=10).json()["data"]["result"]
    assert after == before
    sessions = requests.get(f"{base}/api/sessions", timeout=10).json()["sessions"]
    assert [s["name"] for s in sessions] == [session]
    stats = server.stop()
    assert stats["hook_events"] == len(said) and stats["rejected_events"] == 0
