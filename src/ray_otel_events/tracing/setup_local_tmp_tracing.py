"""Startup hook: spans to `/tmp/spans/<pid>.json` (one JSON line each), events as log records next to them.

    ray start --head --tracing-startup-hook=ray_otel_events.tracing.setup_local_tmp_tracing:setup_tracing

Same line format as Ray's bundled hook (`ReadableSpan.to_json(indent=None)`), but appended rather
than truncated, written off the submitting thread, and flushed when a process ends (including
multiprocessing children, which end with `os._exit`). The folder is `RAY_OTEL_EVENTS_SPANS_DIR`.
Task and actor spans also become RayEvents: when `RAY_OTEL_EVENTS_AGGREGATOR_ADDRESS` is set,
native events sent to that aggregator, and with `RAY_OTEL_EVENTS_EVENT_LOGS=1` OTel log records in
`<pid>.logs.jsonl` (off by default: one costs more than the span it comes from). Task logs (prints
and `logging` in a task, with its trace context) go to that file too. The hook never
raises: a problem is reported once and the process runs on.
"""

from __future__ import annotations

from ray_otel_events.config import TracingConfig
from ray_otel_events.tracing.files import LogRecordFileProcessor, SpanFileProcessor
from ray_otel_events.tracing.install import install_tracing, run_setup_hook

HOOK = "ray_otel_events.tracing.setup_local_tmp_tracing:setup_tracing"


def setup_tracing() -> None:
    run_setup_hook(HOOK, _install)


def _install() -> None:
    config = TracingConfig.from_env()
    install_tracing(
        [SpanFileProcessor(config.spans_dir)],
        [LogRecordFileProcessor(config.spans_dir)],
        config=config,
        event_logs=config.event_logs is True,
    )
