"""The store's interface, as `serve`, the CLI readers and the views use it, and the values it
takes and gives. Both backends (sqlite_store, postgres_store) implement it; `location.open_store`
picks one, so this module imports neither.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from ray_otel_events.encoding.ray_export_events import ExportPost
from ray_otel_events.store.posted_body import Accepted
from ray_otel_events.store.row_fold import Refusal
from ray_otel_events.store.state_merge import Prepared, Row

Window = tuple[float, float]  # received between, epoch seconds


class StoreError(Exception):
    """The file is not a store this version can open (the message says why)."""


@dataclass
class IngestResult:
    duplicates: int = 0
    ignored: int = 0  # event types with no state row (e.g. platform events)
    invalid: list[str] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)  # events read but failing in their fold
    by_type: dict[str, int] = field(default_factory=dict)  # stored (not duplicate) events per type
    # of the ignored, those of a type our protos do not know (a later Ray's): (type, event)
    unknown_types: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    @property
    def stored(self) -> int:
        return sum(self.by_type.values())


class SetAside(NamedTuple):
    """An event whose fold failed, kept apart from the rows: its id, why, and its JSON text (what
    `refold_refused` folds again)."""

    event_id: str
    reason: str
    text: bytes


@dataclass(frozen=True)
class Retention:
    """The bounds `prune` applies, each None when not bounded: a session's age since its last
    event, the state rows, the bytes in use."""

    max_age_s: float | None = None
    max_rows: int | None = None
    max_bytes: int | None = None


@dataclass(frozen=True)
class ColumnFilter:
    """`column = value` (or `!=` when not `equal`) on INDEXED_COLUMNS, entity_id, attempt or session.
    Text compares ignoring case; "", "none" and "null" also match a missing value, as Ray's do."""

    column: str
    equal: bool
    value: str


@dataclass
class Selection:
    total: int  # rows of the resource
    matched: int  # rows passing every filter
    rows: list[Row]


class UnsupportedStoreError(StoreError):
    """The store argument is a URL of no backend this version has (or a malformed one)."""


class StoreUnavailable(StoreError):
    """The database server cannot be reached (at start, or lost while running)."""


class StoreBusy(StoreError):
    """The database rolled a write back each time it was tried (deadlocks with other writers): the
    caller answers "try again later", as while the database is away."""


class Store(Protocol):
    """What the rest of the code asks of a store (sqlite_store.EventStore, postgres_store.PostgresStore)."""

    @property
    def generation(self) -> int:
        """Moves on every write (by any process writing the store): pages poll it to refresh."""

    @property
    def writer(self) -> str:
        """Which code writes the rows ("compiled" or "python")."""

    @property
    def writer_reason(self) -> str | None:
        """Why not the compiled writer (None: it is the compiled one)."""

    def close(self) -> None: ...

    def ingest(self, events: Iterable[Any], *, now: float | None = None) -> IngestResult: ...

    def ingest_prepared(self, events: Iterable[Prepared], *, now: float | None = None) -> IngestResult: ...

    def ingest_posted(
        self, posts: list[Accepted], *, now: float | None = None, bodies: Sequence[bytes] | None = None
    ) -> IngestResult: ...

    def add_spans(self, spans: Sequence[dict[str, Any]], *, now: float | None = None) -> int: ...

    def add_log_lines(self, lines: Sequence[dict[str, Any]], *, now: float | None = None) -> int: ...

    def select(
        self,
        resource: str,
        filters: Sequence[ColumnFilter] = (),
        *,
        keep: Callable[[Row], bool] | None = None,
        search: str = "",
        order: str = "updated",
        descending: bool = True,
        limit: int = 100,
        offset: int = 0,
        session: str | None = None,
    ) -> Selection: ...

    def total(self, resource: str, session: str | None = None) -> int: ...

    def counts(self, resource: str, *columns: str, session: str | None = None) -> list[tuple[Any, ...]]: ...

    def entity_rows(
        self, resource: str, entity_id: str, session: str | None = None
    ) -> list[tuple[int, str, Row]]: ...

    def sessions(self) -> list[str]: ...

    def newest_session(self) -> str | None: ...

    def session_list(self) -> list[dict[str, Any]]: ...

    def session_evidence(self, settled_before: float) -> dict[str, dict[str, int]]: ...

    def session_window(self, name: str | None) -> Window | None: ...

    def spans_of_task(self, task_id: str, received: Window | None = None) -> list[dict[str, Any]]: ...

    def trace(self, trace_id: str) -> list[dict[str, Any]]: ...

    def task_logs(self, task_id: str, received: Window | None = None) -> list[dict[str, Any]]: ...

    def recent_traces(self, limit: int = 20, received: Window | None = None) -> list[dict[str, Any]]: ...

    def add_log_chunk(
        self, session: str, node: str, file: str, start: int, data: bytes, *, now: float | None = None
    ) -> None: ...

    def log_files(self, session: str, node: str | None = None) -> list[tuple[str, str, int]]: ...

    def log_file(self, session: str, node: str, file: str, max_bytes: int) -> bytes | None: ...

    def size(self) -> dict[str, int]: ...

    def new_fields(self, resource: str, entity_id: str, attempt: int, session: str) -> dict[str, Any]: ...

    def raw_size(self) -> dict[str, int]: ...

    def rebuild(self, *, force: bool = False) -> IngestResult: ...

    def set_aside(self, events: Sequence[SetAside], *, now: float | None = None) -> int: ...

    def refused_events(self, limit: int | None = None) -> list[dict[str, Any]]: ...

    def refold_refused(self) -> tuple[int, list[SetAside]]: ...

    def prune(self, retention: Retention, *, now: float | None = None) -> int: ...

    def add_export_events(self, post: ExportPost, received: float) -> int: ...

    def export_entities(self, kind: str, session: str | None) -> list[dict[str, Any]]: ...


def first_line(exc: BaseException) -> str:
    """An error's first line (a driver's message may go on with context), for a log or an answer."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
