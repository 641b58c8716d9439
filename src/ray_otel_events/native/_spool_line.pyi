"""The OTLP hook's spool lines, compiled (_spool_line.c)."""

from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext

def span_line(span: ReadableSpan, kind: str, /) -> bytes | None: ...
def submission_line(
    name: str,
    context: SpanContext,
    parent: SpanContext | None,
    start_ns: int,
    end_ns: int,
    attributes: Mapping[str, Any] | None,
    scope: Any,
    /,
) -> bytes | None: ...
def bind(
    direct_span: type,
    span_context: type,
    kinds: tuple[tuple[Any, int], ...],
    producer: int,
    status_codes: tuple[tuple[Any, int], ...],
    unset_status: Any,
    default_trace_state: Any,
    dumps: Callable[[Any], bytes],
    /,
) -> None: ...
