"""Tracing startup hooks and the span processors behind them (see docs/tracing.md).

Building blocks for a hook of your own: `install_tracing` (providers + event side + exit flush),
`SpanFileProcessor` / `LogRecordFileProcessor` (JSON lines per process), `TaskEventSpanProcessor`
(task/actor spans -> RayEvents), `load_hook` / `run_hook_once` (hook strings, with clear errors).
"""

from __future__ import annotations

from ray_otel_events.tracing.files import LogRecordFileProcessor, SpanFileProcessor
from ray_otel_events.tracing.hooks import (
    HookAttributeNotFound,
    HookError,
    HookFailed,
    HookImportFailed,
    HookModuleNotFound,
    HookNotCallable,
    HookSpecError,
    load_hook,
    run_hook_once,
)
from ray_otel_events.tracing.install import TracingInstallation, current_installation, install_tracing
from ray_otel_events.tracing.task_events import EventLogEmitter, RecorderSink, TaskEventSpanProcessor

__all__ = [
    "EventLogEmitter",
    "HookAttributeNotFound",
    "HookError",
    "HookFailed",
    "HookImportFailed",
    "HookModuleNotFound",
    "HookNotCallable",
    "HookSpecError",
    "LogRecordFileProcessor",
    "RecorderSink",
    "SpanFileProcessor",
    "TaskEventSpanProcessor",
    "TracingInstallation",
    "current_installation",
    "install_tracing",
    "load_hook",
    "run_hook_once",
]
