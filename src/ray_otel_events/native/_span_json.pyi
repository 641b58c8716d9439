"""Span lines and their ISO times, compiled (_span_json.c)."""

from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.trace import SpanContext

def iso(ns: int, /) -> str: ...
def line(
    name: str,
    context: SpanContext,
    trace_state_json: str,
    kind_json: str,
    parent: SpanContext | None,
    start_ns: int | None,
    end_ns: int | None,
    status_json: str,
    attributes: dict[str, Any] | None,
    events: Sequence[Any],
    links_json: str,
    resource_json: str,
    /,
) -> str | None: ...
def bind(fallback: Callable[[int], str], /) -> None: ...
