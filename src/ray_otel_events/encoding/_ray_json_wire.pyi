"""The compiled fast path of ray_json_decode (_ray_json_wire.c)."""

from collections.abc import Callable
from typing import Any

def event_wire(obj: Any, schema: dict[str, Any], /) -> bytes | None: ...
def bind(read_bytes: Callable[[Any], bytes], bytes_cache: dict[str, bytes], /) -> None: ...
