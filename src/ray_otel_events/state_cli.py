"""`ray-otel-events list|get|summary|timeline|logs|sessions`: the store's state from the terminal.

    ray-otel-events list tasks --filter state=FAILED --format table
    ray-otel-events get tasks TASK_ID
    ray-otel-events summary tasks
    ray-otel-events timeline --out timeline.json     (open in https://ui.perfetto.dev)
    ray-otel-events logs TASK_ID
    ray-otel-events sessions                        (then --session NAME on any of the above)

With `--address http://HOST:PORT` they ask a running `serve`; without, they read the store file
itself (`--store`, default the one `serve` uses), so they work with no server, after the cluster
is gone. Either way the answers are the same (`StoreViews`), about one session: the newest, or
the one `--session` names. A `serve` that wants a token gets the one the producers send (ours,
else Ray's: RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

import requests
from multidict import MultiDict

from ray_otel_events import config
from ray_otel_events.config import ClientSecurityConfig, ConfigError, parse_serve_address
from ray_otel_events.services.serve_cli import chosen_store, default_store_path
from ray_otel_events.store.backend import StoreError
from ray_otel_events.store.location import open_store
from ray_otel_events.store.state_query import BASE_COLUMNS, RESOURCES
from ray_otel_events.store.views import StoreViews

# Lists of what Ray's Export API events hold (`ray-otel-events list datasets`), by their paths
EXPORT_LISTS = {"datasets": "datasets", "train-runs": "train_runs"}
EXPORT_COLUMNS = {
    "datasets": ["dataset_id", "job_id", "state", "operators", "start_time", "end_time"],
    "train-runs": ["run_id", "name", "job_id", "status", "attempts", "workers", "start_time", "end_time"],
}


class Unanswered(Exception):
    """The store or server could not answer; the message says why."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--address",
        help=f"a running serve, http://HOST:PORT (default ${config.ADDRESS}, unless --store is given)",
    )
    source.add_argument(
        "--store",
        help="read this store: a SQLite file or postgresql://USER@HOST:PORT/DB"
        f" (default ${config.STORE}, else {default_store_path()})",
    )
    command = parser.prog.rsplit(" ", 1)[-1]
    if command != "sessions":
        parser.add_argument("--session", help="this session (`ray-otel-events sessions`), not the newest")
    if command == "list":
        parser.add_argument("resource", choices=(*RESOURCES, *EXPORT_LISTS))
        parser.add_argument(
            "--filter",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="KEY=VALUE or KEY!=VALUE (repeatable)",
        )
        parser.add_argument("--limit", type=int, default=100)
        parser.add_argument("--detail", action="store_true", help="every column, as `ray list --detail`")
        parser.add_argument("--format", choices=("table", "json"), default="table")
    elif command == "get":
        parser.add_argument("resource", choices=RESOURCES)
        parser.add_argument("id")
        parser.add_argument("--format", choices=("table", "json"), default="json")
    elif command == "summary":
        parser.add_argument("resource", choices=("tasks", "actors"))
        parser.add_argument("--format", choices=("table", "json"), default="table")
    elif command == "timeline":
        parser.add_argument("--out", type=Path, required=True, help="Chrome/Perfetto trace JSON to write")
        parser.add_argument("--job-id", help="only this job's tasks")
    elif command == "logs":
        parser.add_argument("task_id")
        parser.add_argument("--attempt", type=int, help="only this attempt's lines (default: every attempt)")
        parser.add_argument("--format", choices=("text", "json"), default="text")
    elif command == "sessions":
        parser.add_argument("--format", choices=("table", "json"), default="table")


class _Source:
    def __init__(self, args: argparse.Namespace) -> None:
        # The flag, else the variable unless --store is given (a flag wins over the environment).
        if args.address is not None:
            self.address: str | None = parse_serve_address(args.address, "--address")
        else:
            self.address = config.serve_address() if args.store is None else None
        self.session: str | None = getattr(args, "session", None)
        self.views: StoreViews | None = None
        self.headers: dict[str, str] = {}
        if self.address is None:
            path = chosen_store(args.store)
            try:
                self.views = StoreViews(
                    open_store(path, read_only=True), wiring_delay_s=config.wiring_check_delay_s()
                )
            except (StoreError, sqlite3.Error) as exc:
                raise Unanswered(f"cannot read the store {path}: {exc}") from None
        else:
            token = ClientSecurityConfig.from_env().token
            self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def get(self, path: str, params: list[tuple[str, str]] | None = None) -> tuple[int, Any]:
        if self.views is not None:
            try:
                return self.views.answer(path, MultiDict(params or []), self.session)
            except (StoreError, sqlite3.Error) as exc:
                raise Unanswered(f"cannot read the store: {exc}") from None
        if self.session:
            params = [*(params or []), ("session", self.session)]
        try:
            response = requests.get(f"{self.address}{path}", params=params, headers=self.headers, timeout=60)
        except requests.RequestException as exc:
            raise Unanswered(f"cannot reach {self.address}: {exc}") from None
        if response.status_code in (401, 403):
            raise Unanswered(
                f"{self.address} refused the request ({response.status_code}): set the token in "
                "RAY_OTEL_EVENTS_AUTH_TOKEN(_FILE), or Ray's RAY_AUTH_TOKEN(_PATH)"
            )
        try:
            return response.status_code, response.json()
        except ValueError:
            raise Unanswered(f"{self.address}{path} answered {response.status_code}, not JSON") from None


def _error_of(body: Any) -> str:
    if isinstance(body, dict):
        return str(body.get("error") or body.get("msg") or body)
    return str(body)


def _ray_result(status: int, body: Any) -> Any:
    """The payload of Ray's envelope, or Unanswered with its message."""
    if status != 200 or not body.get("result", False):
        raise Unanswered(_error_of(body))
    return body["data"]["result"]


def _ui_result(status: int, body: Any) -> Any:
    """An /api/ui answer, or Unanswered with its error."""
    if status != 200:
        raise Unanswered(_error_of(body))
    return body


def _filters(raw: list[str]) -> list[tuple[str, str]]:
    """`KEY=VALUE` / `KEY!=VALUE` as Ray's filter_keys, filter_predicates, filter_values."""
    params: list[tuple[str, str]] = []
    for item in raw:
        predicate = "!=" if "!=" in item else "="
        key, _, value = item.partition(predicate)
        if not key or predicate not in item:
            raise ConfigError(f"--filter {item!r}: expected KEY=VALUE or KEY!=VALUE")
        params += [("filter_keys", key), ("filter_predicates", predicate), ("filter_values", value)]
    return params


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    def cell(value: Any) -> str:
        if value is None:
            return ""
        return value if isinstance(value, str) else json.dumps(value)

    cells = [[cell(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)


def _list(source: _Source, args: argparse.Namespace) -> int:
    params = [("limit", str(args.limit)), ("detail", str(args.detail).lower()), *_filters(args.filter)]
    path = EXPORT_LISTS.get(args.resource, args.resource)
    result = _ray_result(*source.get(f"/api/v0/{path}", params))
    if args.format == "json":
        print(json.dumps(result["result"], indent=2))
    else:
        shown = len(result["result"])
        print(f"{shown} of {result['num_filtered']} matching ({result['total']} {args.resource} stored)")
        if shown:
            columns = (
                list(result["result"][0])
                if args.detail
                else BASE_COLUMNS.get(args.resource) or EXPORT_COLUMNS[args.resource]
            )
            print(_table(result["result"], columns))
    return 0


def _get(source: _Source, args: argparse.Namespace) -> int:
    # every detail column, and the fields a later Ray added to its events (read from the raw events)
    rows = _ui_result(*source.get(f"/api/ui/get/{args.resource}/{args.id}"))["rows"]
    if args.format == "json":
        print(json.dumps(rows if len(rows) > 1 else rows[0], indent=2))
    else:
        for row in rows:
            width = max(len(k) for k in row)
            print(
                "\n".join(
                    f"{k.ljust(width)}  {json.dumps(v) if not isinstance(v, str) else v}"
                    for k, v in row.items()
                )
            )
            print()
    return 0


def _summary(source: _Source, args: argparse.Namespace) -> int:
    result = _ray_result(*source.get(f"/api/v0/{args.resource}/summarize"))
    cluster = result["result"]["node_id_to_summary"]["cluster"]
    if args.format == "json":
        print(json.dumps(cluster, indent=2))
        return 0
    entries = list(cluster["summary"].values())
    name_key = "func_or_class_name" if args.resource == "tasks" else "class_name"
    rows = [
        {
            "name": e[name_key],
            "type": e.get("type", "ACTOR"),
            "states": ", ".join(f"{s}: {n}" for s, n in sorted(e["state_counts"].items())),
        }
        for e in entries
    ]
    print(f"{result['total']} {args.resource} stored")
    if rows:
        print(_table(rows, ["name", "type", "states"]))
    return 0


def _timeline(source: _Source, args: argparse.Namespace) -> int:
    body = _ui_result(*source.get("/api/ui/timeline", [("job_id", args.job_id)] if args.job_id else []))
    try:
        args.out.write_text(json.dumps(body))
    except OSError as exc:
        raise Unanswered(f"cannot write {args.out}: {exc}") from None
    slices = sum(1 for e in body if e.get("cat") == "task")
    print(
        f"wrote {slices} task slices to {args.out} (open it in https://ui.perfetto.dev or chrome://tracing)"
    )
    return 0


def _clock(ts_ns: int) -> str:
    return datetime.datetime.fromtimestamp(ts_ns / 1e9).strftime("%H:%M:%S.%f")[:-3]


def _logs(source: _Source, args: argparse.Namespace) -> int:
    params = [("attempt", str(args.attempt))] if args.attempt is not None else []
    lines = _ui_result(*source.get(f"/api/ui/tasks/{args.task_id}/logs", params))["logs"]
    if args.format == "json":
        print(json.dumps(lines, indent=2))
        return 0
    if not lines:
        print(f"no log lines stored for task {args.task_id}", file=sys.stderr)
    for line in lines:
        stream = sys.stderr if line.get("stream") == "stderr" else sys.stdout
        pid = f" pid={line['pid']}" if line.get("pid") else ""
        attempt = f" attempt={line['attempt']}" if line.get("attempt") is not None else ""
        who = f"({line.get('function') or line.get('severity') or 'log'}{pid}{attempt})"
        print(f"{_clock(line['ts_ns'])} {who} {line['body']}", file=stream)
    return 0


def _sessions(source: _Source, args: argparse.Namespace) -> int:
    body = _ui_result(*source.get("/api/sessions"))
    if args.format == "json":
        print(json.dumps(body["sessions"], indent=2))
        return 0
    rows = [
        {
            **entry,
            "first_seen": _when(entry["first_seen"]),
            "last_seen": _when(entry["last_seen"]),
            "name": entry["name"] + (" (newest)" if entry["name"] == body.get("newest") else ""),
            "missing": ",".join(m["check"] for m in entry.get("missing", [])),
        }
        for entry in body["sessions"]
    ]
    print(f"{len(rows)} sessions stored, newest first")
    if rows:
        print(
            _table(rows, ["name", "first_seen", "last_seen", "jobs", "tasks", "actors", "nodes", "missing"])
        )
    serve = source.address or "http://SERVE_HOST:PORT"
    for entry in body["sessions"]:
        for missing in entry.get("missing", []):
            print(
                f"warning: session {entry['name']} lacks {', '.join(missing['events'])}: {missing['why']};"
                f' wire its nodes with `eval "$(ray-otel-events ray-env {serve})"` and start them again',
                file=sys.stderr,
            )
    return 0


def _when(epoch_s: float) -> str:
    return datetime.datetime.fromtimestamp(epoch_s).strftime("%Y-%m-%d %H:%M:%S")


_COMMANDS = {
    "list": _list,
    "get": _get,
    "summary": _summary,
    "timeline": _timeline,
    "logs": _logs,
    "sessions": _sessions,
}


def run(args: argparse.Namespace) -> int:
    try:
        source = _Source(args)
        return _COMMANDS[args.command](source, args)
    except Unanswered as exc:
        print(f"ray-otel-events {args.command}: {exc}", file=sys.stderr)
        return 1
