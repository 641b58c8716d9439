"""`ray-otel-events store rebuild`: the state rows folded again from the store's raw events;
`store refused` lists the events set aside because their fold failed, `store refold-refused` folds
them again (`rebuild` does too).

    ray-otel-events store rebuild --store ~/.local/share/ray-otel-events/events.sqlite3
    ray-otel-events store rebuild --store postgresql://USER@HOST:PORT/DB
    ray-otel-events store refused --store postgresql://USER@HOST:PORT/DB [--json]
    ray-otel-events store refold-refused --store postgresql://USER@HOST:PORT/DB

Why: the store keeps every accepted event as it was sent (compressed, per session, within the
retention). After an upgrade whose fold reads more of an event (or reads it better), rebuilding
gives the rows this version folds, as if every event had arrived now, in the order and with the
times they did. Stop `serve` on the store first. The raw events, spans and log lines are kept;
stopped part way, running it again finishes it. On PostgreSQL, stop every `serve` writing the
database.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import time
from pathlib import Path

from ray_otel_events import config
from ray_otel_events.security.client_errors import log_text
from ray_otel_events.services.serve_cli import chosen_store, default_store_path
from ray_otel_events.store.backend import Store, StoreError, UnsupportedStoreError
from ray_otel_events.store.location import is_url, open_store


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    rebuild = actions.add_parser("rebuild", help="fold the state rows again from the kept raw events")
    refused = actions.add_parser("refused", help="list the events set aside because their fold failed")
    refold = actions.add_parser(
        "refold-refused",
        help="fold the set-aside events again (stop serve first); those that fold now are no longer listed",
    )
    for action in (rebuild, refused, refold):
        action.add_argument(
            "--store",
            default=None,
            help="SQLite file or postgresql://USER@HOST:PORT/DB"
            f" (default ${config.STORE}, else {default_store_path()})",
        )
    rebuild.add_argument(
        "--force", action="store_true", help="rebuild even when some rows have no raw events (they are lost)"
    )
    refused.add_argument("--json", action="store_true", help="one JSON object per event, its text whole")


def run(args: argparse.Namespace) -> int:
    path = chosen_store(args.store)
    if not is_url(path) and not Path(path).exists():
        print(f"ray-otel-events store: no store at {path}", file=sys.stderr)
        return 1
    started = time.perf_counter()
    try:
        store = open_store(path, read_only=args.action == "refused")
    except UnsupportedStoreError as exc:
        print(f"ray-otel-events store: --store: {exc}", file=sys.stderr)
        return 2
    except (OSError, sqlite3.Error, StoreError) as exc:
        print(f"ray-otel-events store: cannot open the store {path}: {exc}", file=sys.stderr)
        return 1
    if args.action != "rebuild":
        try:
            return _list_refused(store, args.json) if args.action == "refused" else _refold(store)
        except (StoreError, sqlite3.Error) as exc:
            print(f"ray-otel-events store {args.action}: {exc}", file=sys.stderr)
            return 1
        finally:
            store.close()
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


def _refold(store: Store) -> int:
    folded, still = store.refold_refused()
    print(f"{folded} set-aside events folded, {len(still)} still refused")
    for event in still:
        print(f"  {log_text(event.event_id, 80)}: {log_text(event.reason)}")
    return 0


def _list_refused(store: Store, as_json: bool) -> int:
    events = store.refused_events()
    for event in events:
        if as_json:
            print(
                json.dumps(
                    {
                        "event_id": event["event_id"],
                        "received": event["received"],
                        "reason": event["reason"],
                        "event": json.loads(event["text"]),
                    }
                )
            )
        else:
            received = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(event["received"]))
            print(f"{received}  {log_text(event['event_id'], 80)}  {log_text(event['reason'])}")
    if not as_json:
        print(f"{len(events)} events set aside", file=sys.stderr)
    return 0
