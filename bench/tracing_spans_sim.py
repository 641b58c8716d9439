"""Ray's two spans per task (submit and execute, as Ray's wrappers make them) in one process, for
counting instructions with callgrind: the per-task cost of a hook is the difference between two
runs with different task counts.

    valgrind --tool=callgrind python bench/tracing_spans_sim.py {none|local|otlp} N
    valgrind --tool=callgrind python bench/tracing_spans_sim.py forward SPOOL_FOLDER

`otlp` writes the spool only (its forwarder, a separate process, is not counted: point the
endpoint at a closed port, end the forwarder, and count `forward` over the folder it left).
"""

from __future__ import annotations

import os
import sys


def task(attributes: dict[str, str]) -> None:
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind

    tracer = trace.get_tracer("ray.util.tracing.tracing_helper")
    carrier: dict[str, str] = {}
    with tracer.start_as_current_span(
        "__main__.noop ray.remote", kind=SpanKind.PRODUCER, attributes=attributes
    ):
        propagate.inject(carrier)
    context = propagate.extract(carrier)
    tracer = trace.get_tracer("ray.util.tracing.tracing_helper")
    executing = {**attributes, "ray.task_id": "ef" * 24}
    with tracer.start_as_current_span(
        "__main__.noop ray.remote_worker", context=context, kind=SpanKind.CONSUMER, attributes=executing
    ):
        pass


def main() -> None:
    mode = sys.argv[1]
    if mode == "forward":
        from ray_otel_events.config import SpoolConfig
        from ray_otel_events.metrics import Counters
        from ray_otel_events.tracing.forwarder import Forwarder, senders_from_env

        counters = Counters("spool_forwarder")
        Forwarder(
            sys.argv[2], SpoolConfig.from_env(), senders_from_env(counters), counters=counters
        ).pass_once()
        print(counters.snapshot())
        return
    if mode == "local":
        from ray_otel_events.tracing.setup_local_tmp_tracing import setup_tracing

        setup_tracing()
    elif mode == "otlp":
        from ray_otel_events.tracing.setup_otlp_tracing import setup_tracing

        setup_tracing()
    attributes = {
        "ray.remote": "function",
        "ray.function": "__main__.noop",
        "ray.pid": str(os.getpid()),
        "ray.job_id": "01000000",
        "ray.node_id": "ab" * 28,
        "ray.worker_id": "cd" * 28,
    }
    for _ in range(int(sys.argv[2])):
        task(attributes)
    from ray_otel_events.tracing.install import current_installation

    installation = current_installation()
    if installation is not None:
        installation.flush()


if __name__ == "__main__":
    main()
