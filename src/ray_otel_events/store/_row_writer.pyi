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
        many_sql: str | None = None,
        many: int = 0,
    ) -> None: ...
    def add(self, rows: list[tuple[Any, ...]], /) -> None: ...
    def commit(self) -> None: ...
    def rollback(self) -> None: ...
    def close(self) -> None: ...
