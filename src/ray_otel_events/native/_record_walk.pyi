"""The compiled copy of log_records._walk_python (_record_walk.c)."""

from collections.abc import Callable
from typing import Any

def walk(obj: Any, plan: Any, attrs: list[bytes], /) -> bytes: ...
def bind(
    other_entry: Callable[..., bytes],
    list_item: Callable[..., bytes],
    python_walk: Callable[..., bytes],
    mapping: type,
    leaf_values_max: int,
    /,
) -> None: ...
