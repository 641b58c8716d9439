"""Ray Serve's spans into the startup hook's pipeline: `ray_otel_events.tracing.serve:span_processors`.

Serve (2.60) turns tracing on in its proxy and in each replica by calling the exporter import path
(a function of no arguments returning span processors), then setting a TracerProvider of its own,
sampled by `ParentBasedTraceIdRatio(sampling_ratio)`, and adding those processors to the global
provider. In a process our startup hook has set up, the global provider is already ours and the
API keeps the first one set, so Serve's spans reach our provider and its processors (span files,
OTLP, task events) like every other span. So this returns no processor (any would see every span
a second time) and gives our provider the sampler Serve's own would have had.

Serve's proxy in 2.60 is never given the `tracing_config` of `serve.start` / `serve deploy`: it
reads `RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH` and `RAY_SERVE_TRACING_SAMPLING_RATIO` from its
environment only. Set them where the cluster starts (docs/tracing.md).
"""

from __future__ import annotations

import logging
import os
import sys
from types import FrameType

from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.sampling import ParentBasedTraceIdRatio

from ray_otel_events.config import SERVE_TRACING_EXPORTER, serve_tracing_exporter
from ray_otel_events.tracing.install import current_installation
from ray_otel_events.tracing.provider import replace_sampler

logger = logging.getLogger("ray_otel_events.tracing")

EXPORTER_IMPORT_PATH = "ray_otel_events.tracing.serve:span_processors"
# Serve's function that calls the exporter, and its local holding the sampling ratio.
_SERVE_SETUP = ("ray.serve._private.tracing_utils", "setup_tracing")
_RATIO_LOCAL = "tracing_sampling_ratio"
_OVERRIDE_WARNING = "Overriding of current TracerProvider is not allowed"


def serve_sampling_ratio() -> float | None:
    """The ratio Serve's `setup_tracing`, up the stack, is about to use: Serve calls the exporter
    with no arguments, so its frame is the one place to read it from. None when not called by it."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if (frame.f_globals.get("__name__"), frame.f_code.co_name) == _SERVE_SETUP:
            ratio = frame.f_locals.get(_RATIO_LOCAL)
            return float(ratio) if isinstance(ratio, int | float) else None
        frame = frame.f_back
    return None


class _ExpectedOverride(logging.Filter):
    """Drops the API's warning about Serve's provider being refused, once: that refusal is what
    routes Serve's spans to ours, and the line would look like a fault in every Serve process."""

    def __init__(self, logger_: logging.Logger) -> None:
        super().__init__()
        self._logger = logger_

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage() != _OVERRIDE_WARNING:
            return True
        self._logger.removeFilter(self)
        return False


def _expect_override() -> None:
    api_logger = logging.getLogger(trace.__name__)
    if not any(isinstance(f, _ExpectedOverride) for f in api_logger.filters):
        api_logger.addFilter(_ExpectedOverride(api_logger))


def span_processors() -> list[SpanProcessor]:
    """Serve's exporter: routes its spans to the hook's provider, sampled at Serve's ratio."""
    provider = trace.get_tracer_provider()
    if current_installation() is None or not isinstance(provider, TracerProvider):
        logger.warning(
            "%s: no tracing startup hook of ours ran in this process (pid %d), so Serve's spans go "
            "nowhere; start Ray with --tracing-startup-hook=%s (or the OTLP hook)",
            EXPORTER_IMPORT_PATH,
            os.getpid(),
            "ray_otel_events.tracing.setup_local_tmp_tracing:setup_tracing",
        )
        return []
    if serve_tracing_exporter() != EXPORTER_IMPORT_PATH:
        logger.warning(
            "%s: %s is not set to it in this process's environment, so presumably not in the "
            "proxy's either; Ray 2.60's proxy reads only that variable (and "
            "RAY_SERVE_TRACING_SAMPLING_RATIO), not the tracing_config, and without it requests "
            "have no proxy span and ignore the caller's traceparent. Set both where the cluster starts.",
            EXPORTER_IMPORT_PATH,
            SERVE_TRACING_EXPORTER,
        )
    ratio = serve_sampling_ratio()
    if ratio is None:
        logger.warning("%s: not called by Serve's setup_tracing; sampler unchanged", EXPORTER_IMPORT_PATH)
    else:
        replace_sampler(provider, ParentBasedTraceIdRatio(ratio))
    _expect_override()
    return []
