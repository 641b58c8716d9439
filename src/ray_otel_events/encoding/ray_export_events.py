"""Ray's Export API events as the per-node collector POSTs them to `/v1/ray-export-events`.

Ray writes datasets, Train runs and submitted jobs only to files on the node
(`<session>/logs/export_events/event_<TYPE>.log`, a JSON object a line: `event_id`, `timestamp` in
seconds, `source_type`, `event_data` with snake_case keys). The collector POSTs
`{"sessionName", "nodeId", "hostname", "events": [each line's object as read]}`. Each event is a
snapshot of one entity (a dataset, a Train run or attempt, a submission), so an entity is the newest
snapshot of it: `ExportEntity.order` says which is newer, `merged` keeps what a newer snapshot of a
dataset leaves out (Ray writes the data context and the operators' arguments only in the first).
Both `serve` (the store) and the bridge (spans) read the POST here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

DATASET = "EXPORT_DATASET_METADATA"
OPERATOR_EVENT = "EXPORT_DATASET_OPERATOR_EVENT"
OPERATOR_SCHEMA = "EXPORT_DATASET_OPERATOR_SCHEMA"
TRAIN_RUN = "EXPORT_TRAIN_RUN"
TRAIN_RUN_ATTEMPT = "EXPORT_TRAIN_RUN_ATTEMPT"
SUBMISSION_JOB = "EXPORT_SUBMISSION_JOB"

# The field of `event_data` naming the entity a snapshot is of; None: each event is its own (an
# operator event says what happened once, it is no snapshot).
ENTITY_FIELD: dict[str, str | None] = {
    DATASET: "dataset_id",
    OPERATOR_EVENT: None,
    OPERATOR_SCHEMA: "operator_uuid",
    TRAIN_RUN: "id",
    TRAIN_RUN_ATTEMPT: "attempt_id",
    SUBMISSION_JOB: "submission_job_id",
}
# How far along a status is, for two snapshots written in the same second (`timestamp` is whole
# seconds): a later state wins the tie, so a retried older line never undoes a newer one.
_PROGRESS = {
    "PENDING": 0,
    "INITIALIZING": 0,
    "SCHEDULING": 1,
    "RUNNING": 2,
    "RESTARTING": 2,
    "RESIZING": 2,
    "FINISHED": 3,
    "FAILED": 3,
    "ERRORED": 3,
    "ABORTED": 3,
    "SUCCEEDED": 3,
    "STOPPED": 3,
}


class BadExportPost(ValueError):
    """The body is not the collector's object (the message says what is wrong): a 400."""


@dataclass(frozen=True)
class ExportEntity:
    """One event read: the entity it is a snapshot of, and the event as posted (`event`), with the
    node it came from."""

    kind: str  # the event's source_type
    entity_id: str
    timestamp: float
    event: dict[str, Any]
    node_id: str
    hostname: str

    @property
    def data(self) -> dict[str, Any]:
        return self.event["event_data"]  # type: ignore[no-any-return]

    @property
    def order(self) -> tuple[float, int]:
        return order_of(self.timestamp, self.data)


@dataclass
class ExportPost:
    session: str
    node_id: str
    hostname: str
    entities: list[ExportEntity]
    errors: list[str]  # one per event that could not be read, naming it


def order_of(timestamp: float, data: dict[str, Any]) -> tuple[float, int]:
    """(when, how far along): a snapshot's status, then its operators' (a dataset's operators move
    on within its state), so of two written in one second the later one wins."""
    operators = (
        (data.get("topology") or {}).get("operators") or [] if isinstance(data.get("topology"), dict) else []
    )
    steps = sum(_PROGRESS.get(str(op.get("state") or ""), 0) for op in operators if isinstance(op, dict))
    return timestamp, _PROGRESS.get(str(data.get("status") or data.get("state") or ""), 0) * 1000 + steps


def read_export_post(body: bytes) -> ExportPost:
    """The POST read; an event that cannot be read is named in `errors`, the rest kept. Raises
    BadExportPost when the body is not the collector's object."""
    try:
        post = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadExportPost(f"the body is not JSON: {exc}") from None
    if not isinstance(post, dict):
        raise BadExportPost('the body must be a JSON object {"sessionName", "nodeId", "hostname", "events"}')
    session, node_id, hostname, events = (
        post.get(k) for k in ("sessionName", "nodeId", "hostname", "events")
    )
    if not isinstance(session, str) or not session.startswith("session_"):
        raise BadExportPost('"sessionName" must be the Ray session\'s name ("session_...")')
    if not isinstance(node_id, str) or not isinstance(hostname, str):
        raise BadExportPost('"nodeId" and "hostname" must be strings (empty when not known)')
    if not isinstance(events, list):
        raise BadExportPost('"events" must be a JSON array of export-event objects')
    entities: list[ExportEntity] = []
    errors: list[str] = []
    for position, event in enumerate(events):
        try:
            entities.append(_entity(event, node_id, hostname))
        except ValueError as exc:
            name = event.get("event_id") if isinstance(event, dict) else None
            errors.append(f"event {position}{f' ({name})' if isinstance(name, str) else ''}: {exc}")
    return ExportPost(session, node_id, hostname, entities, errors)


def _entity(event: Any, node_id: str, hostname: str) -> ExportEntity:
    if not isinstance(event, dict):
        raise ValueError("not a JSON object")
    event_id, timestamp, kind, data = (
        event.get(k) for k in ("event_id", "timestamp", "source_type", "event_data")
    )
    if not isinstance(event_id, str) or not event_id:
        raise ValueError('"event_id" must be a non-empty string')
    if isinstance(timestamp, bool) or not isinstance(timestamp, int | float):
        raise ValueError('"timestamp" must be a number (seconds)')
    if not isinstance(kind, str) or kind not in ENTITY_FIELD:
        raise ValueError(f'"source_type" {kind!r} is none this version keeps ({", ".join(ENTITY_FIELD)})')
    if not isinstance(data, dict):
        raise ValueError('"event_data" must be a JSON object')
    field = ENTITY_FIELD[kind]
    entity_id = event_id if field is None else data.get(field)
    if not isinstance(entity_id, str) or not entity_id:
        raise ValueError(f'"event_data.{field}" must be a non-empty string')
    return ExportEntity(kind, entity_id, float(timestamp), event, node_id, hostname)


def merged(older: dict[str, Any], newer: dict[str, Any]) -> dict[str, Any]:
    """`newer`'s event_data, with a dataset's data context and operators' arguments kept from
    `older` where `newer` leaves them empty (Ray writes them only when it registers the dataset)."""
    if not older:
        return newer
    out = dict(newer)
    if not out.get("data_context") and older.get("data_context"):
        out["data_context"] = older["data_context"]
    old_ops = {op.get("id"): op for op in (older.get("topology") or {}).get("operators") or []}
    if old_ops and isinstance(out.get("topology"), dict):
        operators = []
        for op in out["topology"].get("operators") or []:
            before = old_ops.get(op.get("id"))
            if before and not op.get("args") and before.get("args"):
                op = {**op, "args": before["args"]}
            operators.append(op)
        out["topology"] = {**out["topology"], "operators": operators}
    return out
