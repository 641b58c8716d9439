"""The OTLP hook's spool lines written compiled (native/_spool_line.c) are the bytes the Python twin
(tracing/spool.py `span_line`, `submission_line`: orjson of a 23-field list) writes, over generated
span shapes, the spans of real Ray and pool runs (rebuilt from the fixture spools) and spans made
through the hook's own processor; what the compiled writer leaves (None) the twin writes or refuses."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path
from types import MappingProxyType
from typing import Any

import orjson
import pytest
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, Span, SpanLimits, SpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
)

from ray_otel_events.tracing import spool
from ray_otel_events.tracing.direct_spans import DirectSpan, DirectTracer
from ray_otel_events.tracing.provider import CachingTracerProvider
from ray_otel_events.tracing.spool import (
    ENDED,
    STARTED,
    STARTED_REF,
    SpoolSpanProcessor,
    span_line,
    submission_line,
)
from tests.helpers.pure_python import needs_compiled, run_pure_python

try:
    from ray_otel_events.native import _spool_line
except ImportError:
    _spool_line = None  # type: ignore[assignment]

compiled = needs_compiled(_spool_line, "the compiled spool line writer")
WRITES_COMPILED = spool.compiled_span_line is not spool._python_writes
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "spool"
INT64_MIN, INT64_MAX, UINT64_MAX = -(2**63), 2**63 - 1, 2**64 - 1


class Collector(SpanProcessor):
    """Keeps the spans it is given (reads them through ReadableSpan only: spans are DirectSpans)."""

    accepts_direct_spans = True

    def __init__(self) -> None:
        self.ended: list[ReadableSpan] = []

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        self.ended.append(span)


def _tracer(limits: SpanLimits | None = None) -> tuple[DirectTracer, Collector]:
    provider = CachingTracerProvider(span_limits=limits) if limits else CachingTracerProvider()
    collector = Collector()
    provider.add_span_processor(collector)
    tracer = provider.get_tracer("ray.util.tracing.tracing_helper")
    assert isinstance(tracer, DirectTracer)
    return tracer, collector


def both(span: ReadableSpan, kind: str) -> tuple[bytes | None, bytes | BaseException]:
    """The compiled line (None: left to Python) and the Python twin's line or what it raised."""
    made = _spool_line.span_line(span, kind)
    try:
        expected: bytes | BaseException = span_line(span, kind)
    except Exception as exc:
        expected = exc
    return made, expected


# -- generated shapes -------------------------------------------------------------------------------

_CHARS = [
    *"abcxyz:,{}[] ",
    '"',
    "\\",
    "/",
    "\x00",
    "\x01",
    "\x08",
    "\t",
    "\n",
    "\x0b",
    "\x0c",
    "\r",
    "\x1f",
    "\x7f",
    "\x80",
    "\xa0",
    "é",
    "ÿ",
    "Ā",
    "€",
    "\u2028",
    "\u2029",
    "\ud7ff",
    "\ue000",
    "\ufeff",
    "\uffff",
    "\U00010000",
    "😀",
    "\U0010ffff",
]


def _text(rng: random.Random, max_size: int = 12) -> str:
    if rng.random() < 0.3:
        return rng.choice(["", "ray.task_id", "a", "ef" * 24, "__main__.noop ray.remote_worker"])
    return "".join(rng.choice(_CHARS) for _ in range(rng.randrange(max_size)))


def _int(rng: random.Random) -> int:
    return rng.choice(
        [0, 1, -1, 7, INT64_MAX, INT64_MIN, UINT64_MAX, 2**63, rng.randrange(INT64_MIN, UINT64_MAX)]
    )


def _float(rng: random.Random) -> float:
    return rng.choice(
        [0.0, -0.0, 0.1, 1.5, 1e16, 1e-7, 123456789012345680.0, float("nan"), float("inf"), -float("inf"),
         rng.uniform(-1e6, 1e6), rng.random() * 10 ** rng.randrange(-30, 30)]
    )  # fmt: skip


def _scalar(rng: random.Random) -> Any:
    pick = rng.randrange(4)
    return (_text(rng), _int(rng), rng.random() < 0.5, _float(rng))[pick]


def _value(rng: random.Random, depth: int = 0) -> Any:
    """An attribute value: a scalar or a list or tuple of them (nested a little: a value the SDK
    would not keep, set on the span directly, is still written as orjson writes it)."""
    roll = rng.random()
    if roll < 0.6 or depth > 2:
        return _scalar(rng)
    items = [_scalar(rng) if rng.random() < 0.8 else _value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if roll < 0.75:
        return tuple(items)
    if roll < 0.95:
        return items
    return {_text(rng): _scalar(rng) for _ in range(rng.randrange(3))}


def _attributes(rng: random.Random, max_size: int = 6) -> dict[str, Any]:
    return {_text(rng): _value(rng) for _ in range(rng.randrange(max_size))}


def _context(rng: random.Random, *, remote: bool, sampled: bool = False) -> SpanContext:
    state = rng.choice([None, TraceState(), TraceState([("vendor", "v1"), ("other", "x-y")])])
    trace_id = rng.choice([1, 2**64 - 1, 2**64, 2**128 - 1, rng.getrandbits(128) or 1])
    span_id = rng.choice([1, 2**63, 2**64 - 1, rng.getrandbits(64) or 1])
    flags = TraceFlags(rng.choice([1, 3] if sampled else [0, 1, 2, 3]))
    return SpanContext(trace_id, span_id, is_remote=remote, trace_flags=flags, trace_state=state)


def _scope(rng: random.Random) -> InstrumentationScope | None:
    return rng.choice(
        [
            None,
            InstrumentationScope("ray.util.tracing.tracing_helper", "", None, None),
            InstrumentationScope("lib ü", "1.2.3", "https://opentelemetry.io/schemas/1.21.0", None),
            InstrumentationScope("x", None, "", None),
        ]
    )


def generated_span(rng: random.Random, tracer: DirectTracer, collector: Collector) -> DirectSpan:
    """A DirectSpan of a random shape, made through the tracer and then given fields the API would
    not make (floats nested in lists, out-of-range ints, dropped counts, other scopes)."""
    parent = _context(rng, remote=rng.random() < 0.5, sampled=True) if rng.random() < 0.7 else None
    context = trace.set_span_in_context(NonRecordingSpan(parent)) if parent is not None else None
    links = [Link(_context(rng, remote=rng.random() < 0.5), rng.choice([None, {}, _attributes(rng, 3)]))
             for _ in range(rng.choice([0, 0, 1, 2]))]  # fmt: skip
    span = tracer.start_span(
        _text(rng, 30),
        context=context,
        kind=rng.choice(list(SpanKind)),
        attributes=_attributes(rng),
        links=links,
        start_time=rng.choice([0, 1, 1_795_784_315_794_301_956, INT64_MAX, rng.getrandbits(63)]),
    )
    assert isinstance(span, DirectSpan)
    for _ in range(rng.choice([0, 0, 1, 3])):
        span.add_event(_text(rng), rng.choice([None, {}, _attributes(rng, 4)]), timestamp=rng.getrandbits(63))
    if rng.random() < 0.1:
        try:
            raise ValueError(_text(rng))
        except ValueError as exc:
            span.record_exception(exc)
    status = rng.choice(
        [None, Status(StatusCode.OK), Status(StatusCode.ERROR), Status(StatusCode.ERROR, _text(rng))]
    )
    if status is not None:
        span.set_status(status)
    if rng.random() < 0.3:  # a value nested deeper than the SDK cleans, written as it is
        span._attributes[_text(rng)] = _value(rng)
    if rng.random() < 0.2:
        span._dropped_attributes = rng.randrange(100)
        span._dropped_events = rng.randrange(100)
    if rng.random() < 0.3:  # ids, flags and trace state beyond what this parent gives
        span._context = _context(rng, remote=False)
    if rng.random() < 0.3:
        span._instrumentation_scope = _scope(rng)  # type: ignore[assignment]
    span.end(end_time=rng.choice([None, rng.getrandbits(63)]))
    assert collector.ended[-1] is span
    return span


@compiled
def test_generated_spans_are_written_as_the_python_twin_writes_them() -> None:
    rng = random.Random(20261127)
    tracer, collector = _tracer()
    written = {STARTED: 0, ENDED: 0, STARTED_REF: 0}
    for _ in range(600):
        span = generated_span(rng, tracer, collector)
        for kind in (STARTED, ENDED, STARTED_REF):
            made, expected = both(span, kind)
            assert made is not None, (kind, span.name, span.attributes)  # every shape here is the writer's
            assert made == expected, (kind, made, expected)
            written[kind] += 1
            assert orjson.loads(made)  # one JSON array, a line
            assert made.endswith(b"\n") and made.count(b"\n") == 1
    assert written == {STARTED: 600, ENDED: 600, STARTED_REF: 600}


@compiled
def test_generated_submission_lines_are_the_python_twins() -> None:
    rng = random.Random(7)
    proxied = 0
    for _ in range(400):
        parent = _context(rng, remote=rng.random() < 0.5) if rng.random() < 0.7 else None
        attributes: Any = rng.choice([None, {}, _attributes(rng), MappingProxyType(_attributes(rng))])
        args = (
            _text(rng, 30),
            _context(rng, remote=False),
            parent,
            rng.getrandbits(63),
            rng.getrandbits(63),
            attributes,
            _scope(rng),
        )
        made = _spool_line.submission_line(*args)
        if type(attributes) is MappingProxyType:  # a sampler's: orjson's fallback copies it, in Python
            assert made is None
            proxied += 1
        else:
            assert made is not None
            assert made == submission_line(*args)
    assert 50 < proxied < 150


def _odd_span(tracer: DirectTracer, odd: Any) -> DirectSpan:
    span = tracer.start_span("odd", attributes={"ok": "1"})
    assert isinstance(span, DirectSpan)
    odd(span)
    span.end(end_time=5)
    return span


def _status_described(description: Any) -> Status:
    status = Status(StatusCode.ERROR, "set below")
    status._description = description  # what Status refuses to hold, held anyway
    return status


def _nested(depth: int) -> Any:
    value: Any = "deep"
    for _ in range(depth):
        value = [value]
    return value


class _Str(str):
    pass


class _Int(int):
    pass


@compiled
@pytest.mark.parametrize(
    "odd",
    [
        pytest.param(lambda s: s._attributes.__setitem__("k", "\ud800"), id="lone surrogate"),
        pytest.param(
            lambda s: s._attributes.__setitem__("k", ["a", "b\udfff"]), id="lone surrogate in a list"
        ),
        pytest.param(lambda s: s._attributes.__setitem__("\udc80", "v"), id="lone surrogate key"),
        pytest.param(lambda s: s._attributes.__setitem__("k", 2**64), id="int above uint64"),
        pytest.param(lambda s: s._attributes.__setitem__("k", -(2**63) - 1), id="int below int64"),
        pytest.param(lambda s: s._attributes.__setitem__("k", (1, 2**70)), id="big int in a tuple"),
        pytest.param(lambda s: s._attributes.__setitem__(1, "v"), id="int key"),
        pytest.param(lambda s: s._attributes.__setitem__(_Str("k"), "v"), id="str subclass key"),
        pytest.param(lambda s: s._attributes.__setitem__("k", _Str("v")), id="str subclass value"),
        pytest.param(lambda s: s._attributes.__setitem__("k", _Int(3)), id="int subclass value"),
        pytest.param(lambda s: s._attributes.__setitem__("k", {1, 2}), id="a set"),
        pytest.param(lambda s: setattr(s, "_attributes", MappingProxyType({"a": "b"})), id="mappingproxy"),
        pytest.param(lambda s: s._attributes.__setitem__("k", MappingProxyType({})), id="mappingproxy value"),
        pytest.param(lambda s: setattr(s, "_start_time", 2**64), id="start beyond uint64"),
        pytest.param(lambda s: setattr(s, "_name", _Str("n")), id="name a str subclass"),
        pytest.param(
            lambda s: s._events.append(Event("e", MappingProxyType({"a": 1}), 3)), id="event mapping"
        ),
        pytest.param(lambda s: setattr(s, "_kind", 4), id="kind not a SpanKind"),
        pytest.param(lambda s: setattr(s, "_status", _status_described(5)), id="description not a str"),
        pytest.param(lambda s: s._attributes.__setitem__("k", _nested(40)), id="nested deeper than 32"),
    ],
)
def test_what_the_writer_leaves_the_python_twin_writes_or_refuses(odd: Any) -> None:
    tracer, _ = _tracer()
    span = _odd_span(tracer, odd)
    made, expected = both(span, ENDED)
    assert made is None
    if isinstance(expected, bytes):
        assert orjson.loads(expected)[1] in ("odd", "n")


@compiled
def test_what_the_python_twin_refuses_it_refuses_through_the_processor(tmp_path: Path) -> None:
    """A span orjson cannot write (a lone surrogate) is counted as failed and the rest are written."""
    processor = SpoolSpanProcessor(str(tmp_path), Resource({"service.name": "t"}), linger_s=0)
    processor.writer.start_forwarder = False
    tracer = _provider_tracer(processor)
    with tracer.start_as_current_span("good", attributes={"a": "1"}):
        pass
    with tracer.start_as_current_span("bad", attributes={"a": "\ud800"}):
        pass
    processor.force_flush()
    assert processor.writer.failed == 1
    lines = _spool_lines(tmp_path)
    assert [orjson.loads(line)[1] for line in lines] == ["good"]
    processor.shutdown()


@compiled
def test_other_spans_and_kinds_are_left_to_python() -> None:
    from opentelemetry.sdk.trace import TracerProvider

    provider = TracerProvider()
    sdk_span = provider.get_tracer("t").start_span("sdk")
    sdk_span.end()
    assert _spool_line.span_line(sdk_span, ENDED) is None  # an SDK span: the twin reads its properties
    assert isinstance(span_line(sdk_span, ENDED), bytes)
    tracer, _ = _tracer()
    span = tracer.start_span("x")
    span.end()
    assert _spool_line.span_line(span, "X") is None
    assert _spool_line.span_line(span, ENDED) == span_line(span, ENDED)


# -- the spans of real runs -------------------------------------------------------------------------


def _fixture_lines() -> Iterator[bytes]:
    for path in sorted(FIXTURES.glob("*/*.spool")):
        yield from path.read_bytes().splitlines(keepends=True)[1:]


def _rebuilt(line: bytes, tracers: dict[tuple[str, str, str], DirectTracer]) -> tuple[DirectSpan, str]:
    """The DirectSpan a fixture line was written from, and the line's kind."""
    (kind, name, high, low, span_id, flags, state, parent_id, parent_remote, span_kind, start, end, code,
     description, attributes, events, links, scope_name, scope_version, scope_schema, dropped_attributes,
     dropped_events, _) = orjson.loads(line)  # fmt: skip
    key = (scope_name, scope_version, scope_schema)
    tracer = tracers.get(key)
    if tracer is None:
        tracer = tracers[key] = _tracer()[0]
        tracer.scope = InstrumentationScope(scope_name, scope_version, scope_schema, None)
    context = SpanContext(
        high << 64 | low,
        span_id,
        False,
        TraceFlags(flags),
        TraceState.from_header([state]) if state else None,
    )
    parent = SpanContext(high << 64 | low, parent_id, parent_remote, TraceFlags(flags)) if parent_id else None
    span = DirectSpan(
        name,
        context,
        parent,
        tracer,
        SpanKind(span_kind),
        attributes,
        [
            Link(
                SpanContext(
                    int(t, 16), s, remote, TraceFlags(f), TraceState.from_header([ts]) if ts else None
                ),
                a,
            )
            for t, s, f, ts, a, remote in links
        ],
        True,
        True,
    )
    span._start_time = start
    span._end_time = end
    span._events = [Event(n, a, t) for n, t, a in events]
    if code:
        span._status = Status(StatusCode(code), description or None)
    span._dropped_attributes = dropped_attributes
    span._dropped_events = dropped_events
    return span, kind


def test_the_spans_of_real_runs_are_written_as_they_were() -> None:
    """Both writers (the twin alone when the compiled one is off or not built)."""
    tracers: dict[tuple[str, str, str], DirectTracer] = {}
    rebuilt = 0
    for line in _fixture_lines():
        kind = orjson.loads(line)[0]
        if kind == STARTED_REF:
            continue
        span, kind = _rebuilt(line, tracers)
        assert span_line(span, kind) == line  # the very bytes of the real run, written by orjson then
        if WRITES_COMPILED:
            assert spool.compiled_span_line(span, kind) == line
            ref = spool.compiled_span_line(span, STARTED_REF)
            assert ref is not None and ref == span_line(span, STARTED_REF)
        rebuilt += 1
    assert rebuilt > 50


def _provider_tracer(processor: SpanProcessor) -> trace.Tracer:
    provider = CachingTracerProvider()
    provider.add_span_processor(processor)
    return provider.get_tracer("ray.util.tracing.tracing_helper")


def _spool_lines(folder: Path) -> list[bytes]:
    return [
        line
        for path in sorted(folder.glob("*.spool"))
        for line in path.read_bytes().splitlines(keepends=True)[1:]
    ]


def _traced_workload(tracer: trace.Tracer) -> None:
    """Ray's two spans a task (submission and execution, through the W3C carrier), a failing one,
    events, links and a nested call."""
    from opentelemetry import propagate

    attributes = {
        "ray.remote": "function",
        "ray.function": "__main__.noop",
        "ray.pid": str(os.getpid()),
        "ray.job_id": "01000000",
        "ray.node_id": "ab" * 28,
        "ray.worker_id": "cd" * 28,
    }
    for i in range(20):
        carrier: dict[str, str] = {}
        with tracer.start_as_current_span(
            "__main__.noop ray.remote", kind=SpanKind.PRODUCER, attributes=attributes
        ):
            propagate.inject(carrier)
        executing = {**attributes, "ray.task_id": f"{i:048x}"}
        try:
            with tracer.start_as_current_span(
                "__main__.noop ray.remote_worker",
                context=propagate.extract(carrier),
                kind=SpanKind.CONSUMER,
                attributes=executing,
            ) as span:
                span.add_event("RUNNING", {"ray.state": "RUNNING"})
                with tracer.start_as_current_span("inner ü", links=[Link(span.get_span_context(), {"n": i})]):
                    pass
                if i % 5 == 0:
                    raise RuntimeError(f"task {i} failed: 'quoted' \"text\"\n")
        except RuntimeError:
            pass


def test_the_processor_writes_the_python_twins_lines(tmp_path: Path) -> None:
    """Spans made by a traced workload through the hook's own processor (starts queued, execution
    ends written at once with them): every line in the spool is the twin's for that span (written
    compiled, or by the twin itself when the compiled writer is off)."""
    collector = Collector()
    processor = SpoolSpanProcessor(str(tmp_path), Resource({"service.name": "t"}), linger_s=0)
    processor.writer.start_forwarder = False
    provider = CachingTracerProvider()
    provider.add_span_processor(processor)
    provider.add_span_processor(collector)
    tracer = provider.get_tracer("ray.util.tracing.tracing_helper")
    _traced_workload(tracer)
    processor.force_flush()
    processor.shutdown()
    by_id = {span.context.span_id: span for span in collector.ended if span.context is not None}
    assert all(type(span) is DirectSpan for span in by_id.values())
    lines = _spool_lines(tmp_path)
    assert len(lines) >= 80  # 20 tasks: submission, execution start (or reference) and end, inner
    kinds = {STARTED: 0, ENDED: 0, STARTED_REF: 0}
    for line in lines:
        fields = orjson.loads(line)
        kind = fields[0]
        span = by_id[fields[1] if kind == STARTED_REF else fields[4]]
        assert line == span_line(span, kind)
        kinds[kind] += 1
    assert kinds[ENDED] == 60 and kinds[STARTED] + kinds[STARTED_REF] == 20


def test_pure_python_writes_every_line_with_the_twin() -> None:
    out = run_pure_python(
        "from ray_otel_events.tracing import spool\n"
        "print(spool.compiled_span_line is spool._python_writes,"
        " spool.compiled_submission_line is spool._python_writes)"
    )
    assert out == "True True"
