"""The forwarder's compiled pass over span lines (native/_spool_lines.c) against its Python twin
(`Forwarder._line`): the same requests (spans and event records, byte for byte) and counters on
spool files from real Ray and pool runs (tests/fixtures/spool), on many tasks of Ray's span shapes,
on lines mutated to everything the compiled pass must hand back, and on log record lines between
span lines (Python's only: the compiled pass hands each back)."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import TraceFlags

from ray_otel_events.config import SpoolConfig
from ray_otel_events.events.builders import EventFactory
from ray_otel_events.otel import otlp_wire
from ray_otel_events.otel.task_spans import TaskSpanEvents, derive_task_id
from ray_otel_events.tracing import forwarder
from ray_otel_events.tracing.forwarder import Forwarder, _File, _Writer
from ray_otel_events.tracing.spool import log_record_line
from tests.helpers.pure_python import needs_compiled

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "spool"
NOW = 1_795_783_529_976_631_930

compiled = needs_compiled(forwarder._spool_lines, "the compiled pass")


def requests_of(
    data: bytes, *, use_compiled: bool, event_logs: bool = True
) -> tuple[list[tuple[str, bytes, int, str]], Any]:
    """The requests one chunk of lines (`data`, whole lines) makes, and the counters, on one path."""
    saved = forwarder._compiled
    forwarder._compiled = use_compiled
    try:
        with tempfile.TemporaryDirectory() as folder:
            fw = Forwarder(folder, SpoolConfig(root=folder), {}, event_logs=event_logs, clock=lambda: NOW)
            resource = Resource({"service.name": "spool-lines"})
            writer = _Writer(
                resource,
                otlp_wire.attributes(dict(resource.attributes), b"\x0a"),
                TaskSpanEvents(EventFactory(session_name="s")),
            )
            state = _File(os.path.join(folder, "x.spool"), -1, writer, 0)
            fw._make_requests(state, data)  # never raises: a line no span or event holds is dropped
            return state.pending, fw.counters.snapshot()
    finally:
        forwarder._compiled = saved


def fixture_chunks() -> Iterator[bytes]:
    """Each fixture spool file's lines after its header."""
    for path in sorted(FIXTURES.glob("*/*.spool")):
        yield path.read_bytes().split(b"\n", 1)[1]


def ray_tasks(n: int) -> bytes:
    """n normal tasks as Ray's wrappers and our hook write them in one process: the submission,
    the execution's start line and its end, every few tasks a start reference or a nested one."""
    lines = []
    attrs = {
        "ray.remote": "function",
        "ray.function": "__main__.noop",
        "ray.pid": "4242",
        "ray.job_id": "01000000",
        "ray.node_id": "ab" * 28,
        "ray.worker_id": "cd" * 28,
    }
    scope = ["ray.util.tracing.tracing_helper", "", ""]
    for i in range(n):
        digest = hashlib.sha256(i.to_bytes(4, "big")).digest()
        high, low, submit, execute = (int.from_bytes(digest[k : k + 8], "big") for k in range(0, 32, 8))
        t0 = 1_795_783_529_000_000_000 + i * 1_234_567 + (i % 7) * 1000
        lines.append(
            [
                "E",
                "__main__.noop ray.remote",
                high,
                low,
                submit,
                1,
                "",
                0,
                False,
                3,
                t0,
                t0 + 5000,
                0,
                "",
                attrs,
                [],
                [],
                *scope,
                0,
                0,
                0,
            ]
        )
        running = {**attrs, "ray.task_id": digest[:12].hex() + "ff" * 8 + "01000000"}
        end = [
            "E",
            "__main__.noop ray.remote_worker",
            high,
            low,
            execute,
            1,
            "",
            submit,
            True,
            4,
            t0 + 9000,
            t0 + 19000 + i,
            i % 2,
            "",
            running,
            [],
            [],
            *scope,
            0,
            0,
            0,
        ]
        if i % 2 == 0:  # the traced pool's execution spans carry their states as events
            end[15] = [
                ["RUNNING", t0 + 9500, {"ray.state": "RUNNING"}],
                ["FINISHED", t0 + 18000, {"ray.state": "FINISHED", "n": i, "ok": True}],
                ["", 0, {}],
            ]
        if i % 3 == 0:
            lines.append(["s", execute])
        else:
            lines.append(["S", *end[1:11], None, 0, "", running, [], [], *scope, 0, 0, 0])
        if i % 5 == 0:  # a task submitted from inside this one
            lines.append(
                [
                    "E",
                    "__main__.inner ray.remote",
                    high,
                    low,
                    execute ^ 1,
                    1,
                    "",
                    execute,
                    False,
                    3,
                    t0 + 10000,
                    t0 + 11000,
                    0,
                    "",
                    {**running, "ray.function": "inner"},
                    [],
                    [],
                    *scope,
                    0,
                    0,
                    0,
                ]
            )
        lines.append(end)
        if i % 4 == 0:
            lines.append(
                [
                    "E",
                    "work",
                    high,
                    low,
                    execute ^ 2,
                    1,
                    "",
                    execute,
                    False,
                    0,
                    t0,
                    t0 + 1,
                    0,
                    "",
                    {"n": i, "ok": True, "none": None},
                    [],
                    [],
                    "app",
                    "1.0",
                    "",
                    0,
                    0,
                    0,
                ]
            )
    return b"".join(orjson.dumps(line, option=orjson.OPT_APPEND_NEWLINE) for line in lines)


def assert_same(data: bytes, event_logs: bool = True) -> None:
    assert requests_of(data, use_compiled=True, event_logs=event_logs) == requests_of(
        data, use_compiled=False, event_logs=event_logs
    )


@compiled
@pytest.mark.parametrize("event_logs", [True, False])
def test_the_fixture_spools_make_the_same_requests_both_ways(event_logs: bool) -> None:
    chunks = list(fixture_chunks())
    assert len(chunks) >= 6  # Ray's driver and workers, the pool's submitter and workers
    for data in chunks:
        pending, _ = requests_of(data, use_compiled=True, event_logs=event_logs)
        assert pending  # spans at least
        assert_same(data, event_logs)


@compiled
def test_many_tasks_make_the_same_requests_and_take_the_compiled_path() -> None:
    data = ray_tasks(300)
    assert_same(data)
    pending, _ = requests_of(data, use_compiled=True)
    assert [signal for signal, *_ in pending] == ["traces", "logs"]
    handed: list[bytes] = []
    saved = Forwarder._line

    def line(self: Forwarder, state: Any, chunk: Any, text: bytes) -> None:
        handed.append(text)
        saved(self, state, chunk, text)

    Forwarder._line = line  # type: ignore[method-assign]
    try:
        requests_of(data, use_compiled=True)
    finally:
        Forwarder._line = saved  # type: ignore[method-assign]
    assert handed == []  # every line of these shapes is the compiled pass's


def _mutations(line: bytes) -> Iterator[bytes]:
    yield line[: len(line) // 2]
    yield line.replace(b",", b", ", 1)
    yield line.replace(b'"function"', b'"actor"')
    yield line.replace(b'"01000000"', b'"0100 000"')
    yield line.replace(b'"ray.pid":"', b'"ray.pid":"0')
    yield line.replace(b'"ray.pid":"', b'"ray.pid":"-')
    yield line.replace(b'"ray.job_id"', b'"ray.job_id":"01000000","ray.job_id"')
    yield line.replace(b"ray.remote", b"ray.r\\u0065mote", 1)
    yield line.replace(b"__main__", "__mäin__".encode())
    yield line.replace(b",0,0,0]", b",0,0,-1]")
    yield line.replace(b',"",0,0,0]', b",7,0,0,0]")  # a schema url that is no string
    yield line.replace(b",3,", b",1e3,", 1)
    yield line.replace(b",false,", b",0,", 1)
    yield line.replace(b'"ray.function":"__main__.noop"', b'"ray.function":null')
    yield line.replace(b'"ray.function":"__main__.noop"', b'"ray.function":2.5')
    yield line.replace(b"]", b"]]", 1)
    yield line + b"\r"
    yield b'["s",' + line[5:30] + b"]"
    yield line.replace(b'{"ray.state":"RUNNING"}', b'{"ray.state":null}')
    yield line.replace(b'{"ray.state":"RUNNING"}', b'{"":"RUNNING"}')
    yield line.replace(b'{"ray.state":"RUNNING"}', b'{"ray.state":0.5}')
    yield line.replace(b'[["RUNNING",', b'[["RUNNING",-')


@compiled
def test_mutated_lines_make_the_same_requests_and_counters_both_ways() -> None:
    lines = [line for data in fixture_chunks() for line in data.splitlines()]
    lines += ray_tasks(12).splitlines()
    for i, line in enumerate(lines):
        # most mutations match only some lines: the others give the line itself, checked once
        for mutated in dict.fromkeys(_mutations(line)).keys() - {line}:
            context = b"\n".join([*lines[max(0, i - 2) : i], mutated, *lines[i + 1 : i + 3]]) + b"\n"
            assert_same(context)


@compiled
def test_a_start_reference_and_its_end_line_read_once_or_apart_make_the_same_requests() -> None:
    """A start reference followed at once by its end line has that line read once for both; an end
    line that comes later, or one written twice (the last is the span's), goes the longer way."""
    lines = ray_tasks(12).splitlines()
    refs = [i for i, line in enumerate(lines) if line.startswith(b'["s",')]
    direct = [i for i in refs if orjson.loads(lines[i + 1])[4] == orjson.loads(lines[i])[1]]
    assert direct and len(direct) < len(refs)  # both shapes are in the chunk
    assert_same(b"\n".join(lines) + b"\n")
    for i in direct:
        again = orjson.loads(lines[i + 1])
        again[10] += 5  # the span written again: the last line is the one a reference reads
        twice = [*lines[: i + 2], orjson.dumps(again), *lines[i + 2 :]]
        assert_same(b"\n".join(twice) + b"\n")
        assert_same(b"\n".join([*lines[: i + 1]]) + b"\n")  # the end in a later chunk


@compiled
def test_the_derived_task_id_is_task_spans_own() -> None:
    from ray_otel_events.native import _spool_lines

    for i in range(200):
        digest = hashlib.sha256(i.to_bytes(4, "big")).digest()
        trace, span = int.from_bytes(digest[:16], "big"), int.from_bytes(digest[16:24], "big")
        job = digest[24:28]
        expected = derive_task_id(trace, span, b"\xff" * 12 + job)
        assert _spool_lines.task_id(trace.to_bytes(16, "big"), span, job) == expected


def log_lines(n: int) -> list[bytes]:
    """Log record lines as a task's printed lines are spooled (`spool.log_record_line`)."""
    scope = InstrumentationScope("ray_otel_events.task_logs")
    out = []
    for i in range(n):
        record = LogRecord(
            timestamp=1_795_783_529_000_000_000 + i,
            observed_timestamp=1_795_783_529_000_000_500 + i,
            trace_id=(i + 1) << 64 | 7,
            span_id=i + 1,
            trace_flags=TraceFlags(1),
            severity_text="INFO",
            severity_number=SeverityNumber.INFO,
            body=f"line {i}",
            attributes={"ray.task_id": f"{i:024x}", "process.pid": 4242, "log.iostream": "stdout"},
        )
        out.append(log_record_line(ReadableLogRecord(record, Resource({}), scope)))
    return out


def _with_log_lines() -> tuple[bytes, int]:
    """Span lines of many tasks with a log record line before every third (and how many)."""
    spans = ray_tasks(30).splitlines(keepends=True)
    logs = log_lines((len(spans) + 2) // 3)
    mixed = [
        line for i, span in enumerate(spans) for line in ([logs[i // 3], span] if i % 3 == 0 else [span])
    ]
    return b"".join(mixed), len(logs)


def test_log_record_lines_between_span_lines_go_in_a_logs_request_of_their_own() -> None:
    data, logs = _with_log_lines()
    pending, counters = requests_of(data, use_compiled=False)
    assert [(signal, items, what) for signal, _, items, what in pending] == [
        ("traces", data.count(b'["E"'), "spans"),
        ("logs", pending[1][2], "records"),
        ("logs", logs, "log_records"),
    ]
    assert "dropped_lines" not in counters


@compiled
def test_log_record_lines_between_span_lines_make_the_same_requests_both_ways() -> None:
    assert_same(_with_log_lines()[0])  # the compiled pass hands each log record line back
