"""Ray's tracing wrappers' own call paths, with Ray's helpers as shipped and with our stand-ins
(tracing/ray_wrappers.py), in a live driver and in a live worker of one local cluster.

Submit = Ray's submission wrapper around a no-op in place of `RemoteFunction._remote` (the span, its
attributes, the injected `_ray_trace_ctx`); execute = Ray's execution wrapper of a no-op given a
`_ray_trace_ctx` (extract, attach, the span, its attributes); hydrate = the attributes alone.
Thread CPU µs per call, median of 5 runs of N calls; both variants alternate twice. Spans go to
our local hook's files in a temp folder. Prints one Markdown section.

    python bench/bench_ray_wrappers.py [--calls N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import ray

LOCAL_HOOK = "ray_otel_events.tracing.setup_local_tmp_tracing:setup_tracing"
TRACEPARENT = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}


def _noop() -> None:
    return None


class _Remote:  # what Ray's submission wrapper reads from a RemoteFunction
    _is_cross_language = False
    _function_name = "bench._noop"


def measure(calls: int) -> dict[str, float]:
    from ray.util.tracing import tracing_helper

    from ray_otel_events.tracing import ray_wrappers

    submit = tracing_helper._tracing_task_invocation(lambda self, args, kwargs, *a, **k: None)
    execute = tracing_helper._inject_tracing_into_function(_noop)
    paths: dict[str, Callable[[], Any]] = {
        "submit": lambda: submit(_Remote(), (), {}),
        "execute": lambda: execute(_ray_trace_ctx=TRACEPARENT),
        "hydrate": lambda: tracing_helper._function_hydrate_span_args("bench._noop"),
    }
    samples: dict[str, list[float]] = {}
    for variant in ("ray", "ours", "ray", "ours"):
        ray_wrappers.uninstall() if variant == "ray" else ray_wrappers.install()
        for name, path in paths.items():
            for _ in range(5):
                start = time.thread_time()
                for _ in range(calls):
                    path()
                samples.setdefault(f"{variant} {name}", []).append((time.thread_time() - start) / calls * 1e6)
    return {key: statistics.median(values) for key, values in samples.items()}


@ray.remote
def in_worker(calls: int) -> dict[str, float]:
    return measure(calls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    temp_dir = tempfile.mkdtemp(prefix="rb", dir="/tmp")
    spans_dir = tempfile.mkdtemp(prefix="bench-spans-")
    os.environ.update(
        {"RAY_OTEL_EVENTS_SPANS_DIR": spans_dir, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    )
    try:
        ray.init(
            num_cpus=1,
            include_dashboard=False,
            logging_level="ERROR",
            _temp_dir=temp_dir,
            _tracing_startup_hook=LOCAL_HOOK,
        )
        results = {"driver": measure(args.calls), "worker": ray.get(in_worker.remote(args.calls))}
        ray.shutdown()
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)
        shutil.rmtree(spans_dir, ignore_errors=True)
    print("## Ray's tracing helpers: Ray's own against our stand-ins\n")
    print(f"Command: `python bench/bench_ray_wrappers.py --calls {args.calls}`; thread CPU µs per call\n")
    print("| process | path | Ray's helpers | ours | saved |")
    print("|---|---|---|---|---|")
    for where, figures in results.items():
        for name in ("submit", "execute", "hydrate"):
            shipped, ours = figures[f"ray {name}"], figures[f"ours {name}"]
            print(f"| {where} | {name} | {shipped:.1f} | {ours:.1f} | {shipped - ours:.1f} |")


if __name__ == "__main__":
    main()
