"""A POST's RayEvents read in one pass over its JSON text (_posted_events.c)."""

from collections.abc import Callable
from typing import Any

def bind(
    messages: list[tuple[bool, tuple[Any, ...]]],
    root: int,
    type_field: int,
    head: Callable[[bytes], Any],
    pieces_head: Callable[[bytes], Any],
    parts_type: type,
    /,
) -> None: ...
def read(body: bytes, /) -> tuple[list[Any], bool] | None: ...
def pieces(events: list[Any], records: bool, /) -> bytes | None: ...
def read_pieces(data: bytes, /) -> tuple[list[Any], bool]: ...
