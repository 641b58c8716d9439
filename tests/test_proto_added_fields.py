"""After `make proto` adds a field to an event's payload, `serve`'s detail shows it with no other edit
(issue 44, item 3), for every kind the store keeps a detail for, on both backends.

One setup for the module: our protos copied, a field added to every payload a fold reads, the code
regenerated as `make proto` does (scripts/gen_proto.py) into a copy of the package, and a `serve`
of that copy per backend. Each is sent one entity of each kind whose events carry the added fields;
the detail (`/api/ui/get`, `ray-otel-events get`, and the task page) shows them by snake_case name,
beside the fields the folds read. What a fold reads is its own table (store/state_merge.py), not
the schema: a field the schema names and no fold reads shows.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests
from helpers.agg_procs import CliServer, clean_env, cli_in_process, close_all, wait_until
from helpers.postgres import PostgresServer, serve_store_args

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "ray_otel_events"
SESSION = "session_2026-12-02_07-00-00_000000_1"
TIME = "2026-12-02T07:00:01.000000001Z"
LATER = "2026-12-02T07:00:02.000000001Z"

# The payloads the folds read, each with a field `make proto` adds: `<payload in snake_case>_added`.
PAYLOADS = (
    "TaskDefinitionEvent",
    "ActorTaskDefinitionEvent",
    "TaskLifecycleEvent",
    "TaskProfileEvents",
    "ActorDefinitionEvent",
    "ActorLifecycleEvent",
    "DriverJobDefinitionEvent",
    "DriverJobLifecycleEvent",
    "NodeDefinitionEvent",
    "NodeLifecycleEvent",
    "WorkerDefinitionEvent",
    "WorkerLifecycleEvent",
    "PlacementGroupDefinitionEvent",
    "PlacementGroupLifecycleEvent",
)


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _added(message: str) -> str:
    return f"{_snake(message)}_added"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


TASK, ACTOR_TASK = bytes(range(1, 25)), bytes(range(2, 26))
ACTOR, JOB = bytes(range(3, 19)), bytes([9, 0, 0, 0])
NODE, WORKER, GROUP = bytes(range(4, 32)), bytes(range(5, 33)), bytes(range(6, 24))


def _event(
    number: int, event_type: str, payload_key: str, message: str, body: dict[str, Any]
) -> dict[str, Any]:
    return {
        "eventId": _b64(number.to_bytes(4, "big")),
        "sourceType": "GCS",
        "eventType": event_type,
        "timestamp": TIME,
        "severity": "INFO",
        "sessionName": SESSION,
        "sourceHostname": "worker-3",
        "sourcePid": 4242,
        payload_key: {**body, _camel(_added(message)): f"{message} from a later Ray"},
    }


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(part.title() for part in rest)


def _transition(state: str, **more: Any) -> dict[str, Any]:
    return {"state": state, "timestamp": LATER, **more}


EVENTS = [
    _event(
        1,
        "TASK_DEFINITION_EVENT",
        "taskDefinitionEvent",
        "TaskDefinitionEvent",
        {"taskId": _b64(TASK), "taskAttempt": 0, "taskName": "train", "jobId": _b64(JOB)},
    ),
    _event(
        2,
        "TASK_LIFECYCLE_EVENT",
        "taskLifecycleEvent",
        "TaskLifecycleEvent",
        {"taskId": _b64(TASK), "taskAttempt": 0, "stateTransitions": [_transition("FINISHED")]},
    ),
    _event(
        3,
        "TASK_PROFILE_EVENT",
        "taskProfileEvents",
        "TaskProfileEvents",
        {
            "taskId": _b64(TASK),
            "attemptNumber": 0,
            "profileEvents": {"componentType": "worker", "events": []},
        },
    ),
    _event(
        4,
        "ACTOR_TASK_DEFINITION_EVENT",
        "actorTaskDefinitionEvent",
        "ActorTaskDefinitionEvent",
        {
            "taskId": _b64(ACTOR_TASK),
            "taskAttempt": 0,
            "actorTaskName": "Counter.add",
            "actorId": _b64(ACTOR),
        },
    ),
    _event(
        5,
        "ACTOR_DEFINITION_EVENT",
        "actorDefinitionEvent",
        "ActorDefinitionEvent",
        {"actorId": _b64(ACTOR), "className": "Counter", "jobId": _b64(JOB)},
    ),
    _event(
        6,
        "ACTOR_LIFECYCLE_EVENT",
        "actorLifecycleEvent",
        "ActorLifecycleEvent",
        {"actorId": _b64(ACTOR), "stateTransitions": [_transition("ALIVE", pid=77)]},
    ),
    _event(
        7,
        "DRIVER_JOB_DEFINITION_EVENT",
        "driverJobDefinitionEvent",
        "DriverJobDefinitionEvent",
        {"jobId": _b64(JOB), "entrypoint": "python train.py", "driverPid": "88"},
    ),
    _event(
        8,
        "DRIVER_JOB_LIFECYCLE_EVENT",
        "driverJobLifecycleEvent",
        "DriverJobLifecycleEvent",
        {"jobId": _b64(JOB), "stateTransitions": [_transition("CREATED")]},
    ),
    _event(
        9,
        "NODE_DEFINITION_EVENT",
        "nodeDefinitionEvent",
        "NodeDefinitionEvent",
        {"nodeId": _b64(NODE), "nodeIpAddress": "192.0.2.7", "hostname": "head-1"},
    ),
    _event(
        10,
        "NODE_LIFECYCLE_EVENT",
        "nodeLifecycleEvent",
        "NodeLifecycleEvent",
        {"nodeId": _b64(NODE), "stateTransitions": [_transition("ALIVE", resources={"CPU": 2.0})]},
    ),
    _event(
        11,
        "WORKER_DEFINITION_EVENT",
        "workerDefinitionEvent",
        "WorkerDefinitionEvent",
        {"workerId": _b64(WORKER), "nodeId": _b64(NODE), "pid": 99},
    ),
    _event(
        12,
        "WORKER_LIFECYCLE_EVENT",
        "workerLifecycleEvent",
        "WorkerLifecycleEvent",
        {
            "workerId": _b64(WORKER),
            "stateTransitions": [
                _transition("DEAD", deathInfo={"exitType": "USER_ERROR", "exitDetail": "init raised"})
            ],
        },
    ),
    _event(
        13,
        "PLACEMENT_GROUP_DEFINITION_EVENT",
        "placementGroupDefinitionEvent",
        "PlacementGroupDefinitionEvent",
        {"placementGroupId": _b64(GROUP), "name": "pg", "strategy": "PACK"},
    ),
    _event(
        14,
        "PLACEMENT_GROUP_LIFECYCLE_EVENT",
        "placementGroupLifecycleEvent",
        "PlacementGroupLifecycleEvent",
        {"placementGroupId": _b64(GROUP), "stateTransitions": [_transition("CREATED")]},
    ),
]

# Per kind: the entity, the fields its folds read (as folded), and the payloads whose added field
# its detail shows.
KINDS: dict[str, tuple[bytes, dict[str, Any], tuple[str, ...]]] = {
    "tasks": (
        TASK,
        {"name": "train", "state": "FINISHED", "job_id": JOB.hex()},
        ("TaskDefinitionEvent", "TaskLifecycleEvent", "TaskProfileEvents"),
    ),
    "actor task": (ACTOR_TASK, {"name": "Counter.add", "type": "ACTOR_TASK"}, ("ActorTaskDefinitionEvent",)),
    "actors": (
        ACTOR,
        {"class_name": "Counter", "state": "ALIVE", "pid": 77},
        ("ActorDefinitionEvent", "ActorLifecycleEvent"),
    ),
    "jobs": (
        JOB,
        {"entrypoint": "python train.py", "status": "RUNNING"},
        ("DriverJobDefinitionEvent", "DriverJobLifecycleEvent"),
    ),
    "nodes": (
        NODE,
        {"node_ip": "192.0.2.7", "resources_total": {"CPU": 2.0}},
        ("NodeDefinitionEvent", "NodeLifecycleEvent"),
    ),
    "workers": (
        WORKER,
        {"pid": 99, "is_alive": False, "exit_type": "USER_ERROR", "exit_detail": "init raised"},
        ("WorkerDefinitionEvent", "WorkerLifecycleEvent"),
    ),
    "placement_groups": (
        GROUP,
        {"name": "pg", "topology_strategy": "PACK", "state": "CREATED"},
        ("PlacementGroupDefinitionEvent", "PlacementGroupLifecycleEvent"),
    ),
}


# Ray's main branch after 2.60 adds these to the base event (our protos are 2.60's).
BASE_ADDED = {"RayEvent": "string source_hostname = 29;\n  int32 source_pid = 30;"}


def _with_added_fields(proto_root: Path) -> None:
    """Each payload message of PAYLOADS gets `string <payload>_added = 1000;` (what a later Ray's
    proto might add) and the base event BASE_ADDED's, in a copy of proto/."""
    added = {**{message: f"string {_added(message)} = 1000;" for message in PAYLOADS}, **BASE_ADDED}
    for path in (proto_root / "ray_otel_events" / "protobuf").glob("*.proto"):
        text = path.read_text()
        for message, fields in added.items():
            found = re.search(rf"^message {message} \{{.*?^\}}", text, re.S | re.M)
            if found:
                body = found.group(0)
                text = text.replace(body, f"{body[:-1]}  {fields}\n}}")
        path.write_text(text)


def _regenerated_package(tmp: Path) -> Path:
    """A copy of the package with its protobuf modules regenerated from protos with the added
    fields: `make proto`'s generator, run over the changed copy. Returns the folder to put first on
    PYTHONPATH."""
    protos = tmp / "proto"
    shutil.copytree(ROOT / "proto", protos)
    _with_added_fields(protos)
    site = tmp / "site"
    shutil.copytree(PACKAGE, site / "ray_otel_events")  # compiled helpers and valid .pyc files too
    spec = importlib.util.spec_from_file_location("gen_proto_copy", ROOT / "scripts" / "gen_proto.py")
    assert spec is not None and spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    generator.generate(site / "ray_otel_events" / "protobuf", protos)
    return site


@pytest.fixture(scope="module")
def serves(
    tmp_path_factory: pytest.TempPathFactory, postgres_server: PostgresServer
) -> Iterator[dict[str, str]]:
    """backend -> base URL of a `serve` of the regenerated package holding EVENTS."""
    tmp = tmp_path_factory.mktemp("proto_added")
    env = {"PYTHONPATH": str(_regenerated_package(tmp))}
    # The servers run the regenerated code: its messages name the added fields.
    check = (
        "import json, ray_otel_events\n"
        "from ray_otel_events.protobuf import events_base_event_pb2 as b\n"
        "names = {f.message_type.name: [x.name for x in f.message_type.fields]"
        " for f in b.RayEvent.DESCRIPTOR.fields if f.message_type is not None}\n"
        "names['RayEvent'] = [f.name for f in b.RayEvent.DESCRIPTOR.fields]\n"
        "print(json.dumps([ray_otel_events.__file__, names]))"
    )
    ran = subprocess.run(
        [sys.executable, "-c", check],
        env=clean_env(env),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    where, names = json.loads(ran.stdout)
    assert where.startswith(env["PYTHONPATH"])
    assert all(_added(message) in names[message] for message in PAYLOADS), names
    assert {"source_hostname", "source_pid"} <= set(names["RayEvent"])
    locations = {"sqlite": tmp / "events.sqlite3", "postgresql": postgres_server.new_database("proto_added")}
    with ThreadPoolExecutor(len(locations)) as pool:  # both start at once: a start is most of the setup
        starting = {
            backend: pool.submit(CliServer, "serve", *serve_store_args(location, tmp / backend), env=env)
            for backend, location in locations.items()
        }
    started = [future.result() for future in starting.values() if future.exception() is None]
    try:
        bases = {backend: f"http://{future.result().address}" for backend, future in starting.items()}
        for base in bases.values():
            answer = requests.post(f"{base}/v1/ray-events", json=EVENTS, timeout=30)
            assert answer.json() == {"accepted": len(EVENTS), "rejected": 0, "errors": []}, answer.text
        yield bases
    finally:
        close_all(started)


def _detail(base: str, resource: str, entity: bytes) -> dict[str, Any] | None:
    answer = requests.get(
        f"{base}/api/ui/get/{resource}/{entity.hex()}", params={"session": SESSION}, timeout=30
    )
    if answer.status_code == 404:
        return None
    assert answer.status_code == 200, answer.text
    (row,) = answer.json()["rows"]
    return dict(row)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_a_field_make_proto_adds_shows_in_the_detail(serves: dict[str, str], backend: str, kind: str) -> None:
    entity, folded, payloads = KINDS[kind]
    resource = "tasks" if kind == "actor task" else kind
    added = {_added(message): f"{message} from a later Ray" for message in payloads}
    added.update(source_hostname="worker-3", source_pid=4242)
    base = serves[backend]
    wait_until(lambda: _detail(base, resource, entity) is not None, f"the {kind} row")
    shown = _detail(base, resource, entity)
    assert shown is not None
    assert {k: shown.get(k) for k in folded} == folded  # the folds read what they read
    assert {k: shown.get(k) for k in added} == added
    got = cli_in_process("get", resource, entity.hex(), "--address", base, "--session", SESSION)
    assert got.returncode == 0, got.stderr
    by_cli = json.loads(got.stdout)  # one row: the row itself
    assert {k: by_cli.get(k) for k in added} == added
    if resource == "tasks":  # the task page lists them apart
        page = requests.get(
            f"{base}/api/ui/tasks/{entity.hex()}", params={"session": SESSION}, timeout=30
        ).json()
        assert set(added) <= set(page["attempts"][0]["unread_fields"])
