"""A lifecycle payload's state transitions, and what a task's span reads of its pieces, read from
their wire bytes (_lifecycle_wire.c)."""

from typing import Any

def transitions(wire: bytes, field_number: int, /) -> list[tuple[int, int, None]] | None: ...
def task_parts(definition: bytes | None, actor_task: bool, lifecycle: bytes, /) -> tuple[Any, ...] | None: ...
