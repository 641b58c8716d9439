"""A producer process that records events through RayEventRecorder (the real producer path).

Usage: record_events.py HOST:PORT --tasks N [--max-queued Q] [--interval-ms MS] [--flush-timeout-ms T]
                        [--until-delivered]

Records, per task, a definition and three lifecycle updates (merged by the recorder into one
lifecycle event), then stops the recorder (flush) and prints its stats as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys

from ray_otel_events.config import RecorderConfig
from ray_otel_events.events import ids
from ray_otel_events.events.builders import EventFactory, TaskStatus, python_function
from ray_otel_events.producer import RayEventRecorder


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("address")
    parser.add_argument("--tasks", type=int, required=True)
    parser.add_argument("--max-queued", type=int, default=10_000)
    parser.add_argument("--interval-ms", type=int, default=100)
    parser.add_argument("--flush-timeout-ms", type=int, default=20_000)
    parser.add_argument(
        "--start-first", action="store_true", help="start the periodic export before recording"
    )
    args = parser.parse_args()
    config = RecorderConfig(
        max_queued_events=args.max_queued,
        report_interval_ms=args.interval_ms,
        shutdown_flush_timeout_ms=args.flush_timeout_ms,
        rpc_timeout_s=1.0,
    )
    recorder = RayEventRecorder.to_aggregator(args.address, config=config)
    if args.start_first:
        recorder.start()
    factory = EventFactory("session_e2e")
    job = ids.job_id(3)
    for _ in range(args.tasks):
        task = ids.new_task_id(job)
        recorder.add(
            factory.task_definition(task_id=task, job_id=job, name="t", function=python_function("m", "t"))
        )
        for state in (TaskStatus.PENDING_ARGS_AVAIL, TaskStatus.RUNNING, TaskStatus.FINISHED):
            recorder.add(factory.task_lifecycle(task_id=task, job_id=job, state=state))
    recorder.stop()
    print(json.dumps(recorder.stats()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
