"""The SDK TracerProvider our hooks install, with `get_tracer` cheap for a scope asked for again.

Ray's tracing helper calls `trace.get_tracer(__name__)` on every task submission and every
execution. The SDK (1.45) answers from its cache, but only after building two scope objects and
resetting a warnings filter, about 7 µs each time; here a tracer asked for by name alone (no
version, schema or attributes, which is how Ray asks) comes from a dict. The tracers are the SDK's
own, kept in its registry too, so anything the SDK later does to its tracers applies to them.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.util.types import Attributes


class CachingTracerProvider(TracerProvider):
    """`TracerProvider` whose `get_tracer(name)` is a dict lookup after the first call."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._by_name: dict[str, trace.Tracer] = {}

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
            if tracer is None:  # the SDK's registry gives every caller the same tracer for a scope
                tracer = self._by_name[name] = super().get_tracer(name)
            return tracer
        return super().get_tracer(
            instrumenting_module_name, instrumenting_library_version, schema_url, attributes
        )
