"""A Ray driver for the tracing tests: tasks, a nested task, an actor, custom spans, a failure.

    python tracing_ray_driver.py connect             # ray.init(): the `ray start` cluster RAY_ADDRESS names
    python tracing_ray_driver.py init HOOK TEMP_DIR  # ray.init(_tracing_startup_hook=HOOK): its own cluster

Prints one JSON line: the driver's pid, job id, results and the ids of the custom spans.
"""

from __future__ import annotations

import json
import os
import sys

import ray
from opentelemetry import trace


def _custom(name: str) -> dict[str, object]:
    with trace.get_tracer("tests").start_as_current_span(name) as span:
        return {"pid": os.getpid(), "span_id": format(span.get_span_context().span_id, "016x")}


@ray.remote
def leaf(x: int) -> dict[str, object]:
    # The execution span's class: ours stay direct with the workers' output captured (the default).
    kind = type(trace.get_current_span()).__name__
    return {"value": x + 1, "execution_span": kind, **_custom("custom-in-task")}


@ray.remote
def mid(x: int) -> dict[str, object]:
    return ray.get(leaf.remote(x))


@ray.remote
def boom() -> None:
    raise ValueError("traced failure")


@ray.remote
class Acc:
    def __init__(self) -> None:
        self.total = 0

    def add(self, x: int) -> dict[str, object]:
        self.total += x
        return {"total": self.total, **_custom("custom-in-actor")}


def main() -> None:
    if sys.argv[1] == "connect":
        ray.init(logging_level="ERROR")
    else:
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            logging_level="ERROR",
            _tracing_startup_hook=sys.argv[2],
            _temp_dir=sys.argv[3],
        )
    summary: dict[str, object] = {"pid": os.getpid(), "job_id": ray.get_runtime_context().get_job_id()}
    with trace.get_tracer("tests").start_as_current_span("driver-root") as root:
        summary["root"] = format(root.get_span_context().span_id, "016x")
        summary["leaf"] = ray.get(leaf.remote(1))
        summary["mid"] = ray.get(mid.remote(10))
        acc = Acc.remote()
        summary["acc"] = ray.get(acc.add.remote(5))
        try:
            ray.get(boom.remote())
        except Exception as exc:  # RayTaskError(ValueError)
            summary["boom"] = type(exc).__name__
    ray.shutdown()
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
