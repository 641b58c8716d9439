"""Plain JSON records of OTLP spans written from a ScopeSpans' wire bytes (_span_records.c)."""

from collections.abc import Callable
from typing import Any

def records(scope_spans: bytes, tail: bytes, /) -> list[bytes | None]: ...
def bind(
    dumps: Callable[[Any], bytes], kind_names: tuple[bytes, ...], code_names: tuple[bytes, ...], /
) -> None: ...
