"""The SDK TracerProvider our hooks install, with `get_tracer` cheap for a scope asked for again.

Ray's tracing helper calls `trace.get_tracer(__name__)` on every task submission and every
execution. The SDK (1.45) answers from its cache, but only after building two scope objects and
resetting a warnings filter, about 7 µs each time; here a tracer asked for by name alone (no
version, schema or attributes, which is how Ray asks) comes from a dict. The tracers are the SDK's
own, kept in its registry too, so anything the SDK later does to its tracers applies to them.
"""

from __future__ import annotations

import threading
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.util.types import Attributes


class CachingTracerProvider(TracerProvider):
    """`TracerProvider` whose `get_tracer(name)` is a dict lookup after the first call."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._by_name: dict[str, trace.Tracer] = {}
        self._by_name_lock = threading.Lock()

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: Attributes = None,
    ) -> trace.Tracer:
        if instrumenting_library_version is None and schema_url is None and attributes is None:
            tracer = self._by_name.get(instrumenting_module_name)
            if tracer is None:
                tracer = super().get_tracer(instrumenting_module_name)
                with self._by_name_lock:
                    tracer = self._by_name.setdefault(instrumenting_module_name, tracer)
            return tracer
        return super().get_tracer(
            instrumenting_module_name, instrumenting_library_version, schema_url, attributes
        )
