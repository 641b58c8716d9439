"""Every read of the store, by URL path: Ray's state API (`/api/v0/...`) and our page's (`/api/ui/...`).

The HTTP server answers GETs by calling `answer(path, params)`, and our CLI, given a store file
instead of an address, calls the same function: one set of answers, whichever way they are asked.
An answer is `(HTTP status, JSON body)`. Ray's paths answer in Ray's envelope and error shape; ours
answer plain JSON, `{"error": reason}` with 400 or 404 when they cannot.

Every answer is about one session (a cluster's run): the one asked for, else the newest (whose last
event was stored last, of those with state rows). `/api/sessions` lists them, each with the kinds of
event it lacks (`missing`, store/session_checks.py).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from ray_otel_events.config import DEFAULT_WIRING_CHECK_DELAY_S
from ray_otel_events.encoding.ray_export_events import DATASET, TRAIN_RUN, TRAIN_RUN_ATTEMPT
from ray_otel_events.store import ray_export_views, state_query
from ray_otel_events.store.backend import ColumnFilter, Store
from ray_otel_events.store.session_checks import SessionJudge
from ray_otel_events.store.sql_reads import ORDERS
from ray_otel_events.store.state_merge import ACTORS, ID_COLUMN, JOBS, TASKS, Row, field_value

RAY_VERSION = "2.60.0"  # the state API contract we answer to
Answer = tuple[int, Any]
Params = Any  # a multidict: get(), getall()

UI_TASK_FIELDS = (
    "task_id",
    "attempt_number",
    "name",
    "func_or_class_name",
    "state",
    "type",
    "job_id",
    "node_id",
    "worker_id",
    "worker_pid",
    "error_type",
    "error_message",
    "creation_time_ms",
    "start_time_ms",
    "end_time_ms",
)
UI_FILTERS = {"state": "state", "job_id": "job", "node_id": "node", "type": "kind", "error_type": "error"}
MAX_PAGE = 1000


class BadRequest(ValueError):
    def __init__(self, reason: str, status: int = 400) -> None:
        super().__init__(reason)
        self.status = status


def _duration_ms(row: Row) -> int | None:
    start, end = row.get("start_time_ms"), row.get("end_time_ms")
    return end - start if start is not None and end is not None else None


def _ui_task(row: Row) -> Row:
    return {
        **{name: field_value(TASKS, row, name) for name in UI_TASK_FIELDS},
        "duration_ms": _duration_ms(row),
    }


def _transitions(rows: list[tuple[int, str, Row]]) -> list[dict[str, Any]]:
    """Every transition of an entity's `entity_rows`, in time order: each row keeps its own
    (`events`, merged from every lifecycle piece)."""
    found = [
        {"attempt": attempt, "session": session, "state": event["state"], "ts_ns": event["created_ns"]}
        for attempt, session, row in rows
        for event in row.get("events", [])
    ]
    return sorted(found, key=lambda t: t["ts_ns"])


def _int_param(params: Params, name: str, default: int, low: int, high: int) -> int:
    raw = params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"{name}={raw!r} is not an integer") from None
    if not low <= value <= high:
        raise BadRequest(f"{name} must be between {low} and {high}, got {value}")
    return value


EVIDENCE_MAX_AGE_S = 2.0


class StoreViews:
    """The answers over one store (see the module doc)."""

    def __init__(
        self,
        store: Store,
        session_name: str = "ray-otel-events",
        wiring_delay_s: float = DEFAULT_WIRING_CHECK_DELAY_S,
    ) -> None:
        self.store = store
        self.session_name = session_name
        self.wiring_delay_s = wiring_delay_s  # evidence this old before a missing kind is reported
        self._evidence: tuple[float, dict[str, dict[str, int]]] = (-EVIDENCE_MAX_AGE_S, {})  # (when, what)
        self._judge = SessionJudge()
        self._routes: list[tuple[re.Pattern[str], Callable[..., Answer]]] = [
            (re.compile(r"/api/version"), self.version),
            (re.compile(r"/api/sessions"), self.sessions),
            (re.compile(r"/api/ui/get/([a-z_]+)/([0-9a-zA-Z_-]+)"), self.get),
            (re.compile(r"/api/v0/(tasks|actors)/summarize"), self.summarize),
            (re.compile(r"/api/v0/(datasets|train_runs)"), self.export_list),
            (re.compile(r"/api/v0/([a-z_]+)"), self.list_resource),
            (re.compile(r"/api/ui/generation"), self.generation),
            (re.compile(r"/api/ui/overview"), self.overview),
            (re.compile(r"/api/ui/tasks"), self.tasks),
            (re.compile(r"/api/ui/tasks/([0-9a-fA-F]+)"), self.task),
            (re.compile(r"/api/ui/tasks/([0-9a-fA-F]+)/logs"), self.logs),
            (re.compile(r"/api/ui/timeline"), self.timeline),
            (re.compile(r"/api/ui/traces"), self.traces),
            (re.compile(r"/api/ui/traces/([0-9a-fA-F]{32})"), self.trace),
        ]

    def session_for(self, asked: str | None) -> str | None:
        """The session a read answers for: `asked` when given (BadRequest 404 when the store has no
        such session), else the newest; None for an empty store."""
        if asked:
            if asked not in self.store.sessions():
                raise BadRequest(f"no session {asked!r} in the store (GET /api/sessions lists them)", 404)
            return asked
        return self.store.newest_session()

    def answer(self, path: str, params: Params, session: str | None = None) -> Answer:
        """The answer for `path`, about `session` (else the newest session)."""
        for pattern, view in self._routes:
            match = pattern.fullmatch(path)
            if match:
                try:
                    return view(params, self.session_for(session), *match.groups())
                except BadRequest as exc:
                    if path.startswith("/api/v0/"):
                        return exc.status, state_query.envelope(None, ok=False, message=str(exc))
                    return exc.status, {"error": str(exc)}
        return 404, {"error": f"no such path {path}"}

    # -- Ray's state API -----------------------------------------------------------------------

    def version(self, _: Params, session: str | None) -> Answer:
        return 200, {
            "version": "4",
            "ray_version": RAY_VERSION,
            "ray_commit": "ray-otel-events",
            "session_name": session or self.session_name,
        }

    def list_resource(self, params: Params, session: str | None, resource: str) -> Answer:
        try:
            query = state_query.parse_query(resource, params)
        except state_query.QueryError as exc:
            return 400, state_query.envelope(None, ok=False, message=str(exc))
        selection = state_query.select(self.store, query, session=session)
        return 200, state_query.envelope(state_query.list_response(query, selection))

    def export_list(self, params: Params, session: str | None, resource: str) -> Answer:
        """Ray Data's datasets and Train v2's runs of the session (Ray's state API has no such
        list: `ray-otel-events list datasets|train-runs` reads it), newest first, in the state
        API's list envelope."""
        limit = _int_param(params, "limit", state_query.DEFAULT_LIMIT, 1, state_query.MAX_LIMIT)
        if resource == "datasets":
            rows = ray_export_views.dataset_rows(self.store.export_entities(DATASET, session))
        else:
            rows = ray_export_views.train_run_rows(
                self.store.export_entities(TRAIN_RUN, session),
                self.store.export_entities(TRAIN_RUN_ATTEMPT, session),
            )
        total = len(rows)
        filters = zip(
            params.getall("filter_keys", []),
            params.getall("filter_predicates", []),
            params.getall("filter_values", []),
            strict=False,
        )
        for key, predicate, value in filters:
            if rows and key not in rows[0]:
                return 400, state_query.envelope(None, ok=False, message=f"{resource} have no field {key!r}")
            rows = [r for r in rows if (str(r.get(key)).lower() == value.lower()) == (predicate == "=")]
        result = {"total": total, "num_after_truncation": len(rows), "num_filtered": len(rows)}
        return 200, state_query.envelope({**result, "result": rows[:limit], "partial_failure_warning": ""})

    def summarize(self, params: Params, session: str | None, resource: str) -> Answer:
        if resource != TASKS:
            return 200, state_query.envelope(state_query.summarize_actors(self.store, session))
        by = params.get("summary_by", "func_name")
        try:
            query = state_query.parse_query(TASKS, params)
            if by not in ("func_name", "lineage"):
                raise state_query.QueryError(f"summary_by={by!r}: func_name or lineage")
        except state_query.QueryError as exc:
            return 400, state_query.envelope(None, ok=False, message=str(exc))
        if not query.filters and by == "func_name":  # counted in SQL, whatever the store holds
            return 200, state_query.envelope(state_query.summarize_tasks(self.store, session))
        query.limit = 10**9
        rows = state_query.select(self.store, query, order="start", descending=False, session=session).rows
        if by == "func_name":
            return 200, state_query.envelope(state_query.summarize_task_rows(rows))
        nested = {"node_id_to_summary": {"cluster": {"summary": state_query.lineage(rows)}}}
        return 200, state_query.envelope(state_query.summary_response(len(rows), nested))

    # -- sessions and raw events ---------------------------------------------------------------

    def sessions(self, _: Params, session: str | None) -> Answer:
        """Every session, newest first, with what it lacks; the one answered for by default
        (`newest`: the newest with state rows) and the one answered for now (`current`: by default
        or by choice)."""
        return 200, {
            "current": session,
            "newest": self.store.newest_session(),
            "sessions": self.session_list(),
        }

    def session_list(self) -> list[dict[str, Any]]:
        """`Store.session_list` with each session's `missing` kinds of event (none: an empty list)."""
        evidence = self._session_evidence()
        entries = self.store.session_list()
        missing = self._judge.missing({entry["name"]: evidence.get(entry["name"], {}) for entry in entries})
        return [{**entry, "missing": missing[entry["name"]]} for entry in entries]

    def _session_evidence(self) -> dict[str, dict[str, int]]:
        """`Store.session_evidence`, a pass over every row: asked again only once EVIDENCE_MAX_AGE_S
        passed, however often the page asks while events stream in (a kind is reported missing
        only after the wiring delay anyway)."""
        when, evidence = self._evidence
        now = time.monotonic()
        if now - when > EVIDENCE_MAX_AGE_S:
            evidence = self.store.session_evidence(time.time() - self.wiring_delay_s)
            self._evidence = (now, evidence)
        return evidence

    def get(self, _: Params, session: str | None, resource: str, entity_id: str) -> Answer:
        """One entity's rows with every detail column, and the fields of its kept events that no fold
        reads (a later Ray's, one `make proto` added) under their snake_case names."""
        if resource not in state_query.RESOURCES:
            raise BadRequest(f"unknown resource {resource!r}; one of {', '.join(state_query.RESOURCES)}")
        rows = self.store.entity_rows(resource, entity_id, session) if session is not None else []
        if not rows:
            raise BadRequest(
                f"no {resource[:-1].replace('_', ' ')} with {ID_COLUMN[resource]} {entity_id}", 404
            )
        found = []
        for attempt, row_session, row in sorted(rows, key=lambda item: item[0]):
            shaped = state_query.shape(resource, row, detail=True)
            extra = self.store.new_fields(resource, entity_id, attempt, row_session)
            found.append({**shaped, **{k: v for k, v in extra.items() if k not in shaped}})
        return 200, {"session": session, "rows": found}

    def _shared(self, task_id: str) -> bool:
        """Whether more than one session has a task with this id."""
        return len({session for _, session, _ in self.store.entity_rows(TASKS, task_id)}) > 1

    # -- the page's API ------------------------------------------------------------------------

    def generation(self, _: Params, session: str | None) -> Answer:
        """What the page polls: a counter every write bumps (cheap, whatever the store holds)."""
        return 200, {"generation": self.store.generation}

    def overview(self, _: Params, session: str | None) -> Answer:
        """Jobs with their tasks' state counts, all tasks' counts, and the store's generation."""
        per_job: dict[str, dict[str, int]] = {}
        overall: dict[str, int] = {}
        for job, state, count in self.store.counts(TASKS, "job", "state", session=session):
            per_job.setdefault(job or "", {})[state] = count
            overall[state] = overall.get(state, 0) + count
        jobs = self.store.select(JOBS, limit=MAX_PAGE, session=session).rows
        listed = []
        for row in jobs:
            shaped = state_query.shape(JOBS, row, detail=True)
            shaped["task_counts"] = per_job.pop(row.get("job_id", ""), {})
            listed.append(shaped)
        for job_id, task_counts in per_job.items():  # tasks whose job has sent no event yet
            listed.append({"job_id": job_id, "status": "UNKNOWN", "task_counts": task_counts})
        return 200, {
            "generation": self.store.generation,
            "jobs": listed,
            "task_counts": overall,
            "actors": self.store.total(ACTORS, session),
            "session": session,
        }

    def tasks(self, params: Params, session: str | None) -> Answer:
        filters = [
            ColumnFilter(column, True, params[name])
            for name, column in UI_FILTERS.items()
            if params.get(name)
        ]
        order = params.get("sort", "updated")
        if order not in ORDERS:
            raise BadRequest(f"sort={order!r}: one of {', '.join(ORDERS)}")
        selection = self.store.select(
            TASKS,
            filters,
            search=params.get("q", ""),
            order=order,
            descending=params.get("order", "desc") != "asc",
            limit=_int_param(params, "limit", 100, 1, MAX_PAGE),
            offset=_int_param(params, "offset", 0, 0, 10**9),
            session=session,
        )
        return 200, {
            "generation": self.store.generation,
            "total": selection.total,
            "matched": selection.matched,
            "rows": [_ui_task(row) for row in selection.rows],
        }

    def task(self, _: Params, session: str | None, task_id: str) -> Answer:
        rows = self.store.entity_rows(TASKS, task_id, session) if session is not None else []
        if not rows:
            raise BadRequest(f"no task {task_id}", status=404)
        rows.sort(key=lambda item: item[0])
        # Spans and lines carry no session: a task id another session has too (a driver's) is told
        # apart by when they arrived.
        window = self.store.session_window(session) if self._shared(task_id) else None
        spans = self.store.spans_of_task(task_id, window)
        attempts = []
        for attempt, row_session, row in rows:
            shaped = state_query.shape(TASKS, row, detail=True)
            extra = {
                k: v
                for k, v in self.store.new_fields(TASKS, task_id, attempt, row_session).items()
                if k not in shaped
            }
            shaped.update(extra)
            # the page lists these apart: the fields of a later Ray, or ones no fold reads
            attempts.append({**shaped, "duration_ms": _duration_ms(row), "unread_fields": sorted(extra)})
        return 200, {
            "task_id": task_id.lower(),
            "session": session,
            "attempts": attempts,
            "transitions": _transitions(rows),
            "logs": self.store.task_logs(task_id, window),
            "spans": spans,
            "trace_id": spans[0]["trace_id"] if spans else None,
        }

    def task_log_lines(
        self, task_id: str, attempt: int | None = None, session: str | None = None
    ) -> list[dict[str, Any]]:
        """A task's stored output in time order (each line: ts_ns, stream, severity, body, pid,
        task_id, attempt, actor_id, job_id, trace_id, span_id), one attempt's when given. Lines
        without an attempt (written outside Ray's workers) belong to every attempt. Lines carry no
        session: a task id another session has too is told apart by when they arrived."""
        window = self.store.session_window(session) if session and self._shared(task_id) else None
        lines = self.store.task_logs(task_id, window)
        if attempt is None:
            return lines
        return [line for line in lines if line.get("attempt") in (None, attempt)]

    def logs(self, params: Params, session: str | None, task_id: str) -> Answer:
        """A task's lines whether or not its events were stored (`ray-otel-events logs`)."""
        attempt = _int_param(params, "attempt", -1, -1, 10**6)
        lines = self.task_log_lines(task_id, None if attempt < 0 else attempt, session)
        if not lines and not self.store.entity_rows(TASKS, task_id):
            raise BadRequest(f"no task {task_id} (neither its events nor log lines are stored)", status=404)
        return 200, {"task_id": task_id.lower(), "logs": lines}

    def timeline(self, params: Params, session: str | None) -> Answer:
        """Chrome/Perfetto trace events, as `ray timeline` writes them: a process per node, a
        thread per worker, one slice per task attempt and its profile events inside."""
        filters = [ColumnFilter("job", True, params["job_id"])] if params.get("job_id") else []
        rows = self.store.select(
            TASKS, filters, order="start", descending=False, limit=10**9, session=session
        ).rows
        return 200, chrome_trace(rows)

    def traces(self, params: Params, session: str | None) -> Answer:
        limit = _int_param(params, "limit", 20, 1, MAX_PAGE)
        return 200, {"traces": self.store.recent_traces(limit, self.store.session_window(session))}

    def trace(self, _: Params, session: str | None, trace_id: str) -> Answer:
        spans = self.store.trace(trace_id)
        if not spans:
            raise BadRequest(f"no trace {trace_id}", status=404)
        return 200, {"trace_id": trace_id.lower(), "spans": spans}


def chrome_trace(rows: list[Row]) -> list[dict[str, Any]]:
    """Trace events (`ph` X for slices, M for the process and thread names) for task rows."""
    events: list[dict[str, Any]] = []
    nodes: dict[str, int] = {}
    workers: dict[tuple[str, str], int] = {}
    for row in rows:
        start, end = row.get("start_time_ms"), row.get("end_time_ms")
        if start is None:
            continue
        node = row.get("node_id") or "unknown"
        worker = row.get("worker_id") or "unknown"
        pid = nodes.get(node)
        if pid is None:
            pid = nodes[node] = len(nodes) + 1
            events.append(
                {"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"node {node[:12]}"}}
            )
        tid = workers.get((node, worker))
        if tid is None:
            tid = workers[(node, worker)] = len(workers) + 1
            label = f"worker {worker[:12]}" + (f" pid={row['worker_pid']}" if row.get("worker_pid") else "")
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": label}})
        name = row.get("func_or_class_name") or row.get("name") or "task"
        finished = end if end is not None else start
        events.append(
            {
                "ph": "X",
                "cat": "task",
                "name": f"task::{name}",
                "pid": pid,
                "tid": tid,
                "ts": start * 1000,
                "dur": max(0, finished - start) * 1000,
                "cname": "rail_response" if row.get("state") == "FAILED" else "generic_work",
                "args": {
                    "task_id": row.get("task_id"),
                    "attempt_number": row.get("attempt_number", 0),
                    "state": row.get("state"),
                    "job_id": row.get("job_id"),
                    "error_type": row.get("error_type"),
                },
            }
        )
        for profile in (row.get("profiling_data") or {}).get("events", []):
            events.append(
                {
                    "ph": "X",
                    "cat": profile.get("event_name", ""),
                    "name": profile.get("event_name", ""),
                    "pid": pid,
                    "tid": tid,
                    "ts": profile.get("start_time", 0) * 1000,
                    "dur": max(0, profile.get("end_time", 0) - profile.get("start_time", 0)) * 1000,
                    "args": profile.get("extra_data") or {},
                }
            )
    return events
