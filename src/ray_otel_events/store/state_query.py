"""Ray's state API list semantics over stored rows: columns, filters, limit, and the response body.

The contract is Ray 2.60's `ray.util.state` (read from the installed package, restated here):
each resource has base columns (returned with `detail=false`) and detail columns, a set of
filterable columns, filters as `(key, "=" | "!=", value)` with the value converted to the
column's type, and a list response `{total, num_after_truncation, num_filtered, result,
partial_failure_warning, warnings}`. Every returned row has every column of its mode, None where
unknown, because Ray's client builds its dataclasses from them (`TaskState(**row)`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ray_otel_events.events import ids
from ray_otel_events.protobuf.common_pb2 import ACTOR_CREATION_TASK, TaskType
from ray_otel_events.store.backend import ColumnFilter, Selection, Store
from ray_otel_events.store.sql_reads import INTEGER_COLUMNS
from ray_otel_events.store.state_merge import (
    ACTORS,
    ID_COLUMN,
    INDEXED_FIELDS,
    INT64,
    JOBS,
    NODES,
    PLACEMENT_GROUPS,
    TASKS,
    WORKERS,
    Row,
    field_value,
)

BASE_COLUMNS: dict[str, list[str]] = {
    TASKS: [
        "task_id",
        "attempt_number",
        "name",
        "state",
        "job_id",
        "actor_id",
        "type",
        "func_or_class_name",
        "parent_task_id",
        "node_id",
        "worker_id",
        "worker_pid",
        "error_type",
    ],
    ACTORS: ["actor_id", "class_name", "state", "job_id", "name", "node_id", "pid", "ray_namespace"],
    NODES: [
        "node_id",
        "node_ip",
        "is_head_node",
        "state",
        "state_message",
        "node_name",
        "resources_total",
        "labels",
    ],
    WORKERS: ["worker_id", "is_alive", "worker_type", "exit_type", "node_id", "ip", "pid"],
    PLACEMENT_GROUPS: ["placement_group_id", "name", "creator_job_id", "state"],
    JOBS: ["job_id", "submission_id", "entrypoint", "type", "status", "message", "error_type", "driver_info"],
}

DETAIL_COLUMNS: dict[str, list[str]] = {
    TASKS: [
        "language",
        "required_resources",
        "runtime_env_info",
        "placement_group_id",
        "events",
        "profiling_data",
        "creation_time_ms",
        "start_time_ms",
        "end_time_ms",
        "task_log_info",
        "error_message",
        "is_debugger_paused",
        "call_site",
        "label_selector",
        "fallback_strategy",
    ],
    ACTORS: [
        "serialized_runtime_env",
        "required_resources",
        "death_cause",
        "is_detached",
        "placement_group_id",
        "repr_name",
        "num_restarts",
        "num_restarts_due_to_lineage_reconstruction",
        "num_restarts_due_to_node_preemption",
        "call_site",
        "label_selector",
        "fallback_strategy",
    ],
    NODES: ["start_time_ms", "end_time_ms"],
    WORKERS: [
        "exit_detail",
        "worker_launch_time_ms",
        "worker_launched_time_ms",
        "start_time_ms",
        "end_time_ms",
        "debugger_port",
        "num_paused_threads",
    ],
    PLACEMENT_GROUPS: ["bundles", "is_detached", "stats", "topology_strategy", "topology_assignments"],
    JOBS: [
        "start_time",
        "end_time",
        "metadata",
        "runtime_env",
        "driver_agent_http_address",
        "driver_node_id",
        "driver_exit_code",
    ],
}

FILTERABLE: dict[str, set[str]] = {
    TASKS: {
        "actor_id",
        "attempt_number",
        "error_type",
        "func_or_class_name",
        "is_debugger_paused",
        "job_id",
        "language",
        "name",
        "node_id",
        "parent_task_id",
        "placement_group_id",
        "state",
        "task_id",
        "type",
        "worker_id",
        "worker_pid",
    },
    ACTORS: {
        "actor_id",
        "class_name",
        "job_id",
        "name",
        "node_id",
        "pid",
        "placement_group_id",
        "ray_namespace",
    }
    | {"repr_name", "state"},
    NODES: {"is_head_node", "node_id", "node_ip", "node_name", "state"},
    WORKERS: {
        "debugger_port",
        "exit_type",
        "ip",
        "is_alive",
        "node_id",
        "num_paused_threads",
        "pid",
        "worker_id",
    }
    | {"worker_type"},
    PLACEMENT_GROUPS: {"creator_job_id", "is_detached", "name", "placement_group_id", "state"},
    JOBS: {"job_id", "status", "submission_id", "type"},
}

RESOURCES = tuple(BASE_COLUMNS)
DEFAULT_LIMIT = 100
MAX_LIMIT = 10_000
PREDICATES = ("=", "!=")


class QueryError(ValueError):
    """A query Ray's server would refuse with 400; the message says why."""


@dataclass
class ListQuery:
    resource: str
    limit: int = DEFAULT_LIMIT
    detail: bool = False
    exclude_driver: bool = True
    filters: list[tuple[str, str, str]] = field(default_factory=list)


def _flag(value: str | None, default: bool, name: str) -> bool:
    if value is None:
        return default
    lowered = value.lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise QueryError(f"{name}={value!r} is not a boolean")


def parse_query(resource: str, params: Any) -> ListQuery:
    """`params` is a multidict (`getall`, `get`) of Ray's query parameters."""
    if resource not in BASE_COLUMNS:
        raise QueryError(f"unknown resource {resource!r}; one of {', '.join(RESOURCES)}")
    try:
        limit = int(params.get("limit", DEFAULT_LIMIT))
    except ValueError:
        raise QueryError(f"limit={params.get('limit')!r} is not an integer") from None
    if not 0 < limit <= MAX_LIMIT:
        raise QueryError(f"limit must be between 1 and {MAX_LIMIT}, got {limit}")
    keys = params.getall("filter_keys", [])
    predicates = params.getall("filter_predicates", [])
    values = params.getall("filter_values", [])
    if not len(keys) == len(predicates) == len(values):
        raise QueryError("filter_keys, filter_predicates and filter_values must come in equal numbers")
    filters = []
    for key, predicate, value in zip(keys, predicates, values, strict=True):
        if key not in FILTERABLE[resource]:
            raise QueryError(
                f"Given filter column {key} is not supported. Supported filter columns: "
                f"{sorted(FILTERABLE[resource])}"
            )
        if predicate not in PREDICATES:
            raise QueryError(f"Unsupported filter predicate {predicate!r}; supported: {list(PREDICATES)}")
        if store_column(resource, key) in INTEGER_COLUMNS and not _fits_64_bits(value):
            raise QueryError(f"filter {key}={value!r}: an integer past 64 bits (no row holds one)")
        filters.append((key, predicate, value))
    return ListQuery(
        resource,
        limit,
        _flag(params.get("detail"), False, "detail"),
        _flag(params.get("exclude_driver"), True, "exclude_driver"),
        filters,
    )


def _fits_64_bits(value: str) -> bool:
    """Whether an integer filter's value is one the store's integer columns can hold (text that is
    no integer matches no row, as in Ray)."""
    try:
        number = int(value)
    except ValueError:
        return True
    return INT64[0] <= number <= INT64[1]


def _matches(value: Any, wanted: str) -> bool:
    """Ray converts the filter value to the column's type; ids and names compare as strings, and
    Ray's state values are upper case whatever case was typed."""
    if isinstance(value, bool):
        return value == (wanted.lower() in ("true", "1"))
    if isinstance(value, int):
        try:
            return value == int(wanted)
        except ValueError:
            return False
    if value is None:
        return wanted.lower() in ("", "none", "null")
    text = str(value)
    return text == wanted or text.upper() == wanted.upper()


def columns(resource: str, detail: bool) -> list[str]:
    return BASE_COLUMNS[resource] + (DETAIL_COLUMNS[resource] if detail else [])


_ACTOR_CREATION = TaskType.Name(ACTOR_CREATION_TASK)


def shape(resource: str, row: Row, detail: bool) -> Row:
    """A row with exactly its mode's columns (Ray's `filter_fields`)."""
    out = {column: field_value(resource, row, column) for column in columns(resource, detail)}
    if resource != TASKS:
        return out
    events = out.get("events")
    if events:
        out["events"] = [{"state": e["state"], "created_ms": e["created_ms"]} for e in events]
    if "actor_id" in out and out["actor_id"] is None and row.get("type") == _ACTOR_CREATION:
        # No release's definition event carries the actor of its creation task (Ray's GCS takes it
        # from the task's spec); its id ends with it (Ray's id layout).
        out["actor_id"] = ids.actor_of_task(bytes.fromhex(row["task_id"])).hex()
    return out


def store_column(resource: str, key: str) -> str | None:
    """The store's indexed column holding a filterable field, if it has one."""
    if key == ID_COLUMN[resource]:
        return "entity_id"
    if resource == TASKS and key == "attempt_number":
        return "attempt"
    for column, name in INDEXED_FIELDS[resource].items():
        if name == key:
            return column
    return None


def select(
    store: Store,
    query: ListQuery,
    *,
    order: str = "updated",
    descending: bool = True,
    offset: int = 0,
    session: str | None = None,
) -> Selection:
    """The rows a query names: filters on indexed fields in SQL, the others on the rows it returns."""
    resource = query.resource
    in_sql: list[ColumnFilter] = []
    residual: list[tuple[str, bool, str]] = []
    for key, predicate, value in query.filters:
        column = store_column(resource, key)
        if column is None:
            residual.append((key, predicate == "=", value))
        else:
            in_sql.append(ColumnFilter(column, predicate == "=", value))
    if resource == TASKS and query.exclude_driver:
        in_sql.append(ColumnFilter("kind", False, "DRIVER_TASK"))

    def keep(row: Row) -> bool:
        return all(
            _matches(field_value(resource, row, key), value) == equal for key, equal, value in residual
        )

    return store.select(
        resource,
        in_sql,
        keep=keep if residual else None,
        order=order,
        descending=descending,
        limit=query.limit,
        offset=offset,
        session=session,
    )


def list_response(query: ListQuery, selection: Selection) -> dict[str, Any]:
    """Ray's ListApiResponse as a dict: filtered, truncated to the limit, newest first."""
    truncated = max(0, selection.matched - len(selection.rows))
    return {
        "total": selection.total,
        "num_after_truncation": selection.total - truncated,
        "num_filtered": selection.matched,
        "result": [shape(query.resource, row, query.detail) for row in selection.rows],
        "partial_failure_warning": "",
        "warnings": None,
    }


def envelope(result: Any, *, ok: bool = True, message: str = "") -> dict[str, Any]:
    """The dashboard's reply body: `{"result": ok, "msg": ..., "data": {"result": ...}}`."""
    return {"result": ok, "msg": message, "data": {"result": result}}


def summary_response(total: int, result: dict[str, Any]) -> dict[str, Any]:
    """Ray's SummaryApiResponse: nothing is truncated or filtered in a summary."""
    return {
        "total": total,
        "num_after_truncation": total,
        "num_filtered": total,
        "result": result,
        "partial_failure_warning": "",
        "warnings": None,
    }


def summarize_tasks(store: Store, session: str | None = None) -> dict[str, Any]:
    """Ray's task summary by function name: type and counts per state, under one node key
    (`node_id_to_summary.cluster`), as `ray summary tasks` reads it."""
    return _task_summary(store.counts(TASKS, "func", "name", "kind", "state", session=session))


def summarize_task_rows(rows: list[Row]) -> dict[str, Any]:
    """The same summary over rows already selected (say, one job's)."""
    counts: dict[tuple[Any, ...], int] = {}
    for row in rows:
        key = (row.get("func_or_class_name"), row.get("name"), row.get("type"), row.get("state"))
        counts[key] = counts.get(key, 0) + 1
    return _task_summary([(*key, n) for key, n in counts.items()])


def _task_summary(counts: list[tuple[Any, ...]]) -> dict[str, Any]:
    summary: dict[str, dict[str, Any]] = {}
    totals = {"ACTOR_TASK": 0, "ACTOR_CREATION_TASK": 0, "other": 0}
    rows = 0
    for func, name, kind, state, count in counts:
        if kind == "DRIVER_TASK":  # Ray's summary leaves the driver out, as its lists do
            continue
        key = name or func or ""  # Ray keys by task name first (a named actor: `name:Class.__init__`)
        entry = summary.setdefault(key, {"func_or_class_name": key, "type": kind, "state_counts": {}})
        state = state or "NIL"  # an attempt with no lifecycle event yet: Ray's default status
        entry["state_counts"][state] = entry["state_counts"].get(state, 0) + count
        totals[kind if kind in totals else "other"] += count
        rows += count
    return summary_response(
        rows,
        {
            "node_id_to_summary": {
                "cluster": {
                    "summary": summary,
                    "total_tasks": totals["other"],
                    "total_actor_tasks": totals["ACTOR_TASK"],
                    "total_actor_scheduled": totals["ACTOR_CREATION_TASK"],
                    "summary_by": "func_name",
                }
            }
        },
    )


def summarize_actors(store: Store, session: str | None = None) -> dict[str, Any]:
    summary: dict[str, dict[str, Any]] = {}
    total = 0
    for class_name, state, count in store.counts(ACTORS, "func", "state", session=session):
        entry = summary.setdefault(class_name, {"class_name": class_name, "state_counts": {}})
        entry["state_counts"][state] = entry["state_counts"].get(state, 0) + count
        total += count
    return summary_response(
        total,
        {
            "node_id_to_summary": {
                "cluster": {"summary": summary, "total_actors": total, "summary_by": "class"}
            }
        },
    )


def lineage(rows: list[Row]) -> list[dict[str, Any]]:
    """Ray's lineage summary: tasks under the task that submitted them, an actor's tasks under the
    actor, and same-named siblings under one GROUP; each node counts the states below it."""
    by_id = {r["task_id"]: r for r in rows}
    children: dict[str | None, list[Row]] = {}
    for row in rows:
        parent = row.get("parent_task_id")
        children.setdefault(parent if parent in by_id else None, []).append(row)

    def task_node(row: Row) -> dict[str, Any]:
        kids = nodes_of(children.get(row["task_id"], []))
        return {
            "name": row.get("name") or row.get("func_or_class_name") or "",
            "key": row["task_id"],
            "type": row.get("type", "NORMAL_TASK"),
            "timestamp": row.get("creation_time_ms") or 0,
            "state_counts": _merge_counts([{row.get("state", "NIL"): 1}] + [k["state_counts"] for k in kids]),
            "children": kids,
            "link": {"type": "task", "id": row["task_id"]},
        }

    def nodes_of(siblings: list[Row]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        actors: dict[str, list[dict[str, Any]]] = {}
        names: dict[str, list[dict[str, Any]]] = {}
        for row in siblings:
            node = task_node(row)
            if row.get("actor_id"):
                actors.setdefault(row["actor_id"], []).append(node)
            else:
                names.setdefault(node["name"], []).append(node)
        for actor_id, members in actors.items():
            creation = next((m for m in members if m["type"] == "ACTOR_CREATION_TASK"), members[0])
            out.append(
                {
                    "name": creation["name"].split(".")[0],
                    "key": f"actor:{actor_id}",
                    "type": "ACTOR",
                    "timestamp": min(m["timestamp"] for m in members),
                    "state_counts": _merge_counts([m["state_counts"] for m in members]),
                    "children": members,
                    "link": {"type": "actor", "id": actor_id},
                }
            )
        for name, members in names.items():
            if len(members) == 1:
                out.append(members[0])
                continue
            out.append(
                {
                    "name": name,
                    "key": name,
                    "type": "GROUP",
                    "timestamp": min(m["timestamp"] for m in members),
                    "state_counts": _merge_counts([m["state_counts"] for m in members]),
                    "children": members,
                }
            )
        return sorted(out, key=lambda n: n["timestamp"])

    return nodes_of(children.get(None, []))


def _merge_counts(counts: list[dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for one in counts:
        for state, n in one.items():
            out[state] = out.get(state, 0) + n
    return out
