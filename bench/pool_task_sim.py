"""A traced pool task's whole path in one process, for counting instructions with callgrind: the
submit side (span, travelling context, the deferred span made), the call item pickled and read back,
the worker side (execution span, events, task output capture, its span line written) and the result
item pickled and read back. The pool's own queues, threads and pipes are not in it. The per-task
cost of a hook is the difference between two runs with different task counts:

    PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=N.out \\
        python bench/pool_task_sim.py {none|local|otlp} N [submit]

`submit` stops after the submit side (the deferred spans are still made, at the flush). `otlp` writes
the spool only: point OTEL_EXPORTER_OTLP_ENDPOINT at a closed port.
"""

from __future__ import annotations

import multiprocessing
import pickle
import sys
from concurrent.futures.process import _CallItem, _ResultItem
from typing import Any

from opentelemetry import trace

from ray_otel_events import executor
from ray_otel_events.otel import semconv
from ray_otel_events.tracing.hooks import run_hook_once
from ray_otel_events.tracing.install import current_installation

HOOKS = {
    "none": None,
    "local": "ray_otel_events.tracing.setup_local_tmp_tracing:setup_tracing",
    "otlp": "ray_otel_events.tracing.setup_otlp_tracing:setup_tracing",
}


def noop() -> None:
    return None


class _CallItems:
    """Stands in for ProcessPoolExecutor: `submit` returns the call item the pool would queue."""

    def submit(self, fn: Any, *args: Any) -> _CallItem:
        return _CallItem(0, fn, args, {})


def main() -> None:
    mode, n = sys.argv[1], int(sys.argv[2])
    submit_only = len(sys.argv) > 3 and sys.argv[3] == "submit"
    hook = HOOKS[mode]
    if hook is not None:
        run_hook_once(hook, raise_errors=True)
    pool = executor.TracedProcessPoolExecutor.__new__(executor.TracedProcessPoolExecutor)
    installation = current_installation()
    pool._tracer = trace.get_tracer(semconv.INSTRUMENTATION_SCOPE)
    pool._deferred_spans = installation.deferred_spans if installation is not None else None
    pool._pool = _CallItems()  # type: ignore[assignment]
    executor._init_worker(hook, None, (), multiprocessing.SimpleQueue())

    def task() -> None:
        item: Any = pool._submit_named("__main__.noop", noop, (), {})
        if submit_only:
            return
        call = pickle.loads(pickle.dumps(item))
        result = call.fn(*call.args, **call.kwargs)
        pickle.loads(pickle.dumps(_ResultItem(call.work_id, result=result)))

    for _ in range(200):  # warm-up: caches, files opened
        task()
    if installation is not None:
        installation.flush()
    for _ in range(n):
        task()
    if installation is not None:
        installation.flush()


if __name__ == "__main__":
    main()
