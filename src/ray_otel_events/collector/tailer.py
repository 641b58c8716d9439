"""Reading a session's files from their saved offsets, within bounds, each line taken as hostile.

A file is known by its inode and a fingerprint of its first bytes (up to FINGERPRINT_BYTES), not
by its name: a rename during rotation (`event_X.log` -> `event_X.log.1`) is the same file, read on
from where it was; a new file at an old name, or an inode the system gave again, is a new file read
from its start; a file shorter than its offset was truncated and is read again from 0. A log file
keeps the name it was first seen under: its stored copy goes on across rotations and truncations
(`base`, the stored offset of its byte 0, moves past what earlier generations of that name held).

No read holds more than a line limit plus one block: a line over the limit is skipped (and
counted) up to its newline, however long; a last line without its newline waits for it.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict, dataclass
from typing import Any

FINGERPRINT_BYTES = 1024
BLOCK = 64 * 1024


@dataclass
class Tracked:
    """One file followed: what `offsets` saves of it."""

    kind: str  # "export" or "log"
    name: str  # relative to logs/: a log file's stored name (its first), an export file's last
    dev: int
    ino: int
    head: str  # sha256 of the first `head_len` bytes
    head_len: int
    pos: int = 0  # bytes of the file shipped or skipped
    base: int = 0  # a log file: the stored offset of its byte 0
    skipping: bool = False  # inside a line over the limit: dropped up to the next newline
    announced: bool = False  # a log file: serve knows it (an empty file is listed too)

    def saved(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def load(cls, data: dict[str, Any]) -> Tracked:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def fingerprint(fd: int, size: int) -> tuple[str, int]:
    head = os.pread(fd, min(FINGERPRINT_BYTES, size), 0)
    return hashlib.sha256(head).hexdigest(), len(head)


def same_file(fd: int, tracked: Tracked) -> bool:
    """Whether the open file still starts with the bytes `tracked` was first seen with."""
    head = os.pread(fd, tracked.head_len, 0)
    return len(head) == tracked.head_len and hashlib.sha256(head).hexdigest() == tracked.head


def grow_fingerprint(fd: int, tracked: Tracked, size: int) -> None:
    """A file first seen shorter than FINGERPRINT_BYTES: its fingerprint grows with it."""
    if tracked.head_len < FINGERPRINT_BYTES and size > tracked.head_len:
        tracked.head, tracked.head_len = fingerprint(fd, size)


@dataclass
class Lines:
    """What one read of an export file gave: whole lines under the limit, the offset after the
    last byte consumed, and how many lines were over the limit."""

    lines: list[bytes]
    pos: int
    skipping: bool
    too_long: int


def read_lines(fd: int, pos: int, skipping: bool, size: int, max_line: int, max_bytes: int) -> Lines:
    """Whole lines from `pos` up to about `max_bytes` of them; a partial last line is left."""
    lines: list[bytes] = []
    taken = too_long = 0
    start = pos  # the offset after the last byte consumed
    buffer = b""
    while pos < size and taken < max_bytes:
        block = os.pread(fd, min(BLOCK, size - pos), pos)
        if not block:
            break
        pos += len(block)
        buffer += block
        while (newline := buffer.find(b"\n")) >= 0:
            line, buffer = buffer[:newline], buffer[newline + 1 :]
            start += newline + 1
            if skipping:  # the end of a line over the limit
                skipping = False
            elif len(line) > max_line:
                too_long += 1
            else:
                lines.append(line)
                taken += len(line)
        if len(buffer) > max_line:  # no newline within the limit: dropped up to the next one
            too_long += 0 if skipping else 1
            skipping = True
            start += len(buffer)
            buffer = b""
    return Lines(lines, start, skipping, too_long)


def read_bytes(fd: int, pos: int, size: int, max_bytes: int, final: bool) -> bytes:
    """A log file's bytes from `pos`: at most `max_bytes`, up to the last newline unless a full
    read has none (a long line goes in pieces) or `final` (shutting down: all that is written)."""
    data = os.pread(fd, min(max_bytes, size - pos), pos) if size > pos else b""
    if final or len(data) == max_bytes:
        cut = data.rfind(b"\n") + 1 if len(data) == max_bytes and not final else len(data)
        return data[: cut or len(data)]
    return data[: data.rfind(b"\n") + 1]


def looks_binary(fd: int, size: int) -> bool:
    """A NUL in the first bytes: not a text log (a core dump, a binary someone wrote there)."""
    return b"\0" in os.pread(fd, min(FINGERPRINT_BYTES, size), 0)
