"""`ray-otel-events collect --to URL`: ship a Ray node's export events and log files to `serve`.

    eval "$(ray-otel-events ray-env http://SERVE:8265)"
    ray start --head
    ray-otel-events collect --to http://SERVE:8265 &

One per node, beside `ray start` (docs/collector.md). It follows the session `session_latest` names
under Ray's temp folder (and the next one when Ray starts again), and prints
`collecting session=NAME to=URL` when it starts following one. It is not a server: it listens on
nothing. SIGINT/SIGTERM stop it after a last pass that ships what was written (the partial last
lines of log files included), its offsets saved; it then logs its counters, kept in the state
folder's stats.json too.

Several destinations (`--to` again, `--to-export-events` for one taking Export API events only, as
the bridge) each have their own reader, offsets, counters and backoff in a thread of their own:
Ray's files are the buffer, so a destination that is down or slow holds back and loses nothing of
another's.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from ray_otel_events import config
from ray_otel_events.collector.follow import Bounds, Follower
from ray_otel_events.collector.offsets import Offsets, OffsetsError
from ray_otel_events.collector.shipper import Shipper
from ray_otel_events.config import ConfigError
from ray_otel_events.events.ray_releases import events_url
from ray_otel_events.services.lifecycle import add_logging_arguments, configure_logging, print_exit_summary

logger = logging.getLogger(__name__)


def default_state_dir(temp_dir: Path) -> Path:
    """One folder per Ray temp folder (nodes of one machine each have their own), under the data
    folder: `.../ray-otel-events/collector/tmp_ray` for /tmp/ray."""
    name = "".join(c if c.isalnum() or c in "-." else "_" for c in str(temp_dir.resolve()).strip("/"))
    return Path(config.data_home()) / "ray-otel-events" / "collector" / (name or "root")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = "Prints 'collecting session=NAME to=URL' when it starts following a session."
    parser.add_argument(
        "--to",
        action="append",
        default=[],
        metavar="URL",
        help="serve's address, http://HOST:PORT: export events and log files (again for another)",
    )
    parser.add_argument(
        "--to-export-events",
        action="append",
        default=[],
        metavar="URL",
        help="a destination taking Export API events only (the bridge's address); again for another",
    )
    parser.add_argument(
        "--ray-temp-dir",
        type=Path,
        default=Path("/tmp/ray"),
        help="Ray's temp folder, where session_latest is (`ray start --temp-dir`; default /tmp/ray)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="where offsets and counters are kept, one collector a folder (default: one per"
        f" --ray-temp-dir under {default_state_dir(Path('/')).parent}); with several destinations,"
        " a sub-folder each",
    )
    parser.add_argument("--poll-interval", type=float, default=1.0, help="seconds between passes (1)")
    parser.add_argument(
        "--max-line-kb", type=int, default=1024, help="an export event line over this is skipped (1024)"
    )
    parser.add_argument(
        "--max-file-mb",
        type=float,
        default=256.0,
        help="a log file first seen longer than this: only its last MB are collected (256)",
    )
    add_logging_arguments(parser)


@dataclass(frozen=True)
class Destination:
    url: str  # without the path
    logs: bool  # log files too (serve), or export events only (the bridge)


def destinations(to: list[str], export_only: list[str]) -> list[Destination]:
    found: list[Destination] = []
    for flag, urls, logs in (("--to", to, True), ("--to-export-events", export_only, False)):
        for given in urls:
            try:
                url = events_url(given).removesuffix("/v1/ray-events")
            except ValueError as exc:
                raise ConfigError(f"{flag}: {exc}") from None
            if any(d.url == url for d in found):
                raise ConfigError(f"{flag}: {url} is given twice")
            found.append(Destination(url, logs))
    if not found:
        raise ConfigError("give at least one --to URL (serve's address)")
    return found


def state_folder(root: Path, destination: Destination) -> Path:
    """A destination's own offsets and counters, when there are several: `to-127.0.0.1_8265`."""
    name = destination.url.split("://", 1)[-1]
    return root / ("to-" + "".join(c if c.isalnum() or c in "-." else "_" for c in name))


def run(args: argparse.Namespace) -> int:
    targets = destinations(args.to, args.to_export_events)
    if args.poll_interval <= 0 or args.max_line_kb <= 0 or args.max_file_mb <= 0:
        raise ConfigError("--poll-interval, --max-line-kb and --max-file-mb must be positive")
    configure_logging(args.log_level, args.log_format)
    root = args.state_dir or default_state_dir(args.ray_temp_dir)
    opened: list[Offsets] = []
    try:
        for target in targets:
            opened.append(Offsets(root if len(targets) == 1 else state_folder(root, target)))
    except OffsetsError as exc:
        for offsets in opened:
            offsets.close()
        print(f"ray-otel-events collect: {exc}", file=sys.stderr)
        return 2
    bounds = Bounds(max_line_bytes=args.max_line_kb * 1024, max_file_bytes=int(args.max_file_mb * 1e6))
    stop = threading.Event()

    def stopping(signum: int, _: FrameType | None) -> None:
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stopping)
    printing = threading.Lock()
    failed: list[BaseException] = []

    def collect(target: Destination, offsets: Offsets) -> None:
        try:
            _collect(args, target, offsets, bounds, stop, printing)
        except BaseException as exc:  # said, and the others stop too: exit non-zero
            logger.exception("collecting to %s failed", target.url)
            failed.append(exc)
            stop.set()

    threads = [
        threading.Thread(target=collect, args=(target, offsets), name=f"collect {target.url}")
        for target, offsets in zip(targets, opened, strict=True)
    ]
    for thread in threads:
        thread.start()
    while not stop.is_set():
        stop.wait(0.5)  # signals are handled in this thread
    for thread in threads:
        thread.join()
    if failed:
        return 1
    every: dict[str, Any] = {}
    for target, offsets in zip(targets, opened, strict=True):
        counters = dict(sorted(offsets.counters.items()))
        logger.info("collector counters to %s: %s", target.url, counters)
        every[target.url] = counters
    if len(targets) == 1:
        (counters,) = every.values()
        print_exit_summary("collect", list(counters.items()), counters, args.log_format)
    else:
        rows = [
            (f"{url} {name}", value) for url, counters in every.items() for name, value in counters.items()
        ]
        print_exit_summary("collect", rows, every, args.log_format)
    return 0


def _collect(
    args: argparse.Namespace,
    target: Destination,
    offsets: Offsets,
    bounds: Bounds,
    stop: threading.Event,
    printing: threading.Lock,
) -> None:
    """One destination's loop, until `stop`, then its last pass."""

    def announce(session: str) -> None:
        with printing:
            print(f"collecting session={session} to={target.url}", flush=True)

    shipper = Shipper(target.url, offsets.counters)
    follower = Follower(args.ray_temp_dir, offsets, shipper, bounds, announce, logs=target.logs)
    waiting_said = False
    try:
        while not stop.is_set():
            follower.step()
            if follower.following is None and not waiting_said:
                logger.info("waiting for a Ray session under %s (session_latest)", args.ray_temp_dir)
                waiting_said = True
            stop.wait(args.poll_interval)
        # the last pass: what was written since, partial last lines of log files included, each
        # endpoint tried once more whatever it answered before
        follower.shipper = Shipper(target.url, offsets.counters)
        follower.unsent = 0
        follower.step(final=True)
        follower.shipper.close()
        if follower.unsent:
            offsets.counters["final_pass_files_unsent"] += follower.unsent
            logger.error(
                "stopped with %d files' last lines unsent to %s: they are sent when the collector"
                " starts again",
                follower.unsent,
                target.url,
            )
    finally:
        shipper.close()
        offsets.save()
        offsets.close()
