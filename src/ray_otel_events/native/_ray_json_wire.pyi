"""The compiled fast path of ray_json_decode (_ray_json_wire.c)."""

from typing import Any

def event_wire(obj: Any, schema: dict[str, Any], /) -> bytes | None: ...
