"""Accepted POST bodies kept on disk until their events are folded into the store.

`serve` answers a POST once its body is here, and folds it a moment later in a larger batch (see
`background_fold`): a 200 means the events are on disk, and a `kill -9` between the answer and the
fold loses nothing, because the next start folds again every body not marked folded. Folding twice
is harmless: a row keeps the ids of the events folded into it and skips ids it has seen.

Bodies are appended to segment files as records of `<length u32><crc32 u32><body>`; a record cut
short by a crash (never answered, so never accepted) fails its length or checksum and ends the
segment. After each fold the position folded up to is written to `folded`, and segments wholly
before it are deleted. The files are written without fsync, like the store's WAL
(`synchronous=NORMAL`): safe against a killed process, not against a lost machine.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

logger = logging.getLogger(__name__)

_HEADER = struct.Struct("<II")
_MARKER = "folded"
_SEGMENT_BYTES = 64 * 1024 * 1024  # a new segment once the current one holds this much


class Position(NamedTuple):
    """The end of a record: everything before it in segment `segment` and earlier segments."""

    segment: int
    offset: int


def _segment_name(number: int) -> str:
    return f"{number:010d}.spool"


class IntakeSpool:
    """Append-only segments of POST bodies in one directory, and the position folded up to."""

    def __init__(self, directory: Path, *, segment_bytes: int = _SEGMENT_BYTES) -> None:
        self.directory = directory
        self._segment_bytes = segment_bytes
        directory.mkdir(parents=True, exist_ok=True)
        self._folded = self._read_marker()
        numbers = self._segments()
        self._segment = max([self._folded.segment, *numbers]) + 1  # appends never reopen a segment
        self._fd = self._open_segment()
        self._offset = 0
        self._end = self._folded  # of the last record appended or given back by `pending`

    def _open_segment(self) -> int:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        return os.open(self.directory / _segment_name(self._segment), flags, 0o644)

    def _segments(self) -> list[int]:
        found = []
        for item in self.directory.glob("*.spool"):
            try:
                found.append(int(item.stem))
            except ValueError:
                continue
        return sorted(found)

    def _read_marker(self) -> Position:
        try:
            segment, offset = (self.directory / _MARKER).read_text().split()
            return Position(int(segment), int(offset))
        except FileNotFoundError:
            return Position(0, 0)
        except ValueError:
            logger.warning("%s is unreadable: folding every kept body again", self.directory / _MARKER)
            return Position(0, 0)

    def pending(self) -> Iterator[tuple[bytes, Position]]:
        """The bodies appended before this spool was opened and not marked folded, oldest first."""
        for number in self._segments():
            if number >= self._segment or number < self._folded.segment:
                continue
            start = self._folded.offset if number == self._folded.segment else 0
            with open(self.directory / _segment_name(number), "rb") as segment:
                data = segment.read()
            offset = start
            while offset + _HEADER.size <= len(data):
                length, crc = _HEADER.unpack_from(data, offset)
                body = data[offset + _HEADER.size : offset + _HEADER.size + length]
                if len(body) != length or zlib.crc32(body) != crc:
                    logger.warning("%s ends with a record cut short at byte %d", segment.name, offset)
                    break
                offset += _HEADER.size + length
                self._end = Position(number, offset)
                yield body, self._end

    def append(self, body: bytes) -> Position:
        """Write one body; once this returns it survives the process (it is the OS's). If the write
        fails (a full disk), the segment is cut back, so no torn record hides the ones after it."""
        if self._offset >= self._segment_bytes:
            os.close(self._fd)
            self._segment += 1
            self._fd = self._open_segment()
            self._offset = 0
        header = _HEADER.pack(len(body), zlib.crc32(body))
        size = _HEADER.size + len(body)
        try:
            written = os.writev(self._fd, (header, body))  # no copy of a megabyte body to join them
            if written < size:  # rare on a regular file: finish it
                rest = memoryview(header + body)[written:]
                while rest:
                    rest = rest[os.write(self._fd, rest) :]
        except OSError:
            os.ftruncate(self._fd, self._offset)
            raise
        self._offset += size
        self._end = Position(self._segment, self._offset)
        return self._end

    def mark_folded(self, position: Position) -> None:
        """Everything up to `position` is in the store: remember it, and drop the segments before it."""
        if position <= self._folded:
            return
        marker = self.directory / _MARKER
        temporary = marker.with_suffix(".tmp")
        temporary.write_text(f"{position.segment} {position.offset}\n")
        os.replace(temporary, marker)
        entered_a_segment = position.segment > self._folded.segment
        self._folded = position
        if entered_a_segment:  # only then can a segment have become wholly folded
            for number in self._segments():
                if number < position.segment:
                    (self.directory / _segment_name(number)).unlink(missing_ok=True)

    def close(self) -> None:
        """Closes the current segment; deleted too when everything in it is folded."""
        os.close(self._fd)
        if self._offset == 0:
            (self.directory / _segment_name(self._segment)).unlink(missing_ok=True)
        if self._folded >= self._end:
            for number in self._segments():
                (self.directory / _segment_name(number)).unlink(missing_ok=True)
