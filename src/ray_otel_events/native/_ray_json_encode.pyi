"""RayEvents' wire bytes straight to Ray's JSON (_ray_json_encode.c)."""

from collections.abc import Callable
from typing import Any

def encode_each(payloads: list[bytes], schema: list[Any], /) -> list[bytes | None]: ...
def bind(dumps: Callable[[Any], bytes], /) -> None: ...
