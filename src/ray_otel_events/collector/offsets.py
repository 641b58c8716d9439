"""The collector's offsets and counters on disk: what it has shipped of each file, per session.

`offsets.json` is replaced whole (written beside, fsynced, renamed): a crash leaves the old or the
new one, never half of one. It is saved after what it records was stored by `serve`, so a restart
sends again at most what was sent since the last save (at least once; serve's intakes take a resend).
It holds the sessions still being read (the newest, and one whose files are being drained after Ray
started another) and the names of a few finished ones; `stats.json` holds the counters. One
collector a folder: it holds a lock on `lock` in it while it runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ray_otel_events.collector.tailer import Tracked

logger = logging.getLogger(__name__)

VERSION = 1
FINISHED_KEPT = 20  # finished sessions remembered, so a restart does not read them again


class OffsetsError(Exception):
    """The state folder cannot be used (the message says why)."""


@dataclass
class SessionOffsets:
    node_id: str = ""
    files: dict[tuple[int, int], Tracked] = field(default_factory=dict)  # by (dev, inode)
    name_ends: dict[str, int] = field(default_factory=dict)  # a log name: stored bytes reserved

    def reserve(self, tracked: Tracked, end: int) -> None:
        """A log file's generation holds stored offsets up to `end`: a later one starts after."""
        if tracked.kind == "log":
            self.name_ends[tracked.name] = max(self.name_ends.get(tracked.name, 0), end)


class Offsets:
    """The state folder (see the module doc)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OffsetsError(f"cannot create the state folder {folder}: {exc}") from None
        self._lock = _locked(folder / "lock")
        self.path = folder / "offsets.json"
        self.stats_path = folder / "stats.json"
        self.sessions: dict[str, SessionOffsets] = {}
        self.finished: list[str] = []
        self.counters: Counter[str] = Counter()
        self._written: dict[Path, bytes] = {}
        self._load()

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            raise OffsetsError(
                f"{self.path} cannot be read ({exc}); move it away to start over (files are read again)"
            ) from None
        if not isinstance(data, dict) or data.get("version") != VERSION:
            raise OffsetsError(f"{self.path} is not offsets of this version; move it away to start over")
        try:
            for name, saved in data.get("sessions", {}).items():
                files = [Tracked.load(f) for f in saved.get("files", [])]
                self.sessions[name] = SessionOffsets(
                    str(saved.get("node_id", "")),
                    {(f.dev, f.ino): f for f in files},
                    {str(k): int(v) for k, v in saved.get("name_ends", {}).items()},
                )
            self.finished = [str(name) for name in data.get("finished", [])]
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise OffsetsError(f"{self.path} is damaged ({exc!r}); move it away to start over") from None
        with contextlib.suppress(OSError, ValueError):  # counters only: they start again
            self.counters.update(json.loads(self.stats_path.read_text()))

    def close(self) -> None:
        os.close(self._lock)  # closing the only descriptor drops the flock

    def session(self, name: str) -> SessionOffsets:
        return self.sessions.setdefault(name, SessionOffsets())

    def finish(self, name: str) -> None:
        """A session read to its end: its offsets go, its name stays (a restart skips it)."""
        self.sessions.pop(name, None)
        self.finished = [*self.finished, name][-FINISHED_KEPT:]

    def save(self) -> None:
        data: dict[str, Any] = {
            "version": VERSION,
            "sessions": {
                name: {
                    "node_id": s.node_id,
                    "files": [f.saved() for f in s.files.values()],
                    "name_ends": s.name_ends,
                }
                for name, s in self.sessions.items()
            },
            "finished": self.finished,
        }
        for path, text in (
            (self.path, json.dumps(data, sort_keys=True).encode()),
            (self.stats_path, json.dumps(dict(self.counters), sort_keys=True).encode()),
        ):
            if self._written.get(path) != text:  # a pass that moved nothing writes nothing
                try:
                    _replace(path, text)
                except OSError as exc:  # a full disk, say: the next save tries again
                    logger.error("cannot save %s: %s (what was shipped since is sent again)", path, exc)
                    continue
                self._written[path] = text


def _locked(path: Path) -> int:
    """An exclusive flock on `path`, held while the descriptor is open: two collectors on one state
    folder would overwrite each other's offsets."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise OffsetsError(f"cannot open {path}: {exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise OffsetsError(
            f"{path.parent} is in use by another collector (pid {holder}); stop it or give this one"
            " another --state-dir"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _replace(path: Path, data: bytes) -> None:
    part = path.with_name(path.name + ".part")
    with open(part, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(part, path)
