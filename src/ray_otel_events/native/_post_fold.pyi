"""The compiled reading and fold of POSTed RayEvent JSON (_post_fold.c)."""

from typing import Any

from ray_otel_events.native._row_writer import RowWriter

def scan(body: bytes, /) -> tuple[int, list[tuple[int, int, int]], bytes] | None: ...
def bind_names(keys: Any, row: Any, values: Any, /) -> None: ...
def bind(
    routes: dict[str, tuple[str, str, str, str | None, int]], plan: tuple[tuple[str | None, Any], ...], /
) -> None: ...

class Folder:
    def __init__(
        self,
        path: str,
        setup: str,
        select: str,
        writer: RowWriter,
        error: type[Exception],
        dictionary: bytes = b"",
    ) -> None: ...
    def fold(
        self, posts: list[Any], received: float, /
    ) -> tuple[dict[str, int], int, int, list[tuple[int, Any, int, int, int]]]: ...
    def close(self) -> None: ...

def sqlite_library() -> tuple[str, str, str | None]: ...
