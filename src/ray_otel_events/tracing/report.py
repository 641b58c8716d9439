"""Reporting a tracing setup problem once per process instead of raising it into the host process."""

from __future__ import annotations

import logging
import os

logger = logging.getLogger("ray_otel_events.tracing")

_reported: set[tuple[int, str]] = set()


def report_setup_failure(hook: str, exc: BaseException) -> None:
    """Log (stderr when logging is unconfigured) that `hook` could not set up tracing, once per pid."""
    key = (os.getpid(), hook)
    if key in _reported:
        return
    _reported.add(key)
    logger.error(
        "tracing startup hook %r: %s: %s (pid %d); this process runs without it",
        hook,
        type(exc).__name__,
        exc,
        os.getpid(),
    )
