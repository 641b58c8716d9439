"""The SDK TracerProvider our hooks install: tracers cached by name, spans direct when they can be.

Ray's tracing helper calls `trace.get_tracer(__name__)` on every task submission and every
execution. The SDK (1.45) answers from its cache, but only after building two scope objects and
resetting a warnings filter, each time; here a tracer asked for by name alone (no
version, schema or attributes, which is how Ray asks) comes from a dict. Those tracers make
`DirectSpan`s (tracing/direct_spans.py) while every processor added to the provider only reads
ended spans, and SDK spans as soon as one that may not is added.
"""

from __future__ import annotations

import warnings
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.sampling import Sampler
from opentelemetry.sdk.util.instrumentation import InstrumentationInfo, InstrumentationScope
from opentelemetry.util.types import Attributes

from ray_otel_events.tracing.direct_spans import DirectTracer, reads_spans_only


class CachingTracerProvider(TracerProvider):
    """`TracerProvider` whose `get_tracer(name)` is a dict lookup after the first call."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._by_name: dict[str, trace.Tracer] = {}
        self.direct_spans = True
        self._processors: list[SpanProcessor] = []

    def add_span_processor(self, span_processor: SpanProcessor) -> None:
        self.direct_spans = self.direct_spans and reads_spans_only(span_processor)
        self._processors.append(span_processor)
        super().add_span_processor(span_processor)

    def _direct(self) -> bool:
        return self.direct_spans

    def _sole_processor(self) -> SpanProcessor | None:
        return self._processors[0] if len(self._processors) == 1 else None

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: Attributes = None,
    ) -> trace.Tracer:
        if instrumenting_library_version is None and schema_url is None and attributes is None:
            name = instrumenting_module_name
            tracer = self._by_name.get(name)
            if tracer is None:
                tracer = self._by_name[name] = self._direct_tracer(name)
            return tracer
        return super().get_tracer(
            instrumenting_module_name, instrumenting_library_version, schema_url, attributes
        )

    def _direct_tracer(self, name: str) -> trace.Tracer:
        """What the SDK's `get_tracer(name)` builds, as a DirectTracer, kept in the SDK's registry so
        both answer with one tracer (a tracer the SDK already made for the scope stays as it is)."""
        if self._disabled:
            return super().get_tracer(name)
        scope = InstrumentationScope(name, "", None, None)
        with self._tracers_lock:
            tracer = self._tracers.get(scope)
            if tracer is None:
                with warnings.catch_warnings():  # the SDK's Tracer still takes the deprecated info
                    warnings.simplefilter("ignore", DeprecationWarning)
                    info = InstrumentationInfo(name, "", None)
                tracer = self._tracers[scope] = DirectTracer(
                    self.sampler,
                    self.resource,
                    self._active_span_processor,
                    self.id_generator,
                    info,
                    self._span_limits,
                    scope,
                    direct=self._direct,
                    sole_processor=self._sole_processor,
                )
        return tracer


def replace_sampler(provider: TracerProvider, sampler: Sampler) -> None:
    """Make `sampler` decide every span `provider` starts from now on, its existing tracers' too
    (each SDK tracer keeps the sampler it was made with)."""
    with provider._tracers_lock:
        provider.sampler = sampler
        for tracer in provider._tracers.values():
            tracer.sampler = sampler
