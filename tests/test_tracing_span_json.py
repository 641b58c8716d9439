"""Our span and log record JSON lines are byte-identical to the SDK's own `to_json(indent=None)`."""

from __future__ import annotations

import json
from types import MappingProxyType

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry._logs import SeverityNumber
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.util import ns_to_iso_str as sdk_ns_to_iso_str
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

from ray_otel_events.otel import span_json
from ray_otel_events.otel.span_json import (
    _attrs,
    log_record_to_json_line,
    ns_to_iso_str,
    plain_span_json_line,
    python_span_to_json_line,
    span_to_json_line,
)
from tests.helpers.examples import examples
from tests.helpers.pure_python import needs_compiled, run_pure_python


def test_span_lines_equal_the_sdks() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "svc", "k": 3, "list": ["a", "b"]}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span('root ünïcode "quoted"') as root:
        root.set_attribute("tuple", (1, 2, 3))
        root.set_attribute("float", 0.1)
        root.add_event("ev", {"a": "b"}, timestamp=1_700_000_000_123_456_789)
        with tracer.start_as_current_span(
            "child", kind=SpanKind.CONSUMER, links=[Link(root.get_span_context(), {"l": 1})]
        ):
            pass
        try:
            with tracer.start_as_current_span("failing", kind=SpanKind.PRODUCER):
                raise ValueError("boom\nwith newline")
        except ValueError:
            pass
        ok = tracer.start_span("ok", start_time=1)
        ok.set_status(Status(StatusCode.OK))
        ok.end(end_time=999_999_999)
    spans = exporter.get_finished_spans()
    assert len(spans) == 4
    for span in spans:
        assert span_to_json_line(span) == span.to_json(indent=None)


def test_log_record_lines_equal_the_sdks() -> None:
    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider(resource=Resource.create({"service.name": "svc"}))
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    logger = provider.get_logger("t")
    tracer = TracerProvider().get_tracer("t")
    with tracer.start_as_current_span("s") as span:
        ctx = trace.set_span_in_context(span)
        logger.emit(
            timestamp=1_700_000_000_000_000_001,
            context=ctx,
            severity_number=SeverityNumber.INFO,
            severity_text="INFO",
            body={"eventType": "TASK_LIFECYCLE_EVENT", "nested": {"list": [1, "x"]}},
            attributes={"ray.event.x": "y", "n": 3, "l": ["a"]},
            event_name="ray.task_lifecycle_event",
        )
    logger.emit(body="plain", severity_number=SeverityNumber.WARN)
    records = exporter.get_finished_logs()
    assert len(records) == 2
    for record in records:
        assert isinstance(record, ReadableLogRecord)
        assert log_record_to_json_line(record) == record.to_json(indent=None)


_attribute_values = st.one_of(
    st.text(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(),  # NaN and the infinities included: json.dumps writes NaN / Infinity
    st.lists(st.text(max_size=5), max_size=3).map(tuple),
    st.lists(st.integers(min_value=0, max_value=10**6), max_size=3).map(tuple),
    st.lists(st.floats(), max_size=3).map(tuple),
    st.lists(st.booleans(), max_size=3).map(tuple),
)
_attributes = st.dictionaries(st.text(min_size=1, max_size=12), _attribute_values, max_size=5)
# Nanosecond times from 1970 to 2100, plus values whose microsecond fraction sits on a rounding edge.
_times = st.one_of(
    st.integers(min_value=1, max_value=4_102_444_800 * 10**9),
    st.integers(min_value=1, max_value=4_102_444_800 * 10**6).map(lambda us: us * 1000 + 500),
    st.integers(min_value=1, max_value=4_102_444_800).map(lambda s: s * 10**9 + 999_999_500),
)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.text(),
    kind=st.sampled_from(list(SpanKind)),
    attributes=_attributes,
    events=st.lists(st.tuples(st.text(max_size=8), st.none() | _attributes, _times), max_size=3),
    link_attributes=st.lists(_attributes, max_size=2),
    status=st.sampled_from(
        [Status(StatusCode.UNSET), Status(StatusCode.OK), Status(StatusCode.ERROR, 'no\n"x" ü')]
    ),
    trace_state=st.sampled_from([TraceState(), TraceState([("vendor", "v1"), ("other", "x-y")])]),
    times=st.tuples(_times, _times),
    parent=st.booleans(),
)
def test_random_span_lines_equal_the_sdks(
    name: str,
    kind: SpanKind,
    attributes: dict[str, object],
    events: list[tuple[str, dict[str, object] | None, int]],
    link_attributes: list[dict[str, object]],
    status: Status,
    trace_state: TraceState,
    times: tuple[int, int],
    parent: bool,
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "svc"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    remote = SpanContext(0x1234, 0x5678, is_remote=True, trace_flags=TraceFlags(1), trace_state=trace_state)
    ctx = trace.set_span_in_context(NonRecordingSpan(remote)) if parent else None
    span = tracer.start_span(
        name,
        context=ctx,
        kind=kind,
        attributes=attributes,  # type: ignore[arg-type]
        links=[Link(remote, a) for a in link_attributes],  # type: ignore[arg-type]
        start_time=min(times),
    )
    for event_name, event_attributes, timestamp in events:
        span.add_event(event_name, event_attributes, timestamp=timestamp)  # type: ignore[arg-type]
    span.set_status(status)
    span.end(end_time=max(times))
    (finished,) = exporter.get_finished_spans()
    assert span_to_json_line(finished) == finished.to_json(indent=None)
    assert python_span_to_json_line(finished) == finished.to_json(indent=None)


@given(_times)
def test_timestamps_round_as_the_sdks(nanoseconds: int) -> None:
    assert ns_to_iso_str(nanoseconds) == sdk_ns_to_iso_str(nanoseconds)


# Mostly plain ASCII, where the orjson path applies, with the characters that must leave it:
# quotes, backslashes, control characters, DEL and one beyond ASCII; colons and commas that
# look like its separators.
_ascii_text = st.text(
    alphabet=st.sampled_from([*'ab:," \\{}[]', "\x00", "\n", "\x7f", "\x80", "é"]), max_size=6
)
_separator_text = st.text(alphabet=st.sampled_from([*"a:, "]), max_size=3)  # nothing to escape
_ascii_attributes = st.dictionaries(
    _ascii_text | _separator_text,
    st.one_of(_ascii_text, _separator_text, st.integers(), st.booleans(), st.lists(_ascii_text, max_size=2)),
    min_size=4,  # where the orjson path applies
    max_size=9,
)


# Nothing escaped (and DEL, which only json.dumps escapes): the orjson path's own edge cases.
_plain_text = st.sampled_from(["a", "b", ":", ",", "a:", ",b", '",', " ", "", "a,b", ":a"])
_plain_attributes = (
    st.dictionaries(_plain_text, _plain_text, min_size=4, max_size=8)
    | st.dictionaries(_plain_text | st.just("\x7f"), _plain_text | st.just("a\x7f"), min_size=4, max_size=8)
    | st.dictionaries(
        _plain_text, _plain_text | st.integers(min_value=0, max_value=3), min_size=4, max_size=8
    )
)


@settings(max_examples=examples(1000), deadline=None)
@given(_ascii_attributes | _plain_attributes)
def test_attribute_json_equals_json_dumps(attributes: dict[str, object]) -> None:
    expected = json.dumps(attributes) if attributes else "{}"
    assert _attrs(attributes) == expected
    assert _attrs(MappingProxyType(attributes)) == expected  # how a span hands its attributes out


@settings(max_examples=examples(300), deadline=None)
@given(st.dictionaries(_ascii_text | _separator_text, _ascii_text | _separator_text, max_size=3))
def test_small_attribute_json_equals_json_dumps(attributes: dict[str, object]) -> None:
    assert _attrs(attributes) == (json.dumps(attributes) if attributes else "{}")


def test_cached_attribute_json_is_never_given_to_equal_numbers() -> None:
    """1 == 1.0 == True: only all-string dicts are remembered, so no other type can hit them."""
    strings = {"a": "1", "b": "x", "c": "y", "d": "z"}
    for attributes in (strings, strings, {**strings, "a": 1}, {**strings, "a": True}, {**strings, "a": 1.0}):
        assert _attrs(attributes) == json.dumps(attributes)
    assert _attrs(MappingProxyType(strings)) == json.dumps(strings)
    with_task = {**strings, "ray.task_id": "ab"}  # not kept: a task's id makes each one unique
    assert _attrs(with_task) == _attrs(with_task) == json.dumps(with_task)


@settings(max_examples=examples(500), deadline=None)
@given(
    _ascii_attributes | _plain_attributes,
    _ascii_text | _separator_text | st.integers(),
    st.booleans(),
)
def test_attribute_json_with_a_task_id_equals_json_dumps(
    attributes: dict[str, object], task_id: object, last: bool
) -> None:
    """A task id last (an execution span's) is written after the others' kept JSON; anywhere else,
    or not a string, the dict is written whole."""
    with_task = {**attributes, "ray.task_id": task_id} if last else {"ray.task_id": task_id, **attributes}
    for _ in range(2):  # the second time the others' JSON is the kept one
        assert _attrs(with_task) == json.dumps(with_task)
        assert _attrs(MappingProxyType(with_task)) == json.dumps(with_task)


# Text the compiled writer escapes itself: quotes, backslashes, control characters, DEL, Latin-1,
# the BMP, beyond it (surrogate pairs) and a lone surrogate.
_odd_text = st.text(
    alphabet=st.sampled_from(
        [*'ab"\\', "\x00", "\n", "\t", "\x1f", "\x7f", "é", "\u20ac", "\U0001f600", "\ud800"]
    ),
    max_size=8,
)
_odd_values = st.one_of(
    _odd_text,
    st.booleans(),
    st.none(),
    st.integers(),  # beyond 64 bits too
    st.floats(),
    st.lists(_odd_text | st.integers() | st.floats(), max_size=3).map(tuple),
    st.lists(st.lists(st.integers(), max_size=2).map(tuple), max_size=2),  # nested: what json.dumps writes
)


def _odd_span(
    name: str, attributes: dict[str, object], events: list[Event], start: int, end: int
) -> ReadableSpan:
    span = ReadableSpan(
        name,
        SpanContext(2**128 - 1, 1, is_remote=False),
        SpanContext(5, 2**64 - 1, is_remote=True),
        Resource.create({"service.name": "svc"}),
        attributes,
        events,  # type: ignore[arg-type]
        (),
        SpanKind.CONSUMER,
        None,
        Status(StatusCode.ERROR, "bad"),
        start,
        end,
    )
    return span


@settings(max_examples=examples(500), deadline=None)
@given(
    name=_odd_text,
    attributes=st.dictionaries(_odd_text, _odd_values, max_size=6),
    events=st.lists(
        st.tuples(_odd_text, st.none() | st.dictionaries(_odd_text, _odd_values, max_size=3), _times),
        max_size=3,
    ),
    times=st.tuples(st.just(0) | _times, st.just(0) | _times),
)
def test_the_compiled_line_is_its_python_twins(
    name: str,
    attributes: dict[str, object],
    events: list[tuple[str, dict[str, object] | None, int]],
    times: tuple[int, int],
) -> None:
    """Spans as DirectSpans hold them (plain dicts), with every kind of value and text: the compiled
    writer's line is the Python twin's, which is the SDK's."""
    span = _odd_span(name, attributes, [Event(n, a, t) for n, a, t in events], *times)
    expected = span.to_json(indent=None)
    assert python_span_to_json_line(span) == expected
    assert span_to_json_line(span) == expected


def test_what_the_compiled_line_leaves_to_python_is_written_the_same() -> None:
    """Values it does not write (an int subclass, a dict, a non-string key, a time before 1970,
    a non-empty trace state) give the same line through the Python twin."""
    from enum import IntEnum

    class Level(IntEnum):
        HIGH = 3

    odd: list[ReadableSpan] = [
        _odd_span("n", {"level": Level.HIGH}, [], 1, 2),
        _odd_span("n", {"d": {"a": 1}}, [], 1, 2),  # type: ignore[dict-item]
        _odd_span("n", {1: "x"}, [], 1, 2),  # type: ignore[dict-item]
        _odd_span("n", {}, [Event("e", {"a": "b"}, -5)], 1, 2),
        _odd_span("n", {}, [], -1_000, 2),
        _odd_span("n", {"deep": ((((1,),),),)}, [], 1, 2),  # type: ignore[dict-item]
    ]
    for span in odd:
        assert span_to_json_line(span) == span.to_json(indent=None)
    state = SpanContext(7, 8, is_remote=False, trace_state=TraceState([("k", "v")]))
    assert plain_span_json_line("s", state, None, 1, 2, {"a": "b"}, Resource.create({})) == ReadableSpan(
        "s", state, None, Resource.create({}), {"a": "b"}, kind=SpanKind.PRODUCER, start_time=1, end_time=2
    ).to_json(indent=None)


@needs_compiled(True, "the comparison with this process's compiled line")
def test_the_line_is_written_the_same_with_the_compiled_helpers_off() -> None:
    code = (
        "from opentelemetry.sdk.trace import ReadableSpan, Event\n"
        "from opentelemetry.sdk.resources import Resource\n"
        "from opentelemetry.trace import SpanContext, SpanKind\n"
        "from ray_otel_events.otel import span_json\n"
        "span = ReadableSpan('f ray.remote_worker', SpanContext(1, 2, False), SpanContext(1, 3, True),"
        " Resource.create({'service.name': 's'}), {'a': 'b\u20ac', 'n': 1.5},"
        " [Event('RUNNING', {'ray.state': 'RUNNING'}, 1_700_000_000_000_000_000)],"
        " kind=SpanKind.CONSUMER, start_time=1, end_time=2)\n"
        "fields = (span.name, span.context, span.kind, span.parent, span.start_time, span.end_time,"
        " span.status, dict(span.attributes), list(span.events), span.links, span.resource)\n"
        "same = span_json.span_to_json_line(span) == span_json.span_fields_to_json_line(*fields)"
        " == span.to_json(indent=None)\n"
        "print(span_json._compiled_line is None, same)"
    )
    assert run_pure_python(code) == "True True"
    assert span_json._compiled_line is not None or span_json._span_json is None
