"""Which session folder Ray is writing on this node, and the files of it the collector may read.

Every file is opened relative to a descriptor of the session folder, with O_NOFOLLOW at each step:
a symlink anywhere under the session (the `logs` folder itself included) is refused, so nothing
outside the folder is ever read, whatever a process on the node links there. `session_latest`, the
link Ray keeps in its temp folder, is the one link read, and only to a session folder directly
inside that temp folder.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

SESSION_LINK = "session_latest"
SESSION_NAME = re.compile(r"session_[0-9A-Za-z_.-]+")
NODE_ID = re.compile(rb"node_id=([0-9a-f]{56})\b")
NODE_ID_FILE = re.compile(r"dashboard_agent_listen_port_([0-9a-f]{56})")
NODE_ID_SCAN_BYTES = 256 * 1024  # raylet.out names its node in its first lines
# A session's log files Ray's Logs page lists, and their rotated copies (`raylet.out.1`).
LOG_FILE = re.compile(r"[^/]+\.(?:out|err|log)(?:\.\d+)?")
# Ray's Python writers' export files (ray/_private/event/export_event_logger.py, EventLogType), and
# their rotated copies. The core's (EXPORT_TASK_<pid>, EXPORT_ACTOR, EXPORT_NODE, EXPORT_DRIVER_JOB)
# are left: what they hold reaches serve as RayEvents.
EXPORT_FILE = re.compile(
    r"event_(EXPORT_(?:TRAIN_STATE|SUBMISSION_JOB|DATASET_METADATA|DATASET_OPERATOR_EVENT"
    r"|DATASET_OPERATOR_SCHEMA))\.log(?:\.\d+)?"
)
LOGS = "logs"
EXPORT_EVENTS = "export_events"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def current_session(temp_dir: Path) -> Path | None:
    """The session folder `session_latest` names, if it is a real folder directly inside
    `temp_dir` (else None: Ray has not started here yet, or the link points elsewhere)."""
    try:
        target = os.readlink(temp_dir / SESSION_LINK)
    except OSError:
        return None
    name = Path(target).name
    if not SESSION_NAME.fullmatch(name):
        return None
    if Path(target).is_absolute() and Path(target).parent.resolve() != temp_dir.resolve():
        return None
    folder = temp_dir / name
    try:
        if not stat.S_ISDIR(os.lstat(folder).st_mode):
            return None
    except OSError:
        return None
    return folder


@dataclass(frozen=True)
class Found:
    """A regular file of the session: its path relative to `logs/`, its identity and size."""

    name: str
    kind: str  # "export" or "log"
    dev: int
    ino: int
    size: int


class SessionFolder:
    """The readable files of one session folder (see the module doc)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.name = path.name

    def _open_dir(self, *parts: str) -> int:
        fd = os.open(self.path, _DIR_FLAGS)
        try:
            for part in parts:
                inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = inner
        except OSError:
            os.close(fd)
            raise
        return fd

    def _listed(self, parts: tuple[str, ...], pattern: re.Pattern[str], kind: str) -> list[Found]:
        try:
            fd = self._open_dir(*parts)
        except OSError:  # not there yet, or a symlink: nothing to read
            return []
        try:
            found = []
            with os.scandir(fd) as entries:
                for entry in entries:
                    if not pattern.fullmatch(entry.name) or not entry.is_file(follow_symlinks=False):
                        continue
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    relative = "/".join((*parts[1:], entry.name))
                    found.append(Found(relative, kind, info.st_dev, info.st_ino, info.st_size))
            return found
        finally:
            os.close(fd)

    def files(self) -> list[Found]:
        """The export event files, then the log files (`logs/` itself, not its sub-folders)."""
        return self._listed((LOGS, EXPORT_EVENTS), EXPORT_FILE, "export") + self._listed(
            (LOGS,), LOG_FILE, "log"
        )

    def open(self, found: Found) -> int | None:
        """A descriptor of the file, if it is still the regular file `found` names (same inode):
        never through a symlink."""
        *folders, name = (LOGS, *found.name.split("/"))
        try:
            parent = self._open_dir(*folders)
        except OSError:
            return None
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=parent)
        except OSError:
            return None
        finally:
            os.close(parent)
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or (info.st_dev, info.st_ino) != (found.dev, found.ino):
            os.close(fd)
            return None
        return fd

    def node_id(self) -> str:
        """The node's id: from raylet.out's first lines (`node_id=...`), else the one
        `dashboard_agent_listen_port_<id>` file of the folder; "" while neither is written."""
        raylet = next((f for f in self._listed((LOGS,), LOG_FILE, "log") if f.name == "raylet.out"), None)
        fd = self.open(raylet) if raylet is not None else None
        if fd is not None:
            try:
                head = os.pread(fd, NODE_ID_SCAN_BYTES, 0)
            finally:
                os.close(fd)
            match = NODE_ID.search(head)
            if match:
                return match[1].decode()
        try:
            names = os.listdir(self.path)
        except OSError:
            return ""
        ids = {m[1] for m in map(NODE_ID_FILE.fullmatch, names) if m}
        return ids.pop() if len(ids) == 1 else ""
