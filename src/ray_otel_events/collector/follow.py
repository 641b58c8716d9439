"""One pass over a session's files: each read from its offset and shipped, its offset then saved.

`Follower.step` is what the collect loop calls every poll: it finds the session `session_latest`
names; when Ray started a new one, the old one is read to its end first (its files are complete),
then forgotten. A session is followed once its node id is known (raylet writes it at start): its
log files are stored under that node. Export event lines that are not JSON objects never leave the
node (counted by reason).
"""

from __future__ import annotations

import logging
import os
import re
import socket
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson

from ray_otel_events.collector.offsets import Offsets, SessionOffsets
from ray_otel_events.collector.session_folder import Found, SessionFolder, current_session
from ray_otel_events.collector.shipper import NotNow, Shipper
from ray_otel_events.collector.tailer import (
    Tracked,
    fingerprint,
    grow_fingerprint,
    looks_binary,
    read_bytes,
    read_lines,
    same_file,
)

logger = logging.getLogger(__name__)

_NUMBERED = re.compile(r"(.+)\.(\d+)")
_INNER_NUMBER = re.compile(r"(.+)\.(\d+)\.(out|err|log)")


@dataclass(frozen=True)
class Bounds:
    max_line_bytes: int = 1024 * 1024  # an export line over this is skipped
    batch_bytes: int = 4 * 1024 * 1024  # export lines per POST, about
    chunk_bytes: int = 1024 * 1024  # a log file's bytes per POST
    max_file_bytes: int = 256 * 1024 * 1024  # a log file first seen longer: only its last bytes


class Follower:
    """Reads one node's sessions under Ray's temp folder (see the module doc)."""

    def __init__(
        self,
        temp_dir: Path,
        offsets: Offsets,
        shipper: Shipper,
        bounds: Bounds = Bounds(),
        on_follow: Callable[[str], None] = lambda _: None,
        logs: bool = True,
    ) -> None:
        """`logs`: also the session's log files (False: a destination taking export events only)."""
        self.temp_dir = temp_dir
        self.logs = logs
        self.offsets = offsets
        self.shipper = shipper
        self.bounds = bounds
        self.on_follow = on_follow
        self.counters = offsets.counters
        self.hostname = socket.gethostname()
        self.following: SessionFolder | None = None
        self.skipped: set[tuple[int, int]] = set()  # (dev, inode) of files not followed
        self.unsent = 0  # files left with bytes unsent by a failed POST, this run
        self.told: set[str] = set()  # sessions whose wait for a node id was logged

    def step(self, final: bool = False) -> None:
        """Ship what is new; `final` (stopping): also the partial last lines of log files."""
        latest = current_session(self.temp_dir)
        for name in list(self.offsets.sessions):  # sessions left unfinished, oldest first
            if latest is None or name != latest.name:
                old = self.temp_dir / name
                unsent = self.unsent
                if old.is_dir() and not old.is_symlink():
                    self._read(SessionFolder(old), final=True)
                if self.unsent == unsent:  # all read and stored (else tried again next pass)
                    self.offsets.finish(name)
                    self.offsets.save()
        if latest is None or latest.name in self.offsets.finished:
            return
        folder = SessionFolder(latest)
        state = self.offsets.session(folder.name)
        if not state.node_id:
            state.node_id = folder.node_id()
            if not state.node_id:  # raylet has not named its node yet (or `logs` is not readable)
                if folder.name not in self.told:
                    self.told.add(folder.name)
                    logger.info("session %s: waiting for logs/raylet.out to name the node", folder.name)
                return
        if self.following is None or self.following.name != folder.name:
            self.following = folder
            self.on_follow(folder.name)
        self._read(folder, final)

    def _read(self, folder: SessionFolder, final: bool) -> None:
        state = self.offsets.session(folder.name)
        if not state.node_id:
            state.node_id = folder.node_id()
        present = [f for f in folder.files() if self.logs or f.kind != "log"]
        ids = {(f.dev, f.ino) for f in present}
        for key in [k for k in state.files if k not in ids]:  # gone (deleted past Ray's backups)
            gone = state.files.pop(key)
            state.reserve(gone, gone.base + gone.pos)
        # rotated copies (`.log.2`, `.log.1`) before the file written now: oldest lines first
        for found in sorted(present, key=lambda f: (f.kind, _rotated(f.name)[0], -_rotated(f.name)[1])):
            fd = folder.open(found)
            if fd is None:
                continue
            try:
                tracked = self._tracked(state, found, fd)
                if tracked is not None:
                    self._ship(folder.name, state, tracked, fd, final)
            except NotNow:  # read again from its offset on a later pass
                self.unsent += 1
            finally:
                os.close(fd)
            self.offsets.save()

    def _tracked(self, state: SessionOffsets, found: Found, fd: int) -> Tracked | None:
        """The file's record, new for a file not seen before (or a reused inode); None: skipped."""
        size = os.fstat(fd).st_size
        key = (found.dev, found.ino)
        tracked = state.files.get(key)
        if tracked is not None and not same_file(fd, tracked):
            state.reserve(tracked, tracked.base + tracked.pos)
            del state.files[key]
            tracked = None
            self.counters["files_replaced"] += 1
        if tracked is None:
            if found.kind == "log" and size and looks_binary(fd, size):
                if key not in self.skipped:  # said once a file, each run
                    self.skipped.add(key)
                    self.counters["files_skipped_binary"] += 1
                    logger.warning(
                        "%s/%s has NUL bytes in its head: not a text log, skipped", "logs", found.name
                    )
                return None
            head, head_len = fingerprint(fd, size)
            tracked = Tracked(found.kind, found.name, found.dev, found.ino, head, head_len)
            if found.kind == "log":
                tracked.base = state.name_ends.get(found.name, 0)
                live = [t for t in state.files.values() if t.kind == "log" and t.name == found.name]
                for other in live:  # the generation before (renamed by rotation), whole
                    tracked.base = max(tracked.base, other.base + other.pos)
                if size > self.bounds.max_file_bytes:
                    tracked.pos = size - self.bounds.max_file_bytes
                    self.counters["log_bytes_skipped_head"] += tracked.pos
                    logger.warning(
                        "logs/%s is %d bytes: only its last %d are collected",
                        found.name,
                        size,
                        self.bounds.max_file_bytes,
                    )
            state.files[key] = tracked
            self.counters["files_followed"] += 1
        elif found.kind == "export":
            tracked.name = found.name
        if size < tracked.pos:  # truncated: read again from its start
            self.counters["files_truncated"] += 1
            state.reserve(tracked, tracked.base + tracked.pos)
            tracked.base += tracked.pos
            tracked.pos = 0
            tracked.skipping = False
        grow_fingerprint(fd, tracked, size)
        return tracked

    def _ship(self, session: str, state: SessionOffsets, tracked: Tracked, fd: int, final: bool) -> None:
        while True:
            size = os.fstat(fd).st_size
            if tracked.kind == "export":
                read = read_lines(
                    fd,
                    tracked.pos,
                    tracked.skipping,
                    size,
                    self.bounds.max_line_bytes,
                    self.bounds.batch_bytes,
                )
                skipped: Counter[str] = Counter(lines_skipped_too_long=read.too_long)
                events = [line for line in read.lines if _is_object(line, skipped)]
                if events and self.shipper.export_events(session, state.node_id, self.hostname, events):
                    self.counters["export_events_shipped"] += len(events)
                    self.counters["export_bytes_shipped"] += sum(map(len, events))
                self.counters.update(skipped)  # once the read is done with (not on a NotNow)
                moved = read.pos != tracked.pos or read.skipping != tracked.skipping
                tracked.pos, tracked.skipping = read.pos, read.skipping
                if not moved:
                    return
            else:
                data = read_bytes(fd, tracked.pos, size, self.bounds.chunk_bytes, final)
                if not data and tracked.announced:
                    return
                if self.shipper.log_bytes(
                    session, state.node_id, tracked.name, tracked.base + tracked.pos, data
                ):
                    self.counters["log_bytes_shipped"] += len(data)
                tracked.pos += len(data)
                tracked.announced = True
            self.offsets.save()


def _is_object(line: bytes, skipped: Counter[str]) -> bool:
    """Whether an export line is a JSON object (the rest never leave the node: counted)."""
    text = line.strip()
    if not text:
        skipped["lines_skipped_empty"] += 1
        return False
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        skipped["lines_skipped_bad_json"] += 1
        return False
    if not isinstance(value, dict):
        skipped["lines_skipped_not_object"] += 1
        return False
    return True


def _rotated(name: str) -> tuple[str, int]:
    """(the file a rotated copy was, its number): `event_X.log.2` (Python's handlers) and
    `raylet.2.out` (spdlog's) are `event_X.log` and `raylet.out`, 2; a file written now, 0."""
    numbered = _NUMBERED.fullmatch(name)
    if numbered:
        return numbered[1], int(numbered[2])
    inner = _INNER_NUMBER.fullmatch(name)
    if inner:
        return f"{inner[1]}.{inner[3]}", int(inner[2])
    return name, 0
