"""`ray-otel-events store rebuild`: the state rows folded again from the store's raw events.

    ray-otel-events store rebuild --store ~/.local/share/ray-otel-events/events.sqlite3
    ray-otel-events store rebuild --store postgresql://USER@HOST:PORT/DB

Why: the store keeps every accepted event as it was sent (compressed, per session, within the
retention). After an upgrade whose fold reads more of an event (or reads it better), rebuilding
gives the rows this version folds, as if every event had arrived now, in the order and with the
times they did. Stop `serve` on the store first. The raw events, spans and log lines are kept;
stopped part way, running it again finishes it. On PostgreSQL, stop every `serve` writing the
database.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import time
from pathlib import Path

from ray_otel_events import config
from ray_otel_events.services.serve_cli import chosen_store, default_store_path
from ray_otel_events.store.backend import StoreError, UnsupportedStoreError
from ray_otel_events.store.location import is_url, open_store


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    rebuild = actions.add_parser("rebuild", help="fold the state rows again from the kept raw events")
    rebuild.add_argument(
        "--store",
        default=None,
        help="SQLite file or postgresql://USER@HOST:PORT/DB"
        f" (default ${config.STORE}, else {default_store_path()})",
    )
    rebuild.add_argument(
        "--force", action="store_true", help="rebuild even when some rows have no raw events (they are lost)"
    )


def run(args: argparse.Namespace) -> int:
    path = chosen_store(args.store)
    if not is_url(path) and not Path(path).exists():
        print(f"ray-otel-events store: no store at {path}", file=sys.stderr)
        return 1
    started = time.perf_counter()
    try:
        store = open_store(path)
    except UnsupportedStoreError as exc:
        print(f"ray-otel-events store: --store: {exc}", file=sys.stderr)
        return 2
    except (OSError, sqlite3.Error, StoreError) as exc:
        print(f"ray-otel-events store: cannot open the store {path}: {exc}", file=sys.stderr)
        return 1
    try:
        raw = store.raw_size()
        result = store.rebuild(force=args.force)
        rows = store.size()["state_rows"]
    except StoreError as exc:
        print(f"ray-otel-events store rebuild: {exc}; --force rebuilds without them", file=sys.stderr)
        return 1
    except sqlite3.Error as exc:
        print(f"ray-otel-events store rebuild: {exc} (run it again to finish)", file=sys.stderr)
        return 1
    finally:
        store.close()
    print(
        f"rebuilt {path}: {rows} state rows from {result.stored} events in {raw['blocks']} raw blocks"
        f" ({raw['bytes'] / 1e6:.1f} MB compressed), {result.duplicates} duplicates skipped,"
        f" {len(result.invalid)} refused, in {time.perf_counter() - started:.1f} s"
    )
    for reason in result.invalid[:10]:
        print(f"  refused: {reason}", file=sys.stderr)
    return 0
