"""`ray-otel-events`: one command, a subcommand per service or tool.

Each subcommand lives in its own module exposing `add_arguments(parser)` and `run(args) -> int`,
so this file only wires names to modules. A ConfigError anywhere becomes a one-line message on
stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from ray_otel_events import __version__
from ray_otel_events.config import ConfigError

# name -> (module, help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "aggregator": ("ray_otel_events.services.aggregator_cli", "run the gRPC event aggregator"),
    "sink": ("ray_otel_events.services.sink_cli", "run an HTTP sink that writes what it receives to a file"),
    "demo": ("ray_otel_events.demo", "run a small real workload through the whole pipeline"),
    "spans": ("ray_otel_events.tracing.spans_cli", "print the traces in a spans folder as trees"),
    "bridge": ("ray_otel_events.services.bridge_cli", "bridge OTLP/HTTP and RayEvent JSON, both ways"),
    "serve": ("ray_otel_events.services.serve_cli", "store events and answer Ray's state API (ray list ...)"),
    "collect": (
        "ray_otel_events.services.collect_cli",
        "ship a Ray node's export events and log files to serve (run beside `ray start`)",
    ),
    "ray-env": (
        "ray_otel_events.ray_env_cli",
        "print the environment a Ray node needs to send serve every event (eval it before ray start)",
    ),
    "list": (
        "ray_otel_events.state_cli",
        "list stored tasks, actors, jobs, nodes, workers or placement groups",
    ),
    "get": ("ray_otel_events.state_cli", "one stored task, actor, job, node, worker or placement group"),
    "summary": ("ray_otel_events.state_cli", "stored tasks or actors counted by name and state"),
    "timeline": ("ray_otel_events.state_cli", "write stored task attempts as a Chrome/Perfetto trace"),
    "logs": ("ray_otel_events.state_cli", "print a stored task's log lines"),
    "sessions": ("ray_otel_events.state_cli", "list the stored sessions (clusters' runs), newest first"),
    "store": ("ray_otel_events.store_cli", "maintain a store file (rebuild its rows from its raw events)"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """All subcommand names; only `command`'s module is imported (fast start, isolated failures)."""
    parser = argparse.ArgumentParser(
        prog="ray-otel-events",
        description="Ray-compatible lifecycle events and tracing, joined to OpenTelemetry.",
    )
    parser.add_argument(
        "--version", action="version", version=f"ray-otel-events {__version__} (Ray event schema 2.60)"
    )
    subs = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        sub = subs.add_parser(name, help=help_text, description=help_text)
        if name == command:
            module = importlib.import_module(module_name)
            module.add_arguments(sub)
            sub.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(command)
    args = parser.parse_args(argv)
    try:
        code: int = args._run(args)
    except ConfigError as exc:
        print(f"ray-otel-events {args.command}: configuration error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
