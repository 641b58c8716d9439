"""The reads both store backends answer with the same SQL: pages of rows, counts, sessions,
spans, task logs and kept raw events.

One implementation (`SqlReads`), so SQLite and PostgreSQL give the same answers by construction;
what differs in their SQL (placeholders, case-insensitive text, the column that orders inserts,
PostgreSQL's escaped NUL) is a `SqlDialect` each backend names. A backend supplies its connection
(`_query`), its `generation` and its bytes on disk; its schema, locking and writes stay its own.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from ray_otel_events.store import raw_events
from ray_otel_events.store.backend import ColumnFilter, Selection, Window
from ray_otel_events.store.kept_ids import sqlite_hashes
from ray_otel_events.store.row_packing import row_json
from ray_otel_events.store.state_merge import INDEXED_COLUMNS, INDEXED_FIELDS, INT64, Row

# The indexed columns holding text, compared ignoring case (the others are integers).
TEXT_COLUMNS = ("state", "job", "name", "func", "node", "worker", "kind", "error")
INTEGER_COLUMNS = ("attempt", "start_ms", "end_ms")  # the ones filters compare as integers
SESSION_COUNTED = ("jobs", "tasks", "actors", "nodes")
# A row's key columns as stored beside its packed JSON, which a PACKED_V2 row's dictionary ends
# with (row_packing.row_ids_text), in this order: every read of `data` reads them too.
ROW_IDS = "entity_id, node, worker"
# state_rows.session as the number of its record in `sessions` (SQLite since schema 6, PostgreSQL
# since step 11): the number of the session named by `{}`, and the name of a row's session.
SESSION_NUMBER = "(SELECT id FROM sessions WHERE name = {})"
SESSION_NAME = "(SELECT name FROM sessions WHERE sessions.id = state_rows.session)"
WINDOW_SLACK_S = 60.0  # spans and log lines may arrive this long before or after a session's events

ORDERS = {
    "updated": "updated",
    "start": "start_ms",
    "end": "end_ms",
    "duration": "(end_ms - start_ms)",
    "name": "name",
    "func": "func",
    "state": "state",
    "node": "node",
    "error": "error",
}


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class SqlDialect:
    """Where one backend's SQL differs from the other's in what they share (sql_reads, sql_upkeep)."""

    mark: str  # a parameter's placeholder
    id_mark: str  # the placeholder compared with entity_id (case-insensitive on both)
    false: str  # a condition never true
    negated: str  # `{}` not true (a NULL comparison counts as not true)
    like: str  # matches a pattern ignoring case
    text_out: str  # `{}`, a text column as the client reads it
    serial: str  # the column of raw_events and log_lines that orders their inserts
    row_ref: str  # what names one row of state_rows in a DELETE
    no_limit: str  # the LIMIT of a query with an OFFSET and no bound
    byte_length: str  # the function giving a blob's bytes
    bytewise: str  # appended to a text column to order it bytewise
    # What a store written before sessions and raw events were kept raises when they are read.
    missing_table: tuple[type[Exception], ...] = ()
    enc: Callable[[Any], Any] = _same  # a parameter as stored
    dec: Callable[[Any], Any] = _same  # a stored text as it was given
    indexed: Callable[[Any], Any] = _same  # a stored value (`enc`) as `indexed_columns` hold it
    indexed_columns: tuple[str, ...] = ()
    is_indexed_form: Callable[[Any], bool] = lambda _: False  # a value `indexed` shortened
    kept_hashes: Callable[[Any], list[int]] = sqlite_hashes  # a row's stored `event_ids` read (kept_ids)
    # state_rows.session: a session's name as its value is compared (`{}`: the name's placeholder),
    # and the name of a row's session as a column of a query of state_rows alone.
    session_value: str = "{}"
    session_name: str = "session"
    # Locks the session named by its second argument against its writers until the transaction
    # (its first) ends (None: none needed, SQLite has one writer at a time): `drop_session` takes
    # it before deleting each chunk of the session's rows and its record, so that no writer still
    # writing that session commits rows naming a deleted record, or deadlocks with a chunk.
    session_lock: Callable[[Any, str], None] | None = None
    entity_text: str = "entity_id"  # state_rows.entity_id as the text a search's LIKE matches
    # Columns whose commonest values (Ray's enum names) are kept as short codes: `coded` gives a
    # stored (`enc`) value as such a column holds it, `uncoded` a value read as stored, and
    # `named` the SQL of such a column read as stored (`{0}`: the column).
    coded_columns: tuple[str, ...] = ()
    coded: Callable[[Any], Any] = _same
    uncoded: Callable[[Any], Any] = _same
    named: str = "{0}"
    # Columns of state_rows that keep their text in another form than `indexed` gives (PostgreSQL
    # since step 13: hex ids as bytes): a value compared with one is `id_value` of its `indexed`
    # form; the column is read as it is (not `text_out`), `dec` giving its text; `empty_id` is the
    # empty text as such a column holds it.
    id_columns: tuple[str, ...] = ()
    id_value: Callable[[Any], Any] = _same
    empty_id: str = "''"
    # What every read of `data` reads beside it: the values a PACKED_V2 row's dictionary
    # is made of (row_packing.row_ids_text), from its key columns (ROW_IDS) as stored.
    row_ids: str = ROW_IDS
    resource_value: Callable[[str], Any] = _same  # a resource's name as state_rows.resource holds it
    resource_name: Callable[[Any], str] = _same  # state_rows.resource read as the resource's name

    def session_is(self) -> str:
        """state_rows.session equal to the session named by one parameter."""
        return f"session = {self.session_value.format(self.mark)}"

    def column_value(self, column: str, value: Any) -> Any:
        """A stored (`enc`) value as `column` holds it: coded, or in its indexed form, and in an
        id column as `id_value` gives that."""
        if column in self.coded_columns and (code := self.coded(value)) is not value:
            return code
        value = self.indexed(value) if column in self.indexed_columns else value
        return self.id_value(value) if column in self.id_columns else value

    def constant(self, column: str, name: str) -> str:
        """SQL of a constant (an enum name of Ray's: no quote to escape) as `column` holds it."""
        value = self.column_value(column, name)
        return f"chr({ord(value)})" if len(value) == 1 and value < " " else f"'{value}'"

    def entity_value(self, entity_id: str) -> Any:
        """An entity id parameter as state_rows.entity_id holds it (compared with `id_mark`)."""
        return self.column_value("entity_id", self.enc(entity_id))

    def decoded(self, rows: list[Any]) -> list[Any]:
        """`rows` with every value as it was given."""
        if self.dec is _same:
            return rows
        return [tuple(self.dec(value) for value in row) for row in rows]

    def condition(self, f: ColumnFilter) -> tuple[str, list[Any]]:
        """SQL for a filter. Equality is `=`, so indexes serve it."""
        if f.column not in (*INDEXED_COLUMNS, "entity_id", "attempt", "session"):
            raise ValueError(f"{f.column!r} is not an indexed column")
        params: list[Any]
        if f.column in INTEGER_COLUMNS:
            try:
                number = int(f.value)
            except ValueError:
                number = None
            if number is not None and INT64[0] <= number <= INT64[1]:
                sql, params = f"{f.column} = {self.mark}", [number]
            else:  # no row holds text there, nor an integer past 64 bits (which the driver refuses)
                sql, params = self.false, []
        elif f.column == "session":
            sql, params = self.session_is(), [self.enc(f.value)]
        else:
            value = self.enc(f.value)
            stored = self.column_value(f.column, value)
            sql, params = f"{f.column} = {self.mark}", [stored]
            if f.column in self.coded_columns and isinstance(value, str):
                # the column's case-blind equality, which the codes (of names as Ray writes them) lack
                upper = value.upper()
                code = self.coded(upper)
                if code is not upper and code != stored:
                    sql, params = f"({sql} OR {f.column} = {self.mark})", [stored, code]
            if null_like(f.value):
                empty = self.empty_id if f.column in self.id_columns else "''"
                sql = f"({sql} OR {f.column} IS NULL OR {f.column} = {empty})"
        return (sql, params) if f.equal else (self.negated.format(sql), params)

    def where(
        self, resource: str, filters: Sequence[ColumnFilter], search: str = "", session: str | None = None
    ) -> tuple[str, list[Any]]:
        """The WHERE clause and its parameters for a resource's rows passing `filters` and
        `search`, of `session` when it is not None."""
        where, params = [f"resource = {self.mark}"], [self.resource_value(resource)]
        if session is not None:
            where.append(self.session_is())
            params.append(self.enc(session))
        for f in filters:
            sql, values = self.condition(f)
            where.append(sql)
            params += values
        if search:
            escaped = self.enc(search).replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            where.append(
                "("
                + " OR ".join(
                    f"{c} {self.like} {self.mark} ESCAPE '\\'"
                    for c in (self.entity_text, "name", "func", "error")
                )
                + ")"
            )
            params += ["%" + escaped + "%"] * 4
        return " AND ".join(where), params


def null_like(value: str) -> bool:
    return value.lower() in ("", "none", "null")


class SqlReads(ABC):
    """The store's reads over `_query`, in the backend's `dialect` (see the module doc)."""

    dialect: SqlDialect

    def __init__(self) -> None:
        self._totals: dict[tuple[str, str | None], tuple[int, int]] = {}
        self._session_names: tuple[int, list[str]] = (-1, [])
        self._session_counts: tuple[int, dict[str, dict[str, int]]] = (-1, {})
        self._sessions_with_rows: set[str] = set()  # once a session has a row, it keeps it
        self._rowless: dict[str, int] = {}  # session -> the generation it was found with no row

    @property
    @abstractmethod
    def generation(self) -> int:
        """Moves on every write: what is counted once per generation is counted again."""

    @abstractmethod
    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """The rows `sql` answers, on the backend's reading connection."""

    @abstractmethod
    def _stored_bytes(self) -> int:
        """The store's bytes on disk, for `size`."""

    # -- rows ----------------------------------------------------------------------------------

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
    ) -> Selection:
        """A page of a resource's rows (of `session` when given, else of all): `filters` run in
        SQL, `keep` (for fields with no column) on the rows SQL returns; `matched` counts rows
        passing both. `search` is a substring of the id, name, function or error type."""
        if order not in ORDERS:
            raise ValueError(f"cannot sort by {order!r}; one of {', '.join(ORDERS)}")
        session = self._scope(session)
        clause, params = self.dialect.where(resource, filters, search, session)
        direction = "DESC" if descending else "ASC"
        column = ORDERS[order]
        if column in self.dialect.coded_columns:
            column = self.dialect.named.format(column)
        # Sorting by `updated` (never NULL) follows an index, so a page stops after `limit` rows.
        # Another order is sorted whole, ties (rows of one batch share `updated`) by their key: the
        # same order whichever index the plan reads, so the pages of one sort neither repeat nor
        # skip a row.
        ordering = (
            f"updated {direction}"
            if order == "updated"
            else f"{column} IS NULL, {column} {direction}, updated DESC, entity_id, attempt"
        )
        query = f"SELECT data, {self.dialect.row_ids} FROM state_rows WHERE {clause} ORDER BY {ordering}"
        total = self.total(resource, session)
        if keep is None:
            matched = self._matched(resource, filters, search, session)
            mark = self.dialect.mark
            found = self._query(f"{query} LIMIT {mark} OFFSET {mark}", [*params, limit, offset])
            return Selection(total, matched, [orjson.loads(row_json(r[0], r[1:])) for r in found])
        rows: list[Row] = []
        matched = 0
        for data, *ids in self._query(query, params):
            row = orjson.loads(row_json(data, ids))
            if keep(row):
                if offset <= matched < offset + limit:
                    rows.append(row)
                matched += 1
        return Selection(total, matched, rows)

    def total(self, resource: str, session: str | None = None) -> int:
        """Rows of a resource (of a session), counted once per generation (a scan over its rows)."""
        session = self._scope(session)
        generation = self.generation
        cached = self._totals.get((resource, session))
        if cached is None or cached[0] != generation:
            count = self._count(resource, (), session=session)
            cached = self._totals[(resource, session)] = (generation, count)
        return cached[1]

    def _count(
        self, resource: str, filters: Sequence[ColumnFilter], search: str = "", session: str | None = None
    ) -> int:
        clause, params = self.dialect.where(resource, filters, search, session)
        return int(self._query(f"SELECT COUNT(*) FROM state_rows WHERE {clause}", params)[0][0])

    def _matched(
        self, resource: str, filters: Sequence[ColumnFilter], search: str, session: str | None
    ) -> int:
        """Rows matching the filters. One `!=` (Ray's default leaves out drivers that way) is counted
        as all minus the equal ones: two index lookups instead of a scan of every row."""
        negative = [f for f in filters if not f.equal]
        if len(negative) != 1 or search or null_like(negative[0].value):
            return self._count(resource, filters, search, session)
        others = [f for f in filters if f.equal]
        base = self._count(resource, others, session=session) if others else self.total(resource, session)
        equal = dataclasses.replace(negative[0], equal=True)
        return base - self._count(resource, [*others, equal], session=session)

    def counts(self, resource: str, *columns: str, session: str | None = None) -> list[tuple[Any, ...]]:
        """(values of `columns`..., count) of the resource's rows (of a session), grouped by those
        columns."""
        for column in columns:
            if column not in INDEXED_COLUMNS:
                raise ValueError(f"{column!r} is not an indexed column")
        names = ", ".join(columns)
        d = self.dialect
        selected = ", ".join(
            d.text_out.format(c) if c in TEXT_COLUMNS and c not in d.id_columns else c for c in columns
        )
        clause, params = self.dialect.where(resource, (), "", self._scope(session))
        found = self._query(
            f"SELECT {selected}, COUNT(*) FROM state_rows WHERE {clause} GROUP BY {names}", params
        )
        shortened = [c in d.indexed_columns or c in d.id_columns for c in columns]
        coded = [c in d.coded_columns for c in columns]
        if not any(shortened) and not any(coded):
            return d.decoded(found)
        return [
            (
                *(
                    self._whole(resource, column, value)
                    if short and d.is_indexed_form(value)
                    else d.dec(d.uncoded(value) if code else value)
                    for column, short, code, value in zip(columns, shortened, coded, row, strict=False)
                ),
                row[-1],
            )
            for row in found
        ]

    def _whole(self, resource: str, column: str, form: str) -> Any:
        """The whole value a column holds as `dialect.indexed` shortened it: from a row's JSON."""
        d = self.dialect
        found = self._query(
            f"SELECT data, {d.row_ids} FROM state_rows WHERE resource = {d.mark} AND {column} = {d.mark}"
            " LIMIT 1",
            (d.resource_value(resource), form),
        )
        field = INDEXED_FIELDS[resource].get(column)
        if not found or not field:
            return d.dec(form)
        value = orjson.loads(row_json(found[0][0], found[0][1:])).get(field)
        return d.dec(form) if value is None else value  # None: the column holds the field's default

    def entity_rows(
        self, resource: str, entity_id: str, session: str | None = None
    ) -> list[tuple[int, str, Row]]:
        """(attempt, session, row) of every row of one entity: of every session, or of `session`."""
        d = self.dialect
        sql = (
            f"SELECT attempt, {d.session_name}, data, {d.row_ids} FROM state_rows"
            f" WHERE resource = {d.mark} AND entity_id = {d.id_mark}"
        )
        params: list[Any] = [d.resource_value(resource), d.entity_value(entity_id.lower())]
        if session is not None:
            sql += f" AND {d.session_is()}"
            params.append(d.enc(session))
        found = self._query(sql, params)
        return [
            (attempt, d.dec(name), orjson.loads(row_json(data, ids))) for attempt, name, data, *ids in found
        ]

    # -- log files -----------------------------------------------------------------------------

    def log_files(self, session: str, node: str | None = None) -> list[tuple[str, str, int]]:
        """(node, file, bytes) of the log files collected from `session`'s nodes (of `node`)."""
        d = self.dialect
        sql = (
            f"SELECT node, file, MAX(start + {d.byte_length}(data)) FROM log_file_chunks"
            f" WHERE session = {d.mark}"
        )
        params = [d.enc(session)]
        if node is not None:
            sql += f" AND node = {d.mark}"
            params.append(d.enc(node))
        found = self._query(sql + f" GROUP BY node, file ORDER BY node, file{d.bytewise}", params)
        return [(d.dec(n), d.dec(f), int(size)) for n, f, size in found]

    def log_file(self, session: str, node: str, file: str, max_bytes: int) -> bytes | None:
        """A collected log file's last `max_bytes` (None: none collected), its chunks stitched in
        offset order: a chunk overlapping the one before gives only its bytes past it."""
        d = self.dialect
        key = f"session = {d.mark} AND node = {d.mark} AND file = {d.mark}"
        params = [d.enc(session), d.enc(node), d.enc(file)]
        end = self._query(
            f"SELECT MAX(start + {d.byte_length}(data)) FROM log_file_chunks WHERE {key}", params
        )
        if not end or end[0][0] is None:
            return None
        first = int(end[0][0]) - max_bytes
        chunks = self._query(
            f"SELECT start, data FROM log_file_chunks WHERE {key}"
            f" AND start + {d.byte_length}(data) > {d.mark} ORDER BY start",
            [*params, first],
        )
        parts: list[bytes] = []
        at: int | None = None
        for start, stored in chunks:
            begin, data = int(start), bytes(stored)
            if at is not None and begin < at:
                if begin + len(data) <= at:
                    continue
                data, begin = data[at - begin :], at
            parts.append(data)
            at = begin + len(data)
        whole = b"".join(parts)
        return whole[-max_bytes:] if max_bytes >= 0 else whole

    def size(self) -> dict[str, int]:
        """Rows per table and the store's bytes on disk, for the bench and /metrics."""
        out = {
            table: int(self._query(f"SELECT COUNT(*) FROM {table}")[0][0])
            for table in ("state_rows", "spans", "log_lines")
        }
        out["bytes"] = self._stored_bytes()
        return out

    # -- sessions ------------------------------------------------------------------------------

    def _scope(self, session: str | None) -> str | None:
        """The session filter a read needs: none when the store holds that session only (every
        row is its own, and the plans stay those of a one-session store)."""
        if session is None:
            return None
        return None if self.sessions() == [session] else session

    def sessions(self) -> list[str]:
        """Session names, oldest first (by the last event stored for each)."""
        generation = self.generation
        cached = self._session_names
        if cached[0] != generation:
            cached = self._session_names = (generation, [name for name, _, _ in self._session_times()])
        return cached[1]

    def _session_times(self) -> list[tuple[str, float, float]]:
        """(name, first seen, last seen) of every session, oldest last-seen first."""
        d = self.dialect
        try:
            found = self._query(
                f"SELECT name, first_seen, last_seen FROM sessions ORDER BY last_seen, name{d.bytewise}"
            )
        except d.missing_table:  # a store written before sessions were kept, opened read-only
            found = self._query(
                "SELECT session, MIN(updated), MAX(updated) FROM state_rows GROUP BY session"
                f" ORDER BY MAX(updated), session{d.bytewise}"
            )
        return [(d.dec(name), float(first), float(last)) for name, first, last in found]

    def newest_session(self) -> str | None:
        """The session whose last event was stored last, of those with state rows: a session whose
        events made none (another producer's records under a name of their own, say) never hides
        one that has them. None in an empty store."""
        names = self.sessions()
        self._sessions_with_rows.intersection_update(names)  # a session deleted by upkeep
        for name in reversed(names):
            if self._has_rows(name):
                return name
        return names[-1] if names else None

    def _has_rows(self, session: str) -> bool:
        """Whether `session` has a state row: remembered once it has, asked again each generation
        while it has not (a scan, but only for a session without rows, which is rare)."""
        if session in self._sessions_with_rows:
            return True
        generation = self.generation
        if self._rowless.get(session) == generation:
            return False
        d = self.dialect
        if self._query(f"SELECT 1 FROM state_rows WHERE {d.session_is()} LIMIT 1", [d.enc(session)]):
            self._sessions_with_rows.add(session)
            self._rowless.pop(session, None)
            return True
        self._rowless[session] = generation
        return False

    def session_list(self) -> list[dict[str, Any]]:
        """Every session, newest first: name, first and last event stored (epoch seconds), and its
        rows of jobs, tasks (attempts), actors and nodes (counted once per generation)."""
        generation = self.generation
        cached = self._session_counts
        if cached[0] != generation:
            counts: dict[str, dict[str, int]] = {}
            for session, resource, count in self._query(
                f"SELECT {self.dialect.session_name}, resource, COUNT(*) FROM state_rows"
                " GROUP BY session, resource"
            ):
                counts.setdefault(self.dialect.dec(session), {})[self.dialect.resource_name(resource)] = int(
                    count
                )
            cached = self._session_counts = (generation, counts)
        return [
            {
                "name": name,
                "first_seen": first,
                "last_seen": last,
                **{resource: cached[1].get(name, {}).get(resource, 0) for resource in SESSION_COUNTED},
            }
            for name, first, last in reversed(self._session_times())
        ]

    def session_evidence(self, settled_before: float) -> dict[str, dict[str, int]]:
        """Per session, the row counts the wiring checks weigh (store/session_checks.py): rows of
        each resource (`tasks`) and those last written before `settled_before` (`tasks_settled`),
        task rows with a definition (a function, or a driver's: `tasks_defined`; a row from
        lifecycle events alone has neither, its type defaulting to NORMAL_TASK) or a state (a
        lifecycle event: `tasks_stated`), and settled rows of actor creations and of defined
        non-driver tasks (`user_tasks_settled`)."""
        d = self.dialect
        mark = d.mark
        found = self._query(
            f"SELECT {d.session_name}, resource, COUNT(*),"
            f" SUM(CASE WHEN updated <= {mark} THEN 1 ELSE 0 END),"
            f" SUM(CASE WHEN (func IS NOT NULL AND func <> '') OR kind = {d.constant('kind', 'DRIVER_TASK')}"
            " THEN 1 ELSE 0 END),"
            f" SUM(CASE WHEN state IS NOT NULL AND state <> '' AND state <> {d.constant('state', 'NIL')}"
            " THEN 1 ELSE 0 END),"
            f" SUM(CASE WHEN updated <= {mark} AND kind = {d.constant('kind', 'ACTOR_CREATION_TASK')}"
            " THEN 1 ELSE 0 END),"
            f" SUM(CASE WHEN updated <= {mark} AND func IS NOT NULL AND func <> '' THEN 1 ELSE 0 END)"
            " FROM state_rows GROUP BY session, resource",
            [settled_before] * 3,
        )
        evidence: dict[str, dict[str, int]] = {}
        for session, stored, total, settled, defined, stated, creations, user_tasks in found:
            counts = evidence.setdefault(self.dialect.dec(session), {})
            resource = self.dialect.resource_name(stored)
            counts[resource] = int(total)
            counts[f"{resource}_settled"] = int(settled or 0)
            if resource == "tasks":
                counts["tasks_defined"] = int(defined or 0)
                counts["tasks_stated"] = int(stated or 0)
                counts["actor_creations_settled"] = int(creations or 0)
                counts["user_tasks_settled"] = int(user_tasks or 0)
        return evidence

    def session_window(self, name: str | None) -> Window | None:
        """When spans and log lines of session `name` were received, as near as the store knows
        (they carry no session): from its first event stored to its last, with WINDOW_SLACK_S either
        side. None when the store holds one session or none (nothing to tell apart)."""
        times = self._session_times()
        if len(times) < 2:
            return None
        for session, first, last in times:
            if session == name:
                return (first - WINDOW_SLACK_S, last + WINDOW_SLACK_S)
        return None

    # -- spans and log lines -------------------------------------------------------------------

    def _received(self, sql: str, params: list[Any], received: Window | None) -> tuple[str, list[Any]]:
        """`sql` narrowed to what was received within `received`, when given."""
        if received is None:
            return sql, params
        mark = self.dialect.mark
        return f"{sql} AND received BETWEEN {mark} AND {mark}", [*params, *received]

    def spans_of_task(self, task_id: str, received: Window | None = None) -> list[dict[str, Any]]:
        """A task's spans (received within `received`, when given)."""
        d = self.dialect
        sql, params = self._received(
            f"SELECT data FROM spans WHERE task_id = {d.mark}", [d.enc(task_id.lower())], received
        )
        return [orjson.loads(r[0]) for r in self._query(sql + " ORDER BY start_ns", params)]

    def trace(self, trace_id: str) -> list[dict[str, Any]]:
        d = self.dialect
        found = self._query(
            f"SELECT data FROM spans WHERE trace_id = {d.mark} ORDER BY start_ns", (d.enc(trace_id.lower()),)
        )
        return [orjson.loads(r[0]) for r in found]

    def task_logs(self, task_id: str, received: Window | None = None) -> list[dict[str, Any]]:
        """A task's lines: those naming it, and those written inside one of its spans (received
        within `received`, when given), in the order written (ties in the order stored)."""
        d = self.dialect
        task = d.enc(task_id.lower())
        sql, params = self._received(
            f"SELECT data FROM log_lines WHERE (task_id = {d.mark} OR (task_id IS NULL AND span_id IN"
            f" (SELECT span_id FROM spans WHERE task_id = {d.mark})))",
            [task, task],
            received,
        )
        return [orjson.loads(r[0]) for r in self._query(f"{sql} ORDER BY ts_ns, {d.serial}", params)]

    def recent_traces(self, limit: int = 20, received: Window | None = None) -> list[dict[str, Any]]:
        """The newest traces (of spans received within `received`, when given): id, root span
        name, start, end and span count."""
        d = self.dialect
        within, params = (
            ("", [limit])
            if received is None
            else (f" WHERE received BETWEEN {d.mark} AND {d.mark}", [*received, limit])
        )
        found = self._query(
            "SELECT trace_id, MIN(start_ns), MAX(end_ns), COUNT(*),"
            " (SELECT name FROM spans r WHERE r.trace_id = s.trace_id ORDER BY start_ns LIMIT 1)"
            f" FROM spans s{within} GROUP BY trace_id ORDER BY MIN(start_ns) DESC LIMIT {d.mark}",
            params,
        )
        return [
            {"trace_id": d.dec(t), "start_ns": start, "end_ns": end, "spans": n, "root": d.dec(root)}
            for t, start, end, n, root in found
        ]

    # -- raw events ----------------------------------------------------------------------------

    def raw_texts(self, session: str, hashes: Iterable[int], before: float) -> list[dict[str, Any]]:
        """The kept events of `session` whose ids have these hashes (as rows keep them:
        kept_ids.event_hash), oldest first, read from the raw events stored up to `before`, newest
        first until each is found (an entity's events are usually near its last update)."""
        d = self.dialect
        wanted = set(hashes)
        blocks = self._query(
            f"SELECT {d.serial} FROM raw_events WHERE session = {d.mark} AND received <= {d.mark}"
            f" ORDER BY received DESC, {d.serial} DESC",
            (d.enc(session), before),
        )
        found: list[tuple[int, int, dict[str, Any]]] = []
        for (block,) in blocks:
            if not wanted:
                break
            rows = self._query(f"SELECT data FROM raw_events WHERE {d.serial} = {d.mark}", (block,))
            if not rows:
                continue
            text = raw_events.decompress(bytes(rows[0][0]))
            for position, hashed, event in raw_events.events_with_ids(text, wanted):
                if hashed in wanted:  # an event posted twice: its newest copy
                    wanted.discard(hashed)
                    found.append((block, position, event))
        return [event for _, _, event in sorted(found, key=lambda item: (item[0], item[1]))]

    def new_fields(self, resource: str, entity_id: str, attempt: int, session: str) -> dict[str, Any]:
        """Fields of a row's kept events that no fold reads (a later Ray's, one `make proto` added):
        `raw_events.new_fields` of them."""
        d = self.dialect
        found = self._query(
            f"SELECT updated, event_ids FROM state_rows WHERE resource = {d.mark}"
            f" AND entity_id = {d.id_mark} AND attempt = {d.mark} AND {d.session_is()}",
            (d.resource_value(resource), d.entity_value(entity_id.lower()), attempt, d.enc(session)),
        )
        if not found:
            return {}
        updated, ids = found[0]
        try:
            return raw_events.new_fields(self.raw_texts(session, d.kept_hashes(ids), updated))
        except d.missing_table:  # a store written before raw events were kept, opened read-only
            return {}

    def refused_events(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The events set aside because their fold failed (`set_aside`), oldest first: id, time
        received, reason and JSON text."""
        d = self.dialect
        try:
            found = self._query(
                "SELECT event_id, received, reason, data FROM refused_events ORDER BY received, digest"
                + ("" if limit is None else f" LIMIT {int(limit)}")
            )
        except d.missing_table:  # a store written before events were set aside, opened read-only
            return []
        return [
            {
                "event_id": d.dec(event_id),
                "received": float(received),
                "reason": d.dec(reason),
                "text": bytes(data),
            }
            for event_id, received, reason, data in found
        ]

    def raw_size(self) -> dict[str, int]:
        """Raw event blocks kept and their compressed bytes."""
        blocks, size = self._query(
            f"SELECT COUNT(*), COALESCE(SUM({self.dialect.byte_length}(data)), 0) FROM raw_events"
        )[0]
        return {"blocks": int(blocks), "bytes": int(size)}
