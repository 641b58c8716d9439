"""The compiled copy of state_merge's hot steps (_state_fold.c)."""

from collections.abc import Callable
from typing import Any

def prepare(event: Any, /) -> Any: ...
def task_definition(row: dict[str, Any], body: dict[str, Any], /) -> None: ...
def task_lifecycle(row: dict[str, Any], body: dict[str, Any], /) -> None: ...
def row_columns(resource: str, row: dict[str, Any], /) -> tuple[str, tuple[Any, ...]]: ...
def hex_id(value: Any, /) -> str | None: ...
def time_ns(value: Any, /) -> int | None: ...
def fold_rows(
    keys: list[Any],
    start: int,
    pieces: dict[Any, list[Any]],
    rows: dict[Any, Any],
    received: float,
    by_type: dict[str, int],
    changed: list[tuple[Any, ...]],
    /,
) -> tuple[int, int]: ...
def group_pieces(events: list[Any], /) -> tuple[dict[Any, list[Any]], int]: ...
def bind_rows(
    id_columns: dict[str, str], tasks: str, fold_errors: tuple[type[BaseException], ...], /
) -> None: ...
def bind_names(keys: Any, row: Any, values: Any, /) -> None: ...
def bind(
    prepare: Callable[[Any], Any],
    task_definition: Callable[..., None],
    task_lifecycle: Callable[..., None],
    row_columns: Callable[..., tuple[str, tuple[Any, ...]]],
    routes: dict[str, tuple[Any, ...]],
    piece: type,
    prepared: type,
    index_plan: dict[str, tuple[tuple[Any, Any], ...]],
    dumps: Callable[[Any], bytes],
    /,
) -> None: ...
