"""`ray-otel-events spans [DIR]`: every trace in a spans folder as an indented tree.

Reads our hook's `<pid>.json` files and Ray's bundled hook's `<pid>.txt` files (default folder:
RAY_OTEL_EVENTS_SPANS_DIR, else /tmp/spans). `--trace ID` and `--name SUBSTRING` select traces;
`--chrome FILE` also writes Chrome trace-event JSON for Perfetto (ui.perfetto.dev) or
chrome://tracing. Lines that are not spans are skipped and counted on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from ray_otel_events.config import TracingConfig
from ray_otel_events.tracing.span_files import chrome_trace, read_spans, render_traces, select_traces


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "path", nargs="?", help="spans folder or file (default: $RAY_OTEL_EVENTS_SPANS_DIR or /tmp/spans)"
    )
    parser.add_argument(
        "--trace", metavar="ID", help="only the trace whose id starts with ID (hex, 0x optional)"
    )
    parser.add_argument(
        "--name", metavar="SUBSTRING", help="only traces with a span whose name contains SUBSTRING"
    )
    parser.add_argument("--chrome", metavar="FILE", help="also write Chrome trace-event JSON to FILE")


def run(args: argparse.Namespace) -> int:
    path = args.path or TracingConfig.from_env().spans_dir
    try:
        found = read_spans(path)
    except FileNotFoundError as exc:
        print(f"ray-otel-events spans: {exc}", file=sys.stderr)
        return 2
    if found.problems:
        print(
            f"ray-otel-events spans: skipped {len(found.problems)} unreadable line(s);"
            f" first: {found.problems[0]}",
            file=sys.stderr,
        )
    if args.trace is not None:
        try:
            int(args.trace.lower().removeprefix("0x") or "x", 16)
        except ValueError:
            print(f"ray-otel-events spans: --trace {args.trace!r} is not a hex trace id", file=sys.stderr)
            return 2
    traces = select_traces(found.spans, trace_id=args.trace, name=args.name)
    if not traces:
        print(
            f"ray-otel-events spans: no matching trace in {path}"
            f" ({len(found.spans)} spans in {found.files} files)",
            file=sys.stderr,
        )
        return 1
    try:
        print(render_traces(traces), flush=True)
    except BrokenPipeError:  # `... | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    if args.chrome:
        try:
            with open(args.chrome, "w", encoding="utf-8") as out:
                json.dump(chrome_trace(traces), out)
        except OSError as exc:
            print(
                f"ray-otel-events spans: cannot write {args.chrome}: {exc.strerror or exc}", file=sys.stderr
            )
            return 2
        print(f"chrome trace: {args.chrome} ({sum(len(m) for m in traces.values())} spans)", file=sys.stderr)
    return 0
