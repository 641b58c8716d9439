"""RayEventsToOtel's per-event work and task spans, compiled; a lifecycle payload's state
transitions and what a task's span reads of its pieces, read from their wire bytes (_entity_spans.c)."""

from collections.abc import Callable, Iterable
from typing import Any

RAY_FIELDS: tuple[str, ...]  # full names of the fields of Ray's messages read here; bind() numbers them

def transitions(wire: bytes, kind: str, /) -> list[tuple[int, int, None]] | None: ...
def task_parts(definition: bytes | None, actor_task: bool, lifecycle: bytes, /) -> Any | None: ...
def digest(what: int, session: str, ident: bytes, attempt: int, /) -> bytes: ...
def route(events: list[Any], workers: int, /) -> list[list[Any]]: ...
def bind(binding: Any, /) -> None: ...

class Core:
    open_entities: int
    open_bytes: int
    def __init__(
        self,
        max_open_entities: int,
        max_open_bytes: int,
        entity_ttl_s: float,
        terminal_grace_s: float,
        dedup_window: int,
        clock: Callable[[], float],
        observed_clock_ns: Callable[[], int],
        envelope: Callable[[str], tuple[bytes, bytes]] | None = None,
    ) -> None: ...
    def add(
        self, events: list[Any], logs: bool, assemble: bool, /
    ) -> tuple[list[Any], list[Any], list[tuple[bytes, Any]], tuple[Any, ...]]: ...
    def expire(self) -> tuple[list[Any], tuple[Any, ...]]: ...
    def flush(self) -> tuple[list[Any], tuple[Any, ...]]: ...
    def remember_emitted(self, keys: Iterable[tuple[str, str, bytes, int]], /) -> None: ...
