"""The store a `--store` argument names: a file path is SQLite (one process, the embedded
default), a `postgresql://` URL is PostgreSQL (several `serve` processes on one database).

Everything else that looks like a URL (`mysql://`, `postgres:/x`, `sqlite://`) is refused by name
rather than taken for a folder named after its scheme. Its own module so that the backends, which
import the interface (`backend`), are imported by nothing below them.
"""

from __future__ import annotations

import re
from pathlib import Path

from ray_otel_events.store.backend import Store, UnsupportedStoreError

POSTGRES_SCHEMES = ("postgresql", "postgres")
# A scheme and a colon, then a slash: what a user means as a URL (a bare `C:` or `name:x` is a file).
_URL_LIKE = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:/")


def is_url(location: str | Path) -> bool:
    """Whether `--store` names a database server rather than a file."""
    return isinstance(location, str) and bool(_URL_LIKE.match(location))


def check_location(location: str | Path) -> None:
    """Raises UnsupportedStoreError for a URL no backend takes (before anything is created)."""
    if not is_url(location):
        return
    text = str(location)
    scheme = text.split(":", 1)[0].lower()
    if scheme not in POSTGRES_SCHEMES:
        raise UnsupportedStoreError(
            f"{scheme}:// is not a supported store; give a SQLite file path or postgresql://USER@HOST:PORT/DB"
        )
    if not text[len(scheme) :].startswith("://") or len(text) <= len(scheme) + 3:
        raise UnsupportedStoreError(f"{text!r} is not a PostgreSQL URL; write postgresql://USER@HOST:PORT/DB")


def open_store(location: str | Path, *, read_only: bool = False) -> Store:
    """The store at `location`: a SQLite file, or the PostgreSQL database a `postgresql://` URL names
    (schema created or migrated on open). Raises UnsupportedStoreError, StoreUnavailable (the
    server cannot be reached) or StoreError."""
    check_location(location)
    if not is_url(location):
        from ray_otel_events.store.sqlite_store import EventStore

        return EventStore(location, read_only=read_only)
    try:
        from ray_otel_events.store.postgres_store import PostgresStore
    except ImportError as exc:
        raise UnsupportedStoreError(
            f"a PostgreSQL store needs psycopg and zstandard ({exc}): pip install 'ray-otel-events[postgres]'"
        ) from None
    return PostgresStore(str(location), read_only=read_only)
