"""What every server command does the same way: stderr logging and stopping on SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from ray_otel_events.config import ConfigError


def configure_logging(level_name: str) -> None:
    """Log to stderr at `level_name`; a name logging does not know is a ConfigError."""
    level = level_name.upper()
    if not isinstance(logging.getLevelName(level), int):
        raise ConfigError(f"--log-level {level_name!r}: expected DEBUG, INFO, WARNING, ERROR or CRITICAL")
    logging.basicConfig(
        level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


def stop_on_signals() -> asyncio.Event:
    """An event SIGTERM or SIGINT sets, so a server flushes and exits 0 instead of dying mid-write."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop
