"""A RayEvent's head read from its wire bytes, and a definition kept slim (_event_head.c)."""

from typing import Any

RAY_FIELDS: tuple[str, ...]

def bind(
    specs: dict[int, tuple[Any, ...]], keys: tuple[bytes, ...], head_type: type, ray_fields: dict[str, int], /
) -> None: ...
def head(wire: bytes, /) -> Any: ...
def slim(keep: bytes, func_field: int, wire: bytes, /) -> bytes: ...
