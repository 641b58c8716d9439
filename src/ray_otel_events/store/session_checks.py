"""Which kinds of Ray event a session lacks, judged from its rows: a cluster wired wrong is told.

Each check pairs rows that show a kind of event must exist (evidence, counted only once stored at
least the wiring delay ago, so events still in flight raise no alarm) with that kind being absent
from the whole session. Only a kind that every correctly wired Ray 2.60 cluster sends alongside
its evidence is checked (proved against a live cluster wired by `ray-env` in tests/test_ray_env.py):
a driver job always has its driver's task row, a task its definition and lifecycle, a node's rows
come before any task, an actor its creation task.

Not checked, because a correctly wired Ray 2.60 cluster never sends them (its GCS has no emitter for
placement-group events, and its job manager writes submission-job events to export files only):
placement-group and submission-job events. A Ray 2.52/2.55 cluster sends no worker events; the
worker check says it applies from Ray 2.60.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

Counts = Mapping[str, int]


@dataclass(frozen=True)
class SessionCheck:
    name: str
    needed: Callable[[Counts], bool]  # the session's settled rows show these events must exist
    absent: Callable[[Counts], bool]  # and none arrived in the whole session
    events: tuple[str, ...]  # the event types missing
    why: str


def _n(counts: Counts, key: str) -> int:
    return counts.get(key, 0)


CHECKS: tuple[SessionCheck, ...] = (
    SessionCheck(
        "task_events",
        lambda c: _n(c, "jobs_settled") + _n(c, "actors_settled") > 0,
        lambda c: _n(c, "tasks") == 0,
        ("TASK_DEFINITION_EVENT", "TASK_LIFECYCLE_EVENT"),
        "jobs or actors but no task events: core workers send them only with"
        " RAY_enable_ray_event=1 and RAY_enable_core_worker_ray_event_to_aggregator=1",
    ),
    SessionCheck(
        "task_definitions",
        lambda c: _n(c, "tasks_settled") > 0,
        lambda c: _n(c, "tasks_defined") == 0,
        ("TASK_DEFINITION_EVENT", "ACTOR_TASK_DEFINITION_EVENT"),
        "task lifecycle events but no task definitions (names, types, jobs)",
    ),
    SessionCheck(
        "task_lifecycle",
        lambda c: _n(c, "tasks_settled") > 0,
        lambda c: _n(c, "tasks_stated") == 0,
        ("TASK_LIFECYCLE_EVENT",),
        "task definitions but no task lifecycle events (states, times, errors)",
    ),
    SessionCheck(
        "jobs",
        lambda c: _n(c, "user_tasks_settled") > 0,
        lambda c: _n(c, "jobs") == 0,
        ("DRIVER_JOB_DEFINITION_EVENT", "DRIVER_JOB_LIFECYCLE_EVENT"),
        "tasks but no driver job events",
    ),
    SessionCheck(
        "nodes",
        lambda c: sum(_n(c, f"{r}_settled") for r in ("tasks", "jobs", "actors", "workers")) > 0,
        lambda c: _n(c, "nodes") == 0,
        ("NODE_DEFINITION_EVENT", "NODE_LIFECYCLE_EVENT"),
        "tasks, jobs or workers but no node events",
    ),
    SessionCheck(
        "actors",
        lambda c: _n(c, "actor_creations_settled") > 0,
        lambda c: _n(c, "actors") == 0,
        ("ACTOR_DEFINITION_EVENT", "ACTOR_LIFECYCLE_EVENT"),
        "actor creation tasks but no actor events",
    ),
    SessionCheck(
        "workers",
        lambda c: _n(c, "user_tasks_settled") > 0,
        lambda c: _n(c, "workers") == 0,
        ("WORKER_DEFINITION_EVENT", "WORKER_LIFECYCLE_EVENT"),
        "tasks but no worker events (Ray 2.60 and later send them)",
    ),
)


def missing_events(counts: Counts) -> list[dict[str, Any]]:
    """What the session with these counts (`Store.session_evidence`) lacks: one entry per failed
    check, `{"check", "events", "why"}`; empty when it is wired right, as far as its rows tell."""
    return [
        {"check": c.name, "events": list(c.events), "why": c.why}
        for c in CHECKS
        if c.needed(counts) and c.absent(counts)
    ]
