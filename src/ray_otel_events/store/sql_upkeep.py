"""The upkeep both store backends run with the same SQL: retention (`prune`, `drop_session`) and
`rebuild` from the kept raw events.

One implementation, so a bound or a rebuild removes and refolds the same rows on SQLite and on
PostgreSQL; a backend gives, beside its writes (`sql_writes`, whose `ingest_posted` `rebuild` refolds
through), what its bytes in use are (`used_bytes`).
"""

from __future__ import annotations

import hashlib
import time
from abc import abstractmethod

from ray_otel_events.store import raw_events
from ray_otel_events.store.backend import (
    IngestResult,
    Retention,
    SetAside,
    StoreBusy,
    StoreError,
    StoreUnavailable,
    first_line,
)
from ray_otel_events.store.posted_body import read_posted
from ray_otel_events.store.sql_export import SqlExportRows
from ray_otel_events.store.sql_writes import RAW_INCOMPLETE, SqlWrites

DROP_CHUNK = 20_000  # rows deleted per transaction when a session is dropped


class SqlUpkeep(SqlWrites, SqlExportRows):
    """Retention and rebuild over the backend's `_transaction` (see the module doc)."""

    @abstractmethod
    def used_bytes(self) -> int:
        """The bytes `prune`'s `max_bytes` bounds."""

    def rebuild(self, *, force: bool = False) -> IngestResult:
        """Fold the state rows again from the raw events alone, in the order they were stored and
        with the times they were received: the rows this version folds from what was accepted
        (after an upgrade). The rows are dropped first; raw events, spans and log lines are kept.
        Stopped part way, running it again finishes it. Refused (StoreError) when some rows have no
        raw events (`force` rebuilds anyway, without them)."""
        d = self.dialect
        noted = self._query(f"SELECT value FROM store_notes WHERE key = {d.mark}", (RAW_INCOMPLETE,))
        if noted and not force:
            raise StoreError(f"some rows have no raw events to rebuild them from: {noted[0][0]}")
        with self._transaction() as db:
            db.execute("DELETE FROM state_rows")
        total = IngestResult()
        for block, received in self._query(
            f"SELECT {d.serial}, received FROM raw_events ORDER BY {d.serial}"
        ):
            rows = self._query(f"SELECT data FROM raw_events WHERE {d.serial} = {d.mark}", (block,))
            posted, invalid = read_posted(raw_events.decompress(bytes(rows[0][0])))
            result: IngestResult = self.ingest_posted([posted], now=float(received))
            total.duplicates += result.duplicates
            total.ignored += result.ignored
            total.invalid += invalid + [refusal.reason for refusal in result.refused]
            for event_type, count in result.by_type.items():
                total.by_type[event_type] = total.by_type.get(event_type, 0) + count
        self._totals.clear()
        self.refold_refused()
        return total

    def refold_refused(self) -> tuple[int, list[SetAside]]:
        """Folds again the events set aside because their fold failed (after an upgrade that folds
        them): each that folds now is removed from `refused_events`; returns how many folded, and
        why each of the others still fails. The store being away (StoreError subclasses for it)
        stops it; running it again goes on."""
        folded = 0
        still: list[SetAside] = []
        for event in self.refused_events():
            text: bytes = event["text"]
            body = b"[" + text + b"]"
            try:
                posted, invalid = read_posted(body)
                result = self.ingest_posted([posted], now=event["received"], bodies=[body])
                reasons = invalid + [refusal.reason for refusal in result.refused]
            except (StoreUnavailable, StoreBusy):
                raise
            except Exception as exc:  # whatever failed it before may fail it again
                reasons = [first_line(exc)]
            if reasons:
                still.append(SetAside(event["event_id"], reasons[0], text))
                continue
            with self._transaction() as db:
                db.execute(
                    f"DELETE FROM refused_events WHERE digest = {self.dialect.mark}",
                    (hashlib.sha256(text).hexdigest(),),
                )
            folded += 1
        return folded, still

    def drop_session(self, name: str) -> int:
        """Delete a session's rows, raw events, export entities and record; returns its rows
        deleted. The rows go DROP_CHUNK at a time, a transaction each, so folds and reads go on in
        between; the record goes last (while it is there, the session's reads keep filtering by it)."""
        d = self.dialect
        deleted = 0
        while True:
            with self._transaction() as db:
                if d.session_lock:
                    d.session_lock(db, name)
                gone = int(
                    db.execute(
                        f"DELETE FROM state_rows WHERE {d.row_ref} IN"
                        f" (SELECT {d.row_ref} FROM state_rows WHERE {d.session_is()} LIMIT {d.mark})",
                        (d.enc(name), DROP_CHUNK),
                    ).rowcount
                )
            deleted += gone
            if gone < DROP_CHUNK:
                break
        with self._transaction() as db:
            # rows a batch stored since the last chunk went: with the record, so that no row is
            # left naming a session that is gone (SQLite and PostgreSQL name it by the record's
            # number). The record locked first (where a writer holds it until its commit, as on
            # PostgreSQL): a writer of this session commits before, or records it anew after.
            if d.session_lock:
                d.session_lock(db, name)
            deleted += int(
                db.execute(f"DELETE FROM state_rows WHERE {d.session_is()}", (d.enc(name),)).rowcount
            )
            db.execute(f"DELETE FROM raw_events WHERE session = {d.mark}", (d.enc(name),))
            db.execute(f"DELETE FROM log_file_chunks WHERE session = {d.mark}", (d.enc(name),))
            self._drop_export_rows(db, [name])
            db.execute(f"DELETE FROM sessions WHERE name = {d.mark}", (d.enc(name),))
        return deleted

    def _rows(self) -> int:
        return int(self._query("SELECT COUNT(*) FROM state_rows")[0][0])

    def _over(self, max_rows: int | None, max_bytes: int | None) -> bool:
        return (max_rows is not None and self._rows() > max_rows) or (
            max_bytes is not None and self.used_bytes() > max_bytes
        )

    def prune(self, retention: Retention, *, now: float | None = None) -> int:
        """Apply the retention, a whole session at a time, oldest first; returns the state rows
        deleted. A session whose last event is older than `max_age_s` goes. While the store holds
        more than `max_rows` state rows or more than `max_bytes` in use, its oldest session goes,
        the newest one never: over a bound alone, it loses its oldest raw event blocks, then its
        least recently updated rows (events set aside, then collected log files' oldest chunks, go
        before either). Spans, log lines, collected log files and events set aside go by age."""
        d = self.dialect
        max_age_s, max_rows, max_bytes = retention.max_age_s, retention.max_rows, retention.max_bytes
        current = time.time() if now is None else now
        deleted = 0
        times = self._session_times()
        if max_age_s is not None:
            cutoff = current - max_age_s
            for name, _, last in times:
                if last < cutoff:
                    deleted += self.drop_session(name)
            times = [entry for entry in times if entry[2] >= cutoff]
        while len(times) > 1 and self._over(max_rows, max_bytes):
            deleted += self.drop_session(times.pop(0)[0])
        if max_bytes is not None:
            for _ in range(20):  # a tenth of the raw blocks at a time, then a tenth of the rows
                if self.used_bytes() <= max_bytes:
                    break
                with self._transaction() as db:
                    blocks = int(db.execute("SELECT COUNT(*) FROM raw_events").fetchone()[0])
                    aside = int(db.execute("SELECT COUNT(*) FROM refused_events").fetchone()[0])
                    chunks = int(db.execute("SELECT COUNT(*) FROM log_file_chunks").fetchone()[0])
                    if aside:  # set-aside events first: kept for a look, not for any row
                        db.execute(
                            "DELETE FROM refused_events WHERE digest IN (SELECT digest FROM refused_events"
                            f" ORDER BY received, digest LIMIT {d.mark})",
                            (max(1, aside // 10),),
                        )
                    elif chunks:  # collected log files next: the rows and raw events outlast them
                        db.execute(
                            "DELETE FROM log_file_chunks WHERE (session, node, file, start) IN (SELECT"
                            " session, node, file, start FROM log_file_chunks ORDER BY received"
                            f" LIMIT {d.mark})",
                            (max(1, chunks // 10),),
                        )
                    elif blocks:
                        self._note_raw_incomplete(db, "retention dropped raw events of rows it kept")
                        db.execute(
                            f"DELETE FROM raw_events WHERE {d.serial} IN (SELECT {d.serial} FROM raw_events"
                            f" ORDER BY received, {d.serial} LIMIT {d.mark})",
                            (max(1, blocks // 10),),
                        )
                    else:
                        rows = int(db.execute("SELECT COUNT(*) FROM state_rows").fetchone()[0])
                        deleted += int(
                            db.execute(
                                f"DELETE FROM state_rows WHERE {d.row_ref} IN"
                                f" (SELECT {d.row_ref} FROM state_rows ORDER BY updated LIMIT {d.mark})",
                                (max(1, rows // 10),),
                            ).rowcount
                        )
        with self._transaction() as db:
            if max_rows is not None:
                deleted += int(
                    db.execute(
                        f"DELETE FROM state_rows WHERE {d.row_ref} IN (SELECT {d.row_ref} FROM state_rows"
                        f" ORDER BY updated DESC {d.no_limit} OFFSET {d.mark})",
                        (max_rows,),
                    ).rowcount
                )
            if max_age_s is not None:
                for table in ("spans", "log_lines", "refused_events", "log_file_chunks"):
                    db.execute(f"DELETE FROM {table} WHERE received < {d.mark}", (current - max_age_s,))
        return deleted
