"""RayEvent JSON pieces merged into the state rows Ray's state API returns.

Ray keeps one row per task attempt, actor, job, node, worker and placement group, built from a
definition piece and any number of lifecycle pieces that arrive in any order, in any POST. Here
each piece is folded into a plain dict whose keys are the field names of `ray.util.state`'s
dataclasses (TaskState, ActorState, ...), so a row can be answered as it is. A row's `state` is
the state of its latest transition by timestamp, whatever order the pieces came in; the
transitions themselves are kept as history. Ids are turned from base64 into Ray's hex.
"""

from __future__ import annotations

import binascii
import dataclasses
import datetime
import functools
import json
import re
import reprlib
from collections.abc import Callable
from operator import itemgetter
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import orjson

from ray_otel_events import native
from ray_otel_events.encoding.older_releases import RAY_2_49, execution_as_lifecycle
from ray_otel_events.events.registry import ET, REGISTRY, event_type_name
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent
from ray_otel_events.store.fold_schema import RAY_KEYS as KEY
from ray_otel_events.store.fold_schema import TASK_ROW as FIELD
from ray_otel_events.store.fold_schema import TASK_VALUES as VALUE

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

Row = dict[str, Any]

TASKS, ACTORS, JOBS, NODES, WORKERS, PLACEMENT_GROUPS = (
    "tasks",
    "actors",
    "jobs",
    "nodes",
    "workers",
    "placement_groups",
)


Fold = Callable[[Row, dict[str, Any]], None]

# What reading or folding a malformed piece raises: a value of the wrong form (bad base64 is a
# binascii.Error, a ValueError; a bad number or time) or an object of the wrong shape (a list
# where an object belongs, a missing key). The store refuses that piece alone.
FOLD_ERRORS = (ValueError, TypeError, AttributeError, KeyError)


class Piece(NamedTuple):
    """Where one event goes: the resource, the row's key, and how to fold it in."""

    event_type: str
    resource: str
    entity_id: str
    attempt: int
    fold: Fold
    body: dict[str, Any]


@functools.lru_cache(maxsize=65536)  # job, node, worker and parent ids repeat in every piece
def hex_id(value: Any) -> str:
    """Base64 (as in RayEvent JSON) to Ray's hex; empty stays empty."""
    if not value:
        return ""
    return binascii.a2b_base64(value, strict_mode=True).hex()


@functools.lru_cache(maxsize=1024)
def _nil_to_none(hexed: str) -> str | None:
    return None if not hexed or set(hexed) == {"f"} else hexed


@functools.lru_cache(maxsize=4096)
def _epoch_seconds(whole: str) -> int:
    return int(datetime.datetime.fromisoformat(whole).replace(tzinfo=datetime.UTC).timestamp())


def rfc3339_ns(value: Any) -> int:
    """`2026-11-22T01:37:30.525422162Z` to ns since the epoch (nanoseconds kept)."""
    if not value:
        return 0
    if len(value) == 30 and value[19] == "." and value[29] == "Z":  # what Ray prints: 9 digits
        return _epoch_seconds(value[:19]) * 1_000_000_000 + int(value[20:29])
    text = str(value).rstrip("Z")
    whole, _, fraction = text.partition(".")
    return _epoch_seconds(whole) * 1_000_000_000 + int((fraction + "000000000")[:9])


def _ms(ns: int) -> int:
    return ns // 1_000_000


def _descriptor_name(func: dict[str, Any]) -> str:
    """Ray's CallString for a Python descriptor: `Class.function`, or `function`."""
    python = func.get(KEY.python_function_descriptor) or {}
    cls, name = python.get(KEY.class_name, ""), python.get(KEY.function_name, "")
    return f"{cls}.{name}" if cls else name


_BY_NS = itemgetter(FIELD.created_ns)


def _transitions(row: Row, body: dict[str, Any]) -> None:
    """Merge the piece's transitions into the row's `events`; `state` is the latest one's."""
    state_, created_ms, created_ns = FIELD.state, FIELD.created_ms, FIELD.created_ns
    events = row.get(FIELD.events)
    if events is None:
        events = row[FIELD.events] = []
    transitions = body.get(KEY.state_transitions)
    if not transitions:
        return
    known = {(e[state_], e[created_ns]) for e in events} if events else ()
    for transition in transitions:
        state, ns = transition.get(KEY.state, ""), rfc3339_ns(transition.get(KEY.timestamp))
        if (state, ns) not in known:
            events.append({state_: state, created_ms: ns // 1_000_000, created_ns: ns})
    events.sort(key=_BY_NS)
    row[state_] = events[-1][state_]


def _in_time_order(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A piece's transitions oldest first, so the last one sets a row's current fields."""
    return sorted(body.get(KEY.state_transitions, []), key=lambda t: rfc3339_ns(t.get(KEY.timestamp)))


def _first_ms(row: Row, *states: str) -> int | None:
    for event in row.get("events", []):
        if event["state"] in states:
            return int(event["created_ms"])
    return None


def _last_ms(row: Row, *states: str) -> int | None:
    found = None
    for event in row.get("events", []):
        if event["state"] in states:
            found = int(event["created_ms"])
    return found


# Each fold reads its payload's keys from a table (`_payload_keys`; the task folds' is fold_schema's):
# what a fold reads is its table, so a payload's other fields (one `make proto` adds, say) show in
# the detail (`FOLDED_KEYS`). Keys inside a payload's messages are read by their names.

K = TypeVar("K", bound="DataclassInstance")


def _payload_keys(event_type: int, keys: type[K]) -> K:
    """`keys` (a dataclass of str fields, each named by a field of `event_type`'s payload) with each
    field's JSON name; RuntimeError names one the payload does not have."""
    payload = RayEvent.DESCRIPTOR.fields_by_name[REGISTRY[event_type].payload_field].message_type
    if payload is None:
        raise RuntimeError(f"{event_type_name(event_type)} has no payload message")
    fields = payload.fields_by_name
    missing = [f.name for f in dataclasses.fields(keys) if f.name not in fields]
    if missing:
        raise RuntimeError(f"{payload.full_name} has no field {', '.join(missing)}: the fold reads it")
    return keys(**{f.name: fields[f.name].json_name for f in dataclasses.fields(keys)})


def _read_keys(keys: DataclassInstance) -> frozenset[str]:
    return frozenset(dataclasses.astuple(keys))


@dataclasses.dataclass(frozen=True, slots=True)
class _LifecycleKeys:
    state_transitions: str


# -- tasks ---------------------------------------------------------------------------------
# Their keys, fields and state names are fold_schema's: the compiled folds are bound with the same.


def _task_definition(row: Row, body: dict[str, Any]) -> None:
    actor_task = KEY.actor_task_name in body or KEY.actor_func in body
    func = body.get(KEY.actor_func) if actor_task else body.get(KEY.task_func)
    row.update(
        {
            FIELD.name: body.get(KEY.actor_task_name) if actor_task else body.get(KEY.task_name, ""),
            FIELD.type: VALUE.actor_task if actor_task else body.get(KEY.task_type, VALUE.normal_task),
            FIELD.func_or_class_name: _descriptor_name(func or {}),
            FIELD.language: body.get(KEY.language, VALUE.python),
            FIELD.required_resources: body.get(KEY.required_resources, {}),
            FIELD.runtime_env_info: {
                FIELD.serialized_runtime_env: body.get(KEY.serialized_runtime_env, VALUE.empty_runtime_env)
            },
            FIELD.placement_group_id: _nil_to_none(hex_id(body.get(KEY.placement_group_id))),
            FIELD.parent_task_id: hex_id(body.get(KEY.parent_task_id)),
            FIELD.job_id: hex_id(body.get(KEY.job_id)),
            FIELD.actor_id: _nil_to_none(hex_id(body.get(KEY.actor_id))),
            FIELD.call_site: body.get(KEY.call_site) or None,
            FIELD.label_selector: body.get(KEY.label_selector) or {},
        }
    )


def _task_lifecycle(row: Row, body: dict[str, Any]) -> None:
    _transitions(row, body)
    if body.get(KEY.job_id):
        row[FIELD.job_id] = hex_id(body[KEY.job_id])
    if body.get(KEY.node_id):
        row[FIELD.node_id] = hex_id(body[KEY.node_id])
    if body.get(KEY.worker_id):
        row[FIELD.worker_id] = hex_id(body[KEY.worker_id])
    if body.get(KEY.worker_pid):
        row[FIELD.worker_pid] = int(body[KEY.worker_pid])
    error = body.get(KEY.ray_error_info)
    if error:
        row[FIELD.error_type] = error.get(KEY.error_type)
        row[FIELD.error_message] = error.get(KEY.error_message)
    log_info = body.get(KEY.task_log_info)
    if log_info:
        row[FIELD.task_log_info] = {
            FIELD.stdout_file: log_info.get(KEY.stdout_file),
            FIELD.stderr_file: log_info.get(KEY.stderr_file),
            FIELD.stdout_start: int(log_info.get(KEY.stdout_start, 0)),
            FIELD.stdout_end: int(log_info.get(KEY.stdout_end, 0)),
            FIELD.stderr_start: int(log_info.get(KEY.stderr_start, 0)),
            FIELD.stderr_end: int(log_info.get(KEY.stderr_end, 0)),
        }
    created = started = ended = None
    state_, created_ms = FIELD.state, FIELD.created_ms
    for event in row[FIELD.events]:
        state = event[state_]
        if state in VALUE.pending:
            created = event[created_ms] if created is None else created
        elif state in VALUE.running:
            started = event[created_ms] if started is None else started
        elif state in VALUE.ended:
            ended = event[created_ms]
    row[FIELD.creation_time_ms], row[FIELD.start_time_ms], row[FIELD.end_time_ms] = created, started, ended


def _task_execution(row: Row, body: dict[str, Any]) -> None:
    """Ray 2.49's TASK_EXECUTION_EVENT, folded as the lifecycle event later releases send."""
    _task_lifecycle(row, execution_as_lifecycle(body))


@dataclasses.dataclass(frozen=True, slots=True)
class _TaskProfileKeys:
    profile_events: str
    job_id: str


TASK_PROFILE = _payload_keys(ET.TASK_PROFILE_EVENT, _TaskProfileKeys)


def _task_profile(row: Row, body: dict[str, Any]) -> None:
    profile = body.get(TASK_PROFILE.profile_events) or {}
    data = row.setdefault(
        "profiling_data",
        {
            "component_type": profile.get("componentType", ""),
            "component_id": hex_id(profile.get("componentId")),
            "node_ip_address": profile.get("nodeIpAddress", ""),
            "events": [],
        },
    )
    for event in profile.get("events", []):
        data["events"].append(
            {
                "event_name": event.get("eventName", ""),
                # ms with a fraction, as Ray's state API turns the events' ns (`ray timeline` µs)
                "start_time": int(event.get("startTime", 0)) / 1e6,
                "end_time": int(event.get("endTime", 0)) / 1e6,
                "extra_data": json.loads(event["extraData"]) if event.get("extraData") else {},
            }
        )
    if body.get(TASK_PROFILE.job_id):
        row.setdefault("job_id", hex_id(body[TASK_PROFILE.job_id]))


# -- actors, jobs, nodes, workers, placement groups --------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class _ActorDefinitionKeys:
    class_name: str
    job_id: str
    name: str
    ray_namespace: str
    serialized_runtime_env: str
    required_resources: str
    is_detached: str
    placement_group_id: str
    call_site: str
    label_selector: str


ACTOR_DEFINITION = _payload_keys(ET.ACTOR_DEFINITION_EVENT, _ActorDefinitionKeys)


def _actor_definition(row: Row, body: dict[str, Any]) -> None:
    key = ACTOR_DEFINITION
    row.update(
        {
            "class_name": body.get(key.class_name, ""),
            "job_id": hex_id(body.get(key.job_id)),
            "name": body.get(key.name, ""),
            "ray_namespace": body.get(key.ray_namespace, ""),
            "serialized_runtime_env": body.get(key.serialized_runtime_env, "{}"),
            "required_resources": body.get(key.required_resources, {}),
            "is_detached": bool(body.get(key.is_detached, False)),
            "placement_group_id": _nil_to_none(hex_id(body.get(key.placement_group_id))),
            "call_site": body.get(key.call_site) or None,
            "label_selector": body.get(key.label_selector) or {},
        }
    )


def _actor_lifecycle(row: Row, body: dict[str, Any]) -> None:
    _transitions(row, body)
    for transition in _in_time_order(body):
        if transition.get("nodeId"):
            row["node_id"] = hex_id(transition["nodeId"])
        if transition.get("pid"):
            row["pid"] = int(transition["pid"])
        if transition.get("reprName"):
            row["repr_name"] = transition["reprName"]
        if transition.get("deathCause"):
            row["death_cause"] = ray_message_dict(transition["deathCause"])
    row["num_restarts"] = max(0, sum(1 for e in row["events"] if e["state"] == "ALIVE") - 1)


# Ray's state API decodes these fields of a message (at any depth) from bytes to hex
# (`protobuf_message_to_dict(fields_to_decode=...)` in its state aggregator).
_DECODED_IDS = frozenset({"actor_id", "owner_id", "job_id", "node_id", "placement_group_id", "worker_id"})
_CAMEL_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def ray_message_dict(value: Any) -> Any:
    """A message of RayEvent JSON (lowerCamelCase keys, base64 bytes) as Ray's state API gives it:
    snake_case keys, ids in hex (an actor's `death_cause`)."""
    if isinstance(value, list):
        return [ray_message_dict(item) for item in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        name = _CAMEL_HUMP.sub("_", key).lower()
        out[name] = hex_id(item) if name in _DECODED_IDS and isinstance(item, str) else ray_message_dict(item)
    return out


# The metadata Ray's job supervisor gives a submitted job's driver (job_supervisor.py): the
# submission id, and the job's name (the submission id unless the user named it).
SUBMISSION_ID_KEY, JOB_NAME_KEY = "job_submission_id", "job_name"
SUBMITTED_MESSAGE = (
    "The job's driver finished. Ray 2.60 exports no submission-job events, so the entrypoint's "
    "exit code and Ray's status message were not recorded."
)


@dataclasses.dataclass(frozen=True, slots=True)
class _JobDefinitionKeys:
    job_id: str
    driver_pid: str
    driver_node_id: str
    entrypoint: str
    config: str


JOB_DEFINITION = _payload_keys(ET.DRIVER_JOB_DEFINITION_EVENT, _JobDefinitionKeys)


def _job_definition(row: Row, body: dict[str, Any]) -> None:
    """A driver started by `ray job submit` carries its submission id in its metadata: its row is
    the submission's, as Ray's job head ties the two (`dashboard/modules/job/utils.py`), with the
    user's metadata only."""
    key = JOB_DEFINITION
    config = body.get(key.config) or {}
    metadata = dict(config.get("metadata") or {})
    submission_id = metadata.pop(SUBMISSION_ID_KEY, None)
    if submission_id and metadata.get(JOB_NAME_KEY) == submission_id:
        del metadata[JOB_NAME_KEY]
    row.update(
        {
            "type": "SUBMISSION" if submission_id else "DRIVER",
            "submission_id": submission_id or None,
            "entrypoint": body.get(key.entrypoint, ""),
            "metadata": metadata,
            "runtime_env": json.loads(config.get("serializedRuntimeEnv") or "{}"),
            "driver_node_id": hex_id(body.get(key.driver_node_id)),
            "driver_info": {
                "id": hex_id(body.get(key.job_id)),
                "node_ip_address": "",  # in no release's events (2.49 to 2.60)
                "pid": str(body.get(key.driver_pid, "")),
            },
        }
    )
    _submitted_message(row)


_JOB_STATUS = {"CREATED": "RUNNING", "FINISHED": "SUCCEEDED"}


def _submitted_message(row: Row) -> None:
    """A submitted job's status message, once its driver finished (in whichever order its
    definition and lifecycle pieces came)."""
    if row.get("submission_id") and row.get("state") == "FINISHED":
        row["message"] = SUBMITTED_MESSAGE


def _job_lifecycle(row: Row, body: dict[str, Any]) -> None:
    _transitions(row, body)
    if "state" in row:  # a piece with no transitions says nothing of it
        row["status"] = _JOB_STATUS.get(row["state"], row["state"])
    _submitted_message(row)
    row["start_time"] = _first_ms(row, "CREATED")
    row["end_time"] = _last_ms(row, "FINISHED")


@dataclasses.dataclass(frozen=True, slots=True)
class _NodeDefinitionKeys:
    node_ip_address: str
    node_name: str
    hostname: str
    labels: str
    start_timestamp: str


NODE_DEFINITION = _payload_keys(ET.NODE_DEFINITION_EVENT, _NodeDefinitionKeys)


def _node_definition(row: Row, body: dict[str, Any]) -> None:
    key = NODE_DEFINITION
    row.update(
        {
            "node_ip": body.get(key.node_ip_address, ""),
            "node_name": body.get(key.node_name, ""),
            "hostname": body.get(key.hostname, ""),
            "labels": body.get(key.labels) or {},
            "start_time_ms": _ms(rfc3339_ns(body.get(key.start_timestamp))) or None,
        }
    )


def _node_lifecycle(row: Row, body: dict[str, Any]) -> None:
    _transitions(row, body)
    for transition in _in_time_order(body):
        if transition.get("resources"):
            row["resources_total"] = transition["resources"]
            row["is_head_node"] = "node:__internal_head__" in transition["resources"]
        if transition.get("deathInfo"):
            row["state_message"] = (transition["deathInfo"] or {}).get("reasonMessage")
    row["end_time_ms"] = _last_ms(row, "DEAD")


@dataclasses.dataclass(frozen=True, slots=True)
class _WorkerDefinitionKeys:
    worker_type: str
    node_id: str
    pid: str


WORKER_DEFINITION = _payload_keys(ET.WORKER_DEFINITION_EVENT, _WorkerDefinitionKeys)


def _worker_definition(row: Row, body: dict[str, Any]) -> None:
    key = WORKER_DEFINITION
    row.update(
        {
            "worker_type": body.get(key.worker_type, "WORKER"),
            "node_id": hex_id(body.get(key.node_id)),
            "pid": int(body.get(key.pid, 0)),
            "ip": "",  # in no release's events (2.49 to 2.60)
        }
    )


def _worker_lifecycle(row: Row, body: dict[str, Any]) -> None:
    _transitions(row, body)
    if "state" in row:
        row["is_alive"] = row["state"] == "ALIVE"
    for transition in _in_time_order(body):
        for source, target in (
            ("workerLaunchTimeMs", "worker_launch_time_ms"),
            ("workerLaunchedTimeMs", "worker_launched_time_ms"),
            ("startTimeMs", "start_time_ms"),
            ("endTimeMs", "end_time_ms"),
        ):
            if int(transition.get(source, 0) or 0):
                row[target] = int(transition[source])
        death = transition.get("deathInfo") or {}
        if death.get("exitType"):
            row["exit_type"] = death["exitType"]
        if death.get("exitDetail"):
            row["exit_detail"] = death["exitDetail"]


@dataclasses.dataclass(frozen=True, slots=True)
class _PlacementGroupDefinitionKeys:
    name: str
    creator_job_id: str
    is_detached: str
    bundles: str
    strategy: str


PLACEMENT_GROUP_DEFINITION = _payload_keys(ET.PLACEMENT_GROUP_DEFINITION_EVENT, _PlacementGroupDefinitionKeys)


def _pg_definition(row: Row, body: dict[str, Any]) -> None:
    key = PLACEMENT_GROUP_DEFINITION
    row.update(
        {
            "name": body.get(key.name, ""),
            "creator_job_id": hex_id(body.get(key.creator_job_id)),
            "is_detached": bool(body.get(key.is_detached, False)),
            "bundles": body.get(key.bundles, []),
            "topology_strategy": body.get(key.strategy, ""),
        }
    )


def _pg_lifecycle(row: Row, body: dict[str, Any]) -> None:
    _transitions(row, body)


_TASK_KEYS = _read_keys(KEY)  # the task folds read fold_schema's keys, wherever they are

# What each fold reads of its payload (besides the route's id and attempt keys): a new fold must say.
_READS: dict[Fold, frozenset[str]] = {
    _task_definition: _TASK_KEYS,
    _task_lifecycle: _TASK_KEYS,
    _task_execution: _TASK_KEYS | {RAY_2_49.task_state},
    _task_profile: _read_keys(TASK_PROFILE),
    _actor_definition: _read_keys(ACTOR_DEFINITION),
    _job_definition: _read_keys(JOB_DEFINITION),
    _node_definition: _read_keys(NODE_DEFINITION),
    _worker_definition: _read_keys(WORKER_DEFINITION),
    _pg_definition: _read_keys(PLACEMENT_GROUP_DEFINITION),
    **{
        fold: _read_keys(_payload_keys(event_type, _LifecycleKeys))
        for event_type, fold in (
            (ET.ACTOR_LIFECYCLE_EVENT, _actor_lifecycle),
            (ET.DRIVER_JOB_LIFECYCLE_EVENT, _job_lifecycle),
            (ET.NODE_LIFECYCLE_EVENT, _node_lifecycle),
            (ET.WORKER_LIFECYCLE_EVENT, _worker_lifecycle),
            (ET.PLACEMENT_GROUP_LIFECYCLE_EVENT, _pg_lifecycle),
        )
    },
}


def _route_of(
    event_type: int, resource: str, id_field: str, attempt_field: str | None, fold: Fold
) -> tuple[str, str, str, str | None, Fold]:
    """An event type's route, its keys Ray's JSON names from the descriptors: the event's payload
    (the registry's payload field) and the payload's id and attempt fields."""
    payload = RayEvent.DESCRIPTOR.fields_by_name[REGISTRY[event_type].payload_field]
    if payload.message_type is None:
        raise RuntimeError(f"{payload.full_name} is not a message")
    fields = payload.message_type.fields_by_name
    attempt = fields[attempt_field].json_name if attempt_field else None
    return payload.json_name, resource, fields[id_field].json_name, attempt, fold


# event type -> (payload key, resource, id key, attempt key, fold)
_ROUTES: dict[str, tuple[str, str, str, str | None, Fold]] = {
    event_type_name(event_type): _route_of(event_type, *rest)
    for event_type, *rest in (
        (ET.TASK_DEFINITION_EVENT, TASKS, "task_id", "task_attempt", _task_definition),
        (ET.ACTOR_TASK_DEFINITION_EVENT, TASKS, "task_id", "task_attempt", _task_definition),
        (ET.TASK_LIFECYCLE_EVENT, TASKS, "task_id", "task_attempt", _task_lifecycle),
        (ET.TASK_PROFILE_EVENT, TASKS, "task_id", "attempt_number", _task_profile),
        (ET.ACTOR_DEFINITION_EVENT, ACTORS, "actor_id", None, _actor_definition),
        (ET.ACTOR_LIFECYCLE_EVENT, ACTORS, "actor_id", None, _actor_lifecycle),
        (ET.DRIVER_JOB_DEFINITION_EVENT, JOBS, "job_id", None, _job_definition),
        (ET.DRIVER_JOB_LIFECYCLE_EVENT, JOBS, "job_id", None, _job_lifecycle),
        (ET.NODE_DEFINITION_EVENT, NODES, "node_id", None, _node_definition),
        (ET.NODE_LIFECYCLE_EVENT, NODES, "node_id", None, _node_lifecycle),
        (ET.WORKER_DEFINITION_EVENT, WORKERS, "worker_id", None, _worker_definition),
        (ET.WORKER_LIFECYCLE_EVENT, WORKERS, "worker_id", None, _worker_lifecycle),
        (ET.PLACEMENT_GROUP_DEFINITION_EVENT, PLACEMENT_GROUPS, "placement_group_id", None, _pg_definition),
        (ET.PLACEMENT_GROUP_LIFECYCLE_EVENT, PLACEMENT_GROUPS, "placement_group_id", None, _pg_lifecycle),
    )
}

# Ray 2.49's execution events, routed by the names 2.49 gives them (their type name is unknown to
# our protos; its number, 2, is TASK_LIFECYCLE_EVENT's, so by name only) to the lifecycle fold. The
# compiled folds are not given a fold of theirs: they hand these pieces to Python (fold 0).
_ROUTES[RAY_2_49.event_type] = (
    RAY_2_49.payload,
    *_ROUTES[event_type_name(ET.TASK_LIFECYCLE_EVENT)][1:4],
    _task_execution,
)

FOLDED_KEYS: dict[str, frozenset[str]] = {
    payload: _READS[fold] | {id_key, *([attempt_key] if attempt_key else [])}
    for payload, _, id_key, attempt_key, fold in _ROUTES.values()
}
"""Per payload (by its JSON key) the keys of it the folds read: the detail shows its other fields."""

ID_COLUMN = {
    TASKS: FIELD.task_id,
    ACTORS: "actor_id",
    JOBS: "job_id",
    NODES: "node_id",
    WORKERS: "worker_id",
    PLACEMENT_GROUPS: "placement_group_id",
}


Key = tuple[str, str, int, str]  # resource, entity id, attempt, session


class Prepared(NamedTuple):
    """An event read for the store: its id, and its row's key and piece (None, None for an event
    type that has no state row)."""

    event_id: str
    key: Key | None
    piece: Piece | None


def piece_of(event: dict[str, Any]) -> Piece | None:
    """Where a RayEvent (JSON form) goes, or None for a type that has no state row."""
    event_type = event.get(KEY.event_type)
    if type(event_type) is int:  # a type by number: what the aggregator writes for one our protos lack
        if event_type <= 0:
            raise ValueError(f"{KEY.event_type} {event_type} names no type")
        if event_type not in REGISTRY:
            return None  # a newer Ray's type: kept raw, no row
        event_type = event_type_name(event_type)
    if not isinstance(event_type, str) or not event_type:
        raise ValueError(f"an event without {KEY.event_type}")
    route = _ROUTES.get(event_type)
    if route is None:
        return None
    key, resource, id_key, attempt_key, fold = route
    body = event.get(key)
    if not isinstance(body, dict) or not body.get(id_key):
        raise ValueError(f"{event_type} without {key}.{id_key}")
    attempt = int(body.get(attempt_key, 0) or 0) if attempt_key else 0
    if not INT64[0] <= attempt <= INT64[1]:  # a key the file cannot hold: every fold would fail
        raise ValueError(f"{key}.{attempt_key} {attempt} does not fit in 64 bits")
    return Piece(event_type, resource, hex_id(body[id_key]), attempt, fold, body)


def _prepare_python(event: Any) -> Prepared:
    event_id = event.get(KEY.event_id) if isinstance(event, dict) else None
    if not event_id or not isinstance(event_id, str):
        raise ValueError(f"an event without {KEY.event_id}")
    try:
        piece = piece_of(event)
    except FOLD_ERRORS as exc:
        raise ValueError(f"{_shown(event.get('eventType'))}: {exc}") from None
    if piece is None:
        return Prepared(event_id, None, None)
    session = event.get(KEY.session_name, "")
    if not isinstance(session, str):
        try:
            session = str(session)
        except RecursionError:
            raise ValueError("sessionName: nested too deep to be a session name") from None
    return Prepared(event_id, (piece.resource, piece.entity_id, piece.attempt, session), piece)


def _shown(value: Any) -> str:
    """A posted value in an error message: a string as it is, anything else cut short (a list
    nested a thousand deep would overflow the stack as a whole repr)."""
    return value if isinstance(value, str) else reprlib.repr(value)


def apply(row: Row, piece: Piece) -> None:
    """Fold a piece into its row (created empty by the caller)."""
    row[ID_COLUMN[piece.resource]] = piece.entity_id
    if piece.resource == TASKS:
        row[FIELD.attempt_number] = piece.attempt
    piece.fold(row, piece.body)


# What Ray itself reports before a row's pieces are all in (its schema does not allow None here):
# a task with no lifecycle piece yet is NIL; one whose definition has not arrived is a normal
# Python task until it does.
DEFAULTS: dict[str, dict[str, Any]] = {
    TASKS: {
        FIELD.state: VALUE.nil,
        FIELD.type: VALUE.normal_task,
        FIELD.language: VALUE.python,
        FIELD.name: "",
        FIELD.job_id: "",
        FIELD.func_or_class_name: "",
        FIELD.parent_task_id: "",
    },
    ACTORS: {
        "state": "DEPENDENCIES_UNREADY",
        "class_name": "",
        "job_id": "",
        "num_restarts": 0,
        "num_restarts_due_to_lineage_reconstruction": 0,
        "num_restarts_due_to_node_preemption": 0,
    },
    NODES: {
        "state": "ALIVE",
        "node_ip": "",
        "node_name": "",
        "is_head_node": False,
        "resources_total": {},
        "labels": {},
    },
    WORKERS: {"worker_type": "WORKER", "is_alive": True, "node_id": "", "ip": "", "pid": 0},
    PLACEMENT_GROUPS: {"state": "PENDING", "name": "", "creator_job_id": ""},
    JOBS: {"type": "DRIVER", "status": "PENDING"},
}

# The store keeps these of every row in indexed columns, so filters and sorts run in SQL:
# store column -> the row field it holds, per resource.
INDEXED_COLUMNS = ("state", "job", "name", "func", "node", "worker", "kind", "error", "start_ms", "end_ms")
INDEXED_FIELDS: dict[str, dict[str, str]] = {
    TASKS: {
        "state": FIELD.state,
        "job": FIELD.job_id,
        "name": FIELD.name,
        "func": FIELD.func_or_class_name,
        "node": FIELD.node_id,
        "worker": FIELD.worker_id,
        "kind": FIELD.type,
        "error": FIELD.error_type,
        "start_ms": FIELD.start_time_ms,
        "end_ms": FIELD.end_time_ms,
    },
    ACTORS: {"state": "state", "job": "job_id", "name": "name", "func": "class_name", "node": "node_id"},
    JOBS: {"state": "status", "job": "job_id", "name": "submission_id", "kind": "type"},
    NODES: {"state": "state", "name": "node_name", "func": "node_ip", "node": "node_id"},
    WORKERS: {"node": "node_id", "worker": "worker_id", "kind": "worker_type", "func": "exit_type"},
    PLACEMENT_GROUPS: {"state": "state", "job": "creator_job_id", "name": "name"},
}


def field_value(resource: str, row: Row, name: str) -> Any:
    """A row's field as Ray answers it: its default while the piece that sets it is missing."""
    value = row.get(name)
    return DEFAULTS.get(resource, {}).get(name) if value is None else value


# Per resource, for each of INDEXED_COLUMNS: (the row field it holds or None, that field's default).
_INDEX_PLAN = {
    resource: tuple(
        (fields.get(column), DEFAULTS.get(resource, {}).get(fields.get(column, "")))
        for column in INDEXED_COLUMNS
    )
    for resource, fields in INDEXED_FIELDS.items()
}


def indexed_values(resource: str, row: Row) -> tuple[Any, ...]:
    """The row's INDEXED_COLUMNS values, as `field_value` gives them."""
    get = row.get
    return tuple(
        None if name is None else (default if (value := get(name)) is None else value)
        for name, default in _INDEX_PLAN[resource]
    )


INT64 = (-(1 << 63), (1 << 63) - 1)  # what an SQL integer column holds


def _row_columns_python(resource: str, row: Row) -> tuple[str, tuple[Any, ...]]:
    data = orjson.dumps({k: v for k, v in row.items() if v is not None}).decode()  # raises on big ints
    indexed = indexed_values(resource, row)
    for column, value in zip(INDEXED_COLUMNS, indexed, strict=True):
        kind = type(value)
        if kind is int:
            if not INT64[0] <= value <= INT64[1]:
                raise ValueError(f"{INDEXED_FIELDS[resource][column]} {value} does not fit in 64 bits")
        elif value is not None and kind is not str and kind is not float and kind is not bool:
            raise TypeError(f"{INDEXED_FIELDS[resource][column]} is a {kind.__name__}, not text or a number")
    return data, indexed


prepare: Callable[[Any], Prepared] = _prepare_python
"""Read one RayEvent (JSON form) for the store; ValueError says what is wrong with it."""

row_columns: Callable[[str, Row], tuple[str, tuple[Any, ...]]] = _row_columns_python
"""A folded row's data (JSON) and indexed column values, as the store writes them; TypeError or
ValueError if a piece put there what the file cannot hold (an object where a name belongs, an
integer past 64 bits)."""

try:  # a POST's task rows folded from its text (native/_post_fold.c, built beside the row writer)
    from ray_otel_events.native import _post_fold
except ImportError:
    _post_fold = None  # type: ignore[assignment]
if _post_fold is not None and native.ENABLED:
    _TEXT_FOLDS: dict[Fold, int] = {_task_definition: 1, _task_lifecycle: 2}  # 0: folded in Python
    _post_fold.bind_names(KEY, FIELD, VALUE)
    _post_fold.bind(
        {event_type: (*route[:4], _TEXT_FOLDS.get(route[4], 0)) for event_type, route in _ROUTES.items()},
        _INDEX_PLAN[TASKS],
    )

try:  # the same steps compiled (setup.py builds native/_state_fold.c where a C compiler is present)
    from ray_otel_events.native import _state_fold
except ImportError:
    _state_fold = None  # type: ignore[assignment]
if _state_fold is not None and native.ENABLED:
    _COMPILED_FOLDS: dict[Fold, Fold] = {
        _task_definition: _state_fold.task_definition,
        _task_lifecycle: _state_fold.task_lifecycle,
    }
    for _type, _route in _ROUTES.items():  # the routes name the folds both `prepare`s hand out
        _ROUTES[_type] = (*_route[:4], _COMPILED_FOLDS.get(_route[4], _route[4]))
    _state_fold.bind_names(KEY, FIELD, VALUE)
    _state_fold.bind(
        _prepare_python,
        _task_definition,
        _task_lifecycle,
        _row_columns_python,
        _ROUTES,
        Piece,
        Prepared,
        _INDEX_PLAN,
        orjson.dumps,
    )
    prepare = _state_fold.prepare
    row_columns = _state_fold.row_columns
