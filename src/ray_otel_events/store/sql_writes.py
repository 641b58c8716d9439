"""The write path both store backends share: a batch read into pieces (the refused events named),
POST bodies kept by session, spans and log lines as rows, and the store note saying the raw events
are incomplete.

One implementation, so a batch is read, counted and refused the same way on SQLite and on
PostgreSQL. A backend gives the batch's transaction (`_ingest`: its rows read, folded with
`row_fold.fold_keys`, written, and the raw texts and sessions kept), its write of plain rows
(`_write_many`) and its `_transaction`: its SQL, locking and connections stay its own.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from abc import abstractmethod
from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from ray_otel_events.store import raw_events
from ray_otel_events.store.backend import IngestResult, SetAside
from ray_otel_events.store.posted_body import Accepted, accepted_events
from ray_otel_events.store.sql_reads import SqlReads
from ray_otel_events.store.state_merge import Prepared, prepare

# The store note saying why `rebuild` would lose rows: some were folded from events whose text is
# not kept.
RAW_INCOMPLETE = "raw_incomplete"
_SPAN_COLUMNS = (
    "trace_id",
    "span_id",
    "parent_span_id",
    "task_id",
    "name",
    "start_ns",
    "end_ns",
    "received",
    "data",
)
_LINE_COLUMNS = ("ts_ns", "trace_id", "span_id", "task_id", "received", "data")


def span_row(span: dict[str, Any], received: float) -> tuple[Any, ...]:
    """The spans table's columns of one span."""
    return (
        span["trace_id"],
        span["span_id"],
        span.get("parent_span_id", ""),
        span.get("task_id") or None,
        span["name"],
        span["start_ns"],
        span["end_ns"],
        received,
        orjson.dumps(span).decode(),
    )


def log_line_row(line: dict[str, Any], received: float) -> tuple[Any, ...]:
    """The log_lines table's columns of one line."""
    return (
        line["ts_ns"],
        line.get("trace_id", ""),
        line.get("span_id", ""),
        line.get("task_id") or None,
        received,
        orjson.dumps(line).decode(),
    )


class SqlWrites(SqlReads):
    """The intake over the backend's `_ingest`, `_write_many` and `_transaction` (see the module doc)."""

    @abstractmethod
    def _transaction(self) -> contextlib.AbstractContextManager[Any]:
        """One write transaction, yielding what `execute`s in it (a connection); once it is
        committed, the generation moves."""

    @abstractmethod
    def _ingest(self, events: list[Prepared], received: float, texts: dict[str, list[bytes]]) -> IngestResult:
        """One transaction: the batch's rows folded and written, `texts` (POST bodies by session)
        kept as raw events, and the sessions seen recorded."""

    @abstractmethod
    def _write_many(self, sql: str, rows: list[tuple[Any, ...]]) -> int:
        """`sql` run for each of `rows` in one transaction; returns how many."""

    def ingest(self, events: Iterable[Any], *, now: float | None = None) -> IngestResult:
        """Fold a batch into the store in one transaction; events that cannot be read are listed in
        `invalid`, the others stored. The batch is kept as raw events."""
        events = events if isinstance(events, list) else list(events)
        received = time.time() if now is None else now
        prepared: list[Prepared] = []
        invalid: list[str] = []
        for event in events:
            try:
                prepared.append(prepare(event))
            except ValueError as exc:
                invalid.append(str(exc))
        texts, unwritten = raw_events.event_texts(events)
        result = self._ingest(prepared, received, texts)
        if unwritten:
            with self._transaction() as db:
                self._note_raw_incomplete(db, f"{unwritten} events could not be kept as JSON text")
        result.invalid = invalid + [refusal.reason for refusal in result.refused]
        return result

    def ingest_prepared(self, events: Iterable[Prepared], *, now: float | None = None) -> IngestResult:
        """`ingest` for events already read by `prepare` (the HTTP intake reads each as it parses).
        Their sessions are recorded; their text is not kept (there is none here)."""
        listed = events if isinstance(events, list) else list(events)
        return self._ingest(listed, time.time() if now is None else now, {})

    def ingest_posted(
        self, posts: list[Accepted], *, now: float | None = None, bodies: Sequence[bytes] | None = None
    ) -> IngestResult:
        """`ingest_prepared` of several POSTs' accepted events, in order, in one transaction.
        `bodies` (the POSTs' texts, in order) are kept as raw events, per session, in it."""
        received = time.time() if now is None else now
        texts = raw_events.merge_bodies(raw_events.by_session(body) for body in bodies or ())
        return self._ingest_posted(posts, received, texts)

    def _ingest_posted(
        self, posts: list[Accepted], received: float, texts: dict[str, list[bytes]]
    ) -> IngestResult:
        """The POSTs' events read in Python and folded as one batch (a backend may fold them from
        their text instead)."""
        return self._ingest([event for post in posts for event in accepted_events(post)], received, texts)

    def _note_raw_incomplete(self, db: Any, reason: str) -> None:
        """Records on `db` (the first reason kept) that `rebuild` would lose rows."""
        mark = self.dialect.mark
        db.execute(
            f"INSERT INTO store_notes(key, value) VALUES ({mark}, {mark}) ON CONFLICT DO NOTHING",
            (RAW_INCOMPLETE, reason),
        )

    def set_aside(self, events: Sequence[SetAside], *, now: float | None = None) -> int:
        """Keeps events whose fold failed in `refused_events` (one copy of each text, however often
        it is set aside: a spool replayed after a crash sets the same aside again); returns how many
        were new."""
        if not events:
            return 0
        received = time.time() if now is None else now
        mark = self.dialect.mark
        kept = 0
        with self._transaction() as db:
            for event in events:
                kept += db.execute(
                    f"INSERT INTO refused_events(digest, received, event_id, reason, data)"
                    f" VALUES ({mark}, {mark}, {mark}, {mark}, {mark}) ON CONFLICT DO NOTHING",
                    (
                        hashlib.sha256(event.text).hexdigest(),
                        received,
                        self.dialect.enc(event.event_id),
                        self.dialect.enc(event.reason),
                        event.text,
                    ),
                ).rowcount
        return kept

    def add_spans(self, spans: Sequence[dict[str, Any]], *, now: float | None = None) -> int:
        """Spans as dicts with trace_id, span_id, parent_span_id (hex), name, start_ns, end_ns and
        optionally task_id; the whole dict is kept. A span sent twice is stored once (the later
        copy)."""
        received = time.time() if now is None else now
        marks = ", ".join([self.dialect.mark] * len(_SPAN_COLUMNS))
        return self._write_many(
            f"INSERT INTO spans({', '.join(_SPAN_COLUMNS)}) VALUES ({marks})"
            " ON CONFLICT (trace_id, span_id) DO UPDATE SET "
            + ", ".join(f"{c}=excluded.{c}" for c in _SPAN_COLUMNS[2:]),
            [span_row(s, received) for s in spans],
        )

    def add_log_lines(self, lines: Sequence[dict[str, Any]], *, now: float | None = None) -> int:
        """Log lines as dicts with ts_ns, trace_id, span_id (hex, may be empty), task_id and body."""
        received = time.time() if now is None else now
        marks = ", ".join([self.dialect.mark] * len(_LINE_COLUMNS))
        return self._write_many(
            f"INSERT INTO log_lines({', '.join(_LINE_COLUMNS)}) VALUES ({marks})",
            [log_line_row(line, received) for line in lines],
        )

    def add_log_chunk(
        self, session: str, node: str, file: str, start: int, data: bytes, *, now: float | None = None
    ) -> None:
        """A node's log file's bytes from offset `start`, kept once by (session, node, file,
        start): a resend is harmless, and a longer resend of a start (the collector read further
        before it was stopped) replaces the shorter one."""
        received = time.time() if now is None else now
        d = self.dialect
        self._write_many(
            "INSERT INTO log_file_chunks(session, node, file, start, received, data)"
            f" VALUES ({', '.join([d.mark] * 6)})"
            " ON CONFLICT (session, node, file, start) DO UPDATE SET data = excluded.data,"
            f" received = excluded.received"
            f" WHERE {d.byte_length}(excluded.data) > {d.byte_length}(log_file_chunks.data)",
            [(session, node, file, start, received, data)],
        )
