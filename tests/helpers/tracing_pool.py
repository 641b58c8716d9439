"""Runs a workload through TracedProcessPoolExecutor in its own process; prints a JSON summary.

    python tracing_pool.py '{"hook": "...", "tasks": 6, "max_workers": 2, ...}'

Keys: hook (startup hook string or null), tasks (square tasks), fail (a failing task), custom (a
task with user spans), max_tasks_per_child, start_method, map_chunks (square via map(chunksize=2)),
chatty (tasks that print and log, each saying how its worker was started).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import traceback

import tracing_workload as w

from ray_otel_events.executor import TracedProcessPoolExecutor
from ray_otel_events.tracing.install import current_installation


def main() -> None:
    spec = json.loads(sys.argv[1])
    context = multiprocessing.get_context(spec["start_method"]) if spec.get("start_method") else None
    summary: dict[str, object] = {"pid": os.getpid(), "default_method": multiprocessing.get_start_method()}
    w.SUBMITTER_PID = os.getpid()
    with TracedProcessPoolExecutor(
        spec.get("max_workers", 2),
        context,
        max_tasks_per_child=spec.get("max_tasks_per_child"),
        tracing_startup_hook=spec.get("hook"),
    ) as pool:
        futures = [pool.submit(w.square, i) for i in range(spec.get("tasks", 0))]
        summary["squares"] = [f.result() for f in futures]
        if spec.get("chatty"):
            chatty = [pool.submit(w.chatty, n) for n in range(spec["chatty"])]
            summary["chatty"] = [f.result() for f in chatty]
        if spec.get("map_chunks"):
            summary["mapped"] = list(pool.map(w.square, range(spec["map_chunks"]), chunksize=2))
        if spec.get("fail"):
            try:
                pool.submit(w.fail, 7).result()
            except w.TaskFailure as exc:
                summary["failure"] = {
                    "type": type(exc).__name__,
                    "args": list(exc.args),
                    "code": exc.code,
                    "cause": "".join(traceback.format_exception(exc.__cause__)) if exc.__cause__ else "",
                }
        if spec.get("custom"):
            summary["custom"] = pool.submit(w.with_custom_spans, 1).result()
        summary["worker_pids"] = sorted({f.result() for f in [pool.submit(w.pid_of) for _ in range(4)]})
    installation = current_installation()
    if installation is not None:
        summary["provider"] = type(installation.tracer_provider).__name__
        deferred = installation.deferred_spans
        summary["deferred_spans"] = None if deferred is None else deferred.created + deferred.queue.pending()
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
