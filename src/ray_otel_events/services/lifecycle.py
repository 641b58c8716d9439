"""What every server command does the same way: logging, stopping on SIGTERM/SIGINT, the exit summary.

Stdout is the protocol a supervisor or test reads: the ready line first, the summary last. With
`--log-format text` (the default) the summary is a short table for people; with `--log-format json`
logs are JSON lines on stderr and the summary is one `stats {json}` line, for machines.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any

from ray_otel_events.config import ConfigError
from ray_otel_events.security.client_errors import MAX_LOG_MESSAGE, log_text

LOG_FORMATS = ("text", "json")
SummaryRows = Sequence[tuple[str, int | float | str]]


def add_logging_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-level", default="INFO", help="stderr log level (default INFO)")
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="text",
        help="text: readable logs and an exit table; json: JSON log lines and a 'stats {json}' exit line",
    )


class _TextFormatter(logging.Formatter):
    """One record, one line: its message's control characters escaped (a value quoted from a
    client cannot start a line of its own) and its length bounded. A traceback, ours, follows."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = log_text(record.message, MAX_LOG_MESSAGE)
        return super().formatMessage(record)


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": log_text(record.getMessage(), MAX_LOG_MESSAGE),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure_logging(level_name: str, log_format: str = "text") -> None:
    """Log to stderr at `level_name`; a name logging does not know is a ConfigError."""
    level = level_name.upper()
    if not isinstance(logging.getLevelName(level), int):
        raise ConfigError(f"--log-level {level_name!r}: expected DEBUG, INFO, WARNING, ERROR or CRITICAL")
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(_TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler], force=True)
    # Library chatter below WARNING (aiohttp access, asyncio) is not ours to report.
    for noisy in ("aiohttp", "asyncio", "grpc"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLogger().level))


# Young collections every this many net allocations, not Python's 700: one POST of 1,000 RayEvents
# parses into some 20,000 dicts and lists that live until they are stored, so with the default a
# POST set off dozens of collections and, every few POSTs, a full one over all the server holds.
# Since `serve` answers once spooled, the events waiting for their fold (up to a few POSTs' worth)
# are young when a collection comes, and each collection walks them all, a share of `serve`'s CPU
# worth saving (bench/HISTORY.md); at 1,000,000 a collection comes about once a second under load, and
# cyclic garbage waits at most that long.
GC_YOUNG_THRESHOLD = 1_000_000


def settle_heap() -> None:
    """Once a server whose POSTs parse into Python objects is up (`serve`, the bridge): what it has
    built is kept out of collections (`gc.freeze`) and young collections are rarer, which saves
    `serve` and the bridge CPU on every event (bench/HISTORY.md)."""
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)


def stop_on_signals() -> asyncio.Event:
    """An event SIGTERM or SIGINT sets, so a server flushes and exits 0 instead of dying mid-write."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal(sig: signal.Signals) -> None:
        logging.getLogger("ray_otel_events").info("%s received: stopping intake and flushing", sig.name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    return stop


def print_exit_summary(command: str, rows: SummaryRows, stats: dict[str, Any], log_format: str) -> None:
    """The last stdout line(s): `stats {json}` for machines, else a two-column table."""
    if log_format == "json":
        print("stats " + json.dumps(stats, sort_keys=True), flush=True)
        return
    width = max((len(label) for label, _ in rows), default=0)
    lines = [f"{command} summary"]
    for label, value in rows:
        text = f"{value:,}" if isinstance(value, int) else str(value)
        lines.append(f"  {label.ljust(width)}  {text:>12}")
    print("\n".join(lines), flush=True)
