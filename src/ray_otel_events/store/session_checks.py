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

import threading
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


def _settled(*rows: str) -> Callable[[Counts], bool]:
    """Evidence: any of these kinds of row stored at least the wiring delay ago."""
    return lambda c: sum(c.get(f"{r}_settled", 0) for r in rows) > 0


def _none(key: str) -> Callable[[Counts], bool]:
    """Absence: no row of this count in the whole session."""
    return lambda c: c.get(key, 0) == 0


CHECKS: tuple[SessionCheck, ...] = (
    SessionCheck(
        "task_events",
        _settled("jobs", "actors"),
        _none("tasks"),
        ("TASK_DEFINITION_EVENT", "TASK_LIFECYCLE_EVENT"),
        "jobs or actors but no task events: core workers send them only with"
        " RAY_enable_ray_event=1 and RAY_enable_core_worker_ray_event_to_aggregator=1",
    ),
    SessionCheck(
        "task_definitions",
        _settled("tasks"),
        _none("tasks_defined"),
        ("TASK_DEFINITION_EVENT", "ACTOR_TASK_DEFINITION_EVENT"),
        "task lifecycle events but no task definitions (names, types, jobs)",
    ),
    SessionCheck(
        "task_lifecycle",
        _settled("tasks"),
        _none("tasks_stated"),
        ("TASK_LIFECYCLE_EVENT",),
        "task definitions but no task lifecycle events (states, times, errors)",
    ),
    SessionCheck(
        "jobs",
        _settled("user_tasks"),
        _none("jobs"),
        ("DRIVER_JOB_DEFINITION_EVENT", "DRIVER_JOB_LIFECYCLE_EVENT"),
        "tasks but no driver job events",
    ),
    SessionCheck(
        "nodes",
        _settled("tasks", "jobs", "actors", "workers"),
        _none("nodes"),
        ("NODE_DEFINITION_EVENT", "NODE_LIFECYCLE_EVENT"),
        "tasks, jobs or workers but no node events",
    ),
    SessionCheck(
        "actors",
        _settled("actor_creations"),
        _none("actors"),
        ("ACTOR_DEFINITION_EVENT", "ACTOR_LIFECYCLE_EVENT"),
        "actor creation tasks but no actor events",
    ),
    SessionCheck(
        "workers",
        _settled("user_tasks"),
        _none("workers"),
        ("WORKER_DEFINITION_EVENT", "WORKER_LIFECYCLE_EVENT"),
        "tasks but no worker events (Ray 2.60 and later send them)",
    ),
)


class SessionJudge:
    """Judges sessions by their counts (`Store.session_evidence`), remembering evidence once it
    settled: a row written again (a job ending, an actor dying as its cluster stops) is unsettled
    for the wiring delay, and a session told it lacks a kind must not read as whole meanwhile.
    Only the sessions of the last judgement are remembered (the store's retention bounds them)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the wiring watch's thread and the page's requests judge
        self._evidenced: set[tuple[str, str]] = set()  # (session, check) whose evidence settled

    def missing(self, counts_by_session: Mapping[str, Counts]) -> dict[str, list[dict[str, Any]]]:
        """What each session lacks: one entry per failed check, `{"check", "events", "why"}`;
        empty when it is wired right, as far as its rows tell."""
        with self._lock:
            evidenced = {
                (session, check.name)
                for session, counts in counts_by_session.items()
                for check in CHECKS
                if check.needed(counts) or (session, check.name) in self._evidenced
            }
            self._evidenced = evidenced
        return {
            session: [
                {"check": check.name, "events": list(check.events), "why": check.why}
                for check in CHECKS
                if (session, check.name) in evidenced and check.absent(counts)
            ]
            for session, counts in counts_by_session.items()
        }
