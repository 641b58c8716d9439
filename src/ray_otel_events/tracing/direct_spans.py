"""Spans without the SDK's per-span machinery, for providers whose processors are all known to us.

An SDK span is costly to start and end: bounded attribute and event containers that clean
every value, a lock per call, metrics hooks, and a ReadableSpan copy made at the end for the
processors. A traced task makes two of them (submit and execute), and Ray's wrappers make them for
every submission. When every processor on the provider is one that only reads spans through the
`ReadableSpan` interface (ours, and the SDK's batch and simple processors), `DirectTracer` hands out
`DirectSpan`s instead: a `ReadableSpan` that can still be written to until it ends (attributes,
events, status, exceptions, name: everything user code may do to the current span), given to the
processors itself at its end rather than copied. Ids, sampling, limits, parenting and the JSON and
OTLP output are the SDK's own; a provider with any other processor gets SDK spans as before.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry import context as context_api
from opentelemetry import trace as trace_api
from opentelemetry.attributes import _clean_attribute_value
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanLimits, SpanProcessor
from opentelemetry.sdk.trace import Tracer as SdkTracer
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.sampling import DEFAULT_ON, Decision, SamplingResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.util import types

from ray_otel_events.otel import semconv

logger = logging.getLogger("ray_otel_events.tracing")

_SDK_READERS = (BatchSpanProcessor, SimpleSpanProcessor)
_STR_ONLY = frozenset({str})
UNSET_STATUS = Status(StatusCode.UNSET)  # immutable: set_status replaces it, never changes it


def reads_spans_only(processor: SpanProcessor) -> bool:
    """True for a processor that takes ended spans as plain ReadableSpans and never touches SDK
    span internals: ours declare `accepts_direct_spans = True`; the SDK's batch and simple ones do."""
    return bool(getattr(processor, "accepts_direct_spans", False)) or type(processor) in _SDK_READERS


def _plain_strings(attributes: Mapping[str, Any]) -> bool:
    """True when every key is a non-empty string and every value a string: cleaning keeps them all."""
    return (
        "" not in attributes
        and _STR_ONLY.issuperset(map(type, attributes))
        and _STR_ONLY.issuperset(map(type, attributes.values()))
    )


def clean_value(value: Any, max_length: int | None) -> Any:
    """The SDK's own cleaning (`opentelemetry.attributes`), after a fast path for the common case."""
    if type(value) is str and max_length is None:
        return value
    return _clean_attribute_value(value, max_length)


# Spans started in a context whose span is an actor's constructor execution span that has ended.
CONSTRUCTOR_EXECUTION_SUFFIX = ".__init__" + semconv.EXECUTE_SUFFIX


def ended_constructor(span: trace_api.Span) -> bool:
    """True for an actor's `__init__` execution span, made in this process, that has ended.

    Ray makes it current while the constructor runs, and every asyncio task, thread or callback
    the constructor starts copies that context and keeps it for the actor's lifetime: Serve's
    controller starts its control loop, its proxy the HTTP server, that way. Spans started there
    after the constructor returned (each controller call, each HTTP request) are not part of
    constructing the actor; as its children they would all land in the trace that created it."""
    # A local span's end (ours and the SDK's keep it there; remote and non-recording spans have none),
    # read without the property: this runs for every span started.
    if getattr(span, "_end_time", None) is None:
        return False
    return str(getattr(span, "name", "")).endswith(CONSTRUCTOR_EXECUTION_SUFFIX)


def outside_constructor(context: context_api.Context | None) -> context_api.Context:
    """`context` (the current one if None) without its span: a span started in it is a root."""
    return trace_api.set_span_in_context(trace_api.INVALID_SPAN, context)


def new_span_context(
    tracer: SdkTracer,
    context: context_api.Context | None,
    name: str,
    kind: SpanKind,
    attributes: types.Attributes,
    links: Sequence[Link],
) -> tuple[SpanContext | None, SpanContext, SamplingResult]:
    """The SDK's choice of parent, ids, flags and sampling for a span starting in `context`, made
    without creating the span: (valid parent or None, the new span's context, the sampling result)."""
    current = trace_api.get_current_span(context)
    if ended_constructor(current):
        context, current = outside_constructor(context), trace_api.INVALID_SPAN
    parent: SpanContext | None = current.get_span_context()
    if parent is None or not parent.is_valid:
        parent = None
        trace_id = tracer.id_generator.generate_trace_id()
        random_trace_id = tracer.id_generator.is_trace_id_random()
    else:
        trace_id = parent.trace_id
        random_trace_id = parent.trace_flags.random_trace_id
    sampler = tracer.sampler
    if sampler is DEFAULT_ON:
        # ParentBased(ALWAYS_ON), decided as it decides without its four calls: sampled as a root or
        # under a sampled parent, dropped under an unsampled one, the parent's trace state kept.
        if parent is None:
            sampling = SamplingResult(Decision.RECORD_AND_SAMPLE, attributes, None)
        elif parent.trace_flags.sampled:
            sampling = SamplingResult(Decision.RECORD_AND_SAMPLE, attributes, parent.trace_state)
        else:
            sampling = SamplingResult(Decision.DROP, None, parent.trace_state)
    else:
        sampling = sampler.should_sample(context, trace_id, name, kind, attributes, links)
    flags = TraceFlags.SAMPLED if sampling.decision is Decision.RECORD_AND_SAMPLE else TraceFlags.DEFAULT
    if random_trace_id:
        flags |= TraceFlags.RANDOM_TRACE_ID
    span_context = SpanContext(
        trace_id,
        tracer.id_generator.generate_span_id(),
        is_remote=False,
        trace_flags=TraceFlags(flags),
        trace_state=sampling.trace_state,
    )
    return parent, span_context, sampling


class DirectSpan(trace_api.Span, ReadableSpan):
    """A recording span that is its own ReadableSpan (see the module doc); not thread-safe for
    concurrent writers, which the API does not promise for one span either."""

    def __init__(
        self,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        tracer: DirectTracer,
        kind: SpanKind,
        attributes: dict[str, Any],
        links: Sequence[Link],
        record_exception: bool,
        set_status_on_exception: bool,
    ) -> None:
        # ReadableSpan.__init__'s fields, set here without its call (a span per submission in Ray).
        self._name = name
        self._context = context
        self._kind = kind
        self._instrumentation_info = None
        self._instrumentation_scope = tracer.scope
        self._parent = parent
        self._start_time: int | None = None
        self._end_time: int | None = None
        self._attributes = attributes
        self._events: list[Event] = []
        self._links = tuple(links)
        self._resource = tracer.resource
        self._status = UNSET_STATUS
        self._tracer = tracer
        self._record_exception = record_exception
        self._set_status_on_exception = set_status_on_exception
        self._dropped_attributes = 0
        self._dropped_events = 0

    def line_fields(
        self,
    ) -> tuple[
        str,
        SpanContext | None,
        SpanKind,
        SpanContext | None,
        int | None,
        int | None,
        Status,
        dict[str, Any],
        list[Event],
        Sequence[Link],
        Resource,
    ]:
        """What its span line is written from (`span_json.span_fields_to_json_line`), read at once:
        the ReadableSpan properties cost a call each and copy the attributes, events and links."""
        return (
            self._name,
            self._context,
            self._kind,
            self._parent,
            self._start_time,
            self._end_time,
            self._status,
            self._attributes,  # type: ignore[return-value]  # always a dict here
            self._events,
            self._links,
            self._resource,
        )

    def spool_fields(
        self,
    ) -> tuple[
        str,
        SpanContext | None,
        SpanKind,
        SpanContext | None,
        int | None,
        int | None,
        Status,
        dict[str, Any],
        list[Event],
        Sequence[Link],
        InstrumentationScope | None,
        int,
        int,
    ]:
        """What its spool line is written from (`spool.span_line` and its compiled twin), read at once:
        one call of this from C costs less than an attribute lookup there per field."""
        return (
            self._name,
            self._context,
            self._kind,
            self._parent,
            self._start_time,
            self._end_time,
            self._status,
            self._attributes,  # type: ignore[return-value]  # always a dict here
            self._events,
            self._links,
            self._instrumentation_scope,
            self._dropped_attributes,
            self._dropped_events,
        )

    # -- what processors read that ReadableSpan would report as 0 for a plain dict/list --------

    @property
    def dropped_attributes(self) -> int:
        return self._dropped_attributes

    @property
    def dropped_events(self) -> int:
        return self._dropped_events

    # -- the API ----------------------------------------------------------------------------

    def get_span_context(self) -> SpanContext:
        assert self._context is not None
        return self._context

    def is_recording(self) -> bool:
        return self._end_time is None

    def _ended(self, what: str) -> bool:
        if self._end_time is None:
            return False
        logger.warning("Tried calling %s on an ended span.", what)
        return True

    def set_attribute(self, key: str, value: types.AttributeValue) -> None:
        if self._ended("set_attribute"):
            return
        attributes: dict[str, Any] = self._attributes  # type: ignore[assignment]
        if not key or not isinstance(key, str):
            logger.warning("invalid key `%s`. must be non-empty string. Dropping key from attributes.", key)
            self._dropped_attributes += 1
            return
        cleaned = clean_value(value, self._tracer.limits.max_span_attribute_length)
        limit = self._tracer.limits.max_span_attributes
        if key in attributes:
            del attributes[key]  # a key set again moves to the end, as in BoundedAttributes
        elif limit is not None and len(attributes) >= limit:
            self._dropped_attributes += 1
            if not attributes:
                return  # a limit of 0 keeps nothing
            del attributes[next(iter(attributes))]  # full: the oldest goes, as in the SDK
        attributes[key] = cleaned

    def set_attributes(self, attributes: Mapping[str, types.AttributeValue]) -> None:
        for key, value in attributes.items():
            self.set_attribute(key, value)

    def add_event(self, name: str, attributes: types.Attributes = None, timestamp: int | None = None) -> None:
        if self._ended("add_event"):
            return
        events = self._events
        limit = self._tracer.limits.max_events
        if limit is not None and len(events) >= limit:
            self._dropped_events += 1
            return
        max_length = self._tracer.limits.max_attribute_length
        if max_length is None and type(attributes) is dict and _plain_strings(attributes):
            cleaned = dict(attributes)  # what the cleaning below keeps of them: all of it, as it is
        else:
            cleaned = {
                key: clean_value(value, max_length) for key, value in (attributes or {}).items() if key
            }
        events.append(Event(name, cleaned, timestamp if timestamp is not None else time.time_ns()))

    def add_string_event(self, name: str, attributes: dict[str, str], timestamp: int) -> None:
        """`add_event` for a caller whose attributes are known to be non-empty string keys and
        string values (what `add_event` checks per event): the executor's state events. An ended
        span, a length limit or a full event list is left to `add_event`."""
        limits, events = self._tracer.limits, self._events
        if (
            self._end_time is not None
            or limits.max_attribute_length is not None
            or (limits.max_events is not None and len(events) >= limits.max_events)
        ):
            self.add_event(name, attributes, timestamp)
            return
        events.append(Event(name, dict(attributes), timestamp))

    def add_link(self, context: SpanContext, attributes: types.Attributes = None) -> None:
        if self._ended("add_link") or not context.is_valid:
            return
        self._links = (*self._links, Link(context, attributes))

    def update_name(self, name: str) -> None:
        if not self._ended("update_name"):
            self._name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        if self._ended("set_status") or self._status.status_code is StatusCode.OK:
            return  # OK is final, as in the SDK
        if isinstance(status, Status):
            self._status = status
        else:
            self._status = Status(status, description)

    def record_exception(
        self,
        exception: BaseException,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        module = type(exception).__module__
        qualname = type(exception).__qualname__
        recorded: dict[str, Any] = {
            "exception.type": f"{module}.{qualname}" if module and module != "builtins" else qualname,
            "exception.message": str(exception),
            "exception.stacktrace": "".join(traceback.format_exception(exception)),
            "exception.escaped": str(escaped),
        }
        if attributes:
            recorded.update(attributes)
        self.add_event("exception", recorded, timestamp)

    def end(self, end_time: int | None = None) -> None:
        if self._ended("end"):
            return
        self._end_time = end_time if end_time is not None else time.time_ns()
        self._tracer.span_processor.on_end(self)

    def __exit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> None:
        if exc_val is not None and self.is_recording():
            if self._record_exception:
                self.record_exception(exc_val, escaped=True)
            if self._set_status_on_exception:
                self.set_status(Status(StatusCode.ERROR, f"{exc_type.__name__}: {exc_val}"))
        super().__exit__(exc_type, exc_val, exc_tb)


class CurrentSpan:
    """What `DirectTracer.start_as_current_span` returns: the SDK's `start_span` + `use_span`, written
    out as one context manager. The SDK's are two generator-based ones, half the cost of starting
    and ending a span in Ray's wrappers, which open one per submission and per execution. As a
    decorator it is the SDK's own (which starts a span per call, sync or async)."""

    __slots__ = ("_args", "_end_on_exit", "_span", "_token", "_tracer")

    def __init__(self, tracer: DirectTracer, args: tuple[Any, ...], end_on_exit: bool) -> None:
        self._tracer = tracer
        self._args = args  # start_span's, in its order
        self._end_on_exit = end_on_exit

    def __enter__(self) -> trace_api.Span:
        span = self._tracer.start_span(*self._args)
        self._token = context_api.attach(trace_api.set_span_in_context(span))
        self._span = span
        return span

    def __exit__(self, exc_type: Any, exc: BaseException | None, traceback: Any) -> None:
        span = self._span
        try:
            context_api.detach(self._token)
            # As use_span: an Exception (not GeneratorExit and the like) is recorded and sets the status.
            if isinstance(exc, Exception) and span.is_recording():
                if self._args[6]:  # record_exception
                    span.record_exception(exc)
                if self._args[7]:  # set_status_on_exception
                    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        finally:
            if self._end_on_exit:
                span.end()

    def __call__(self, function: Callable[..., Any]) -> Callable[..., Any]:
        decorator: Any = SdkTracer.start_as_current_span(  # type: ignore[misc]  # typed as decorated
            self._tracer, *self._args, end_on_exit=self._end_on_exit
        )
        return decorator(function)  # type: ignore[no-any-return]


class DirectTracer(SdkTracer):
    """An SDK tracer that makes DirectSpans while `direct()` says every processor allows it."""

    def __init__(
        self,
        *args: Any,
        direct: Callable[[], bool],
        sole_processor: Callable[[], SpanProcessor | None],
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.direct = direct
        self.sole_processor = sole_processor  # the provider's span processor when it has one only
        self.limits: SpanLimits = self._span_limits
        self.scope: InstrumentationScope = self._instrumentation_scope

    def keeps_as_given(self, attributes: Mapping[str, Any]) -> bool:
        """True when `set_attribute` would keep every one of these unchanged (string keys and values,
        within the limits): the common case, taken without a call per attribute."""
        limit = self.limits.max_span_attributes
        return (
            (limit is None or len(attributes) <= limit)
            and self.limits.max_span_attribute_length is None
            and _plain_strings(attributes)
        )

    def start_as_current_span(  # type: ignore[override]
        self,
        name: str,
        context: context_api.Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[Link] | None = (),
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> CurrentSpan:
        args = (name, context, kind, attributes, links, start_time, record_exception, set_status_on_exception)
        return CurrentSpan(self, args, end_on_exit)

    def start_span(
        self,
        name: str,
        context: context_api.Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[Link] | None = (),
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace_api.Span:
        if not self.direct():
            if ended_constructor(trace_api.get_current_span(context)):
                context = outside_constructor(context)
            return super().start_span(
                name, context, kind, attributes, links, start_time, record_exception, set_status_on_exception
            )
        links = links or ()
        parent, span_context, sampling = new_span_context(self, context, name, kind, attributes, links)
        if sampling.decision is Decision.DROP:
            return trace_api.NonRecordingSpan(span_context)
        # The default sampler keeps the attributes as given (a read-only view of them): taken as they are.
        return self.started_span(
            name,
            span_context,
            parent,
            kind,
            attributes if self.sampler is DEFAULT_ON else sampling.attributes,
            links,
            start_time if start_time is not None else time.time_ns(),
            context,
            record_exception=record_exception,
            set_status_on_exception=set_status_on_exception,
        )

    def started_span(
        self,
        name: str,
        span_context: SpanContext,
        parent: SpanContext | None,
        kind: SpanKind,
        attributes: types.Attributes,
        links: Sequence[Link],
        start_time: int,
        parent_context: context_api.Context | None,
        *,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> DirectSpan:
        """A DirectSpan whose ids, parent and sampling are already chosen (`new_span_context`),
        handed to the processors' `on_start`."""
        given = attributes if attributes and self.keeps_as_given(attributes) else None
        span = DirectSpan(
            name,
            span_context,
            parent,
            self,
            kind,
            dict(given) if given is not None else {},
            links,
            record_exception,
            set_status_on_exception,
        )
        if given is None:
            for key, value in (attributes or {}).items():
                span.set_attribute(key, value)
        span._start_time = start_time
        # Typed for SDK spans; direct() holds only while every processor reads spans through the API.
        self.span_processor.on_start(span, parent_context=parent_context)  # type: ignore[arg-type]
        return span
