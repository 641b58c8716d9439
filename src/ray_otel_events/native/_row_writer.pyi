"""The compiled row writer (_row_writer.c): upserts on a thread and connection of its own."""

from typing import Any

class RowWriter:
    def __init__(
        self,
        path: str,
        sql: str,
        setup: str,
        columns: int,
        error: type[Exception],
        packed: int = -1,
        dictionary: bytes = b"",
        hex_ids: bytes = b"",
        session: int = -1,
        session_sql: str | None = None,
        received: int = -1,
        row_ids: bytes = b"",
    ) -> None: ...
    def add(self, rows: list[tuple[Any, ...]], /) -> None: ...
    def commit(self) -> None: ...
    def rollback(self) -> None: ...
    def keep(self, session: str, received: float, bodies: list[bytes], /) -> None: ...
    def prepare_keep(self, raw_sql: str, seen_sql: str, dictionary: bytes, /) -> None: ...
    def close(self) -> None: ...

def sqlite_library() -> tuple[str, str, str | None]: ...
