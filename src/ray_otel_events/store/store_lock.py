"""One writing process per store file: a lock on a file beside it, held for the process's life.

Two `serve` processes on one store race: each folds a task's events into the row it read, and the
later commit wins, so a task attempt can end in the wrong state. SQLite's own locks serialize the
writes, not the read-fold-write of a row. The first writer takes an exclusive `flock` on
`<store>.lock` and keeps it open until it exits (the kernel drops it then, however the process
ends); a second is refused, told which process holds the store. Readers (`ray-otel-events list
--store FILE`, read-only stores) take no lock.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class StoreLockedError(Exception):
    """Another process writes this store."""


def lock_path(store: Path) -> Path:
    return store.with_name(store.name + ".lock")


class StoreLock:
    """The exclusive lock of one store file, held until `release` (or the process's end)."""

    def __init__(self, store: Path, *, spool: bool = False) -> None:
        """Raises StoreLockedError naming the holder when another process holds it, OSError when
        the lock file cannot be made. `spool`: `store` is a PostgreSQL store's intake spool (the
        database takes many writers, each with a spool of its own), so the fix is another --spool."""
        self.path = lock_path(store)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            fix = (
                "another --spool (serves sharing a database each need their own)"
                if spool
                else "another --store"
            )
            raise StoreLockedError(
                f"{store} is in use by another ray-otel-events serve (pid {holder}, lock {self.path});"
                f" stop it or give this one {fix}"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor drops the flock
            self._fd = None
