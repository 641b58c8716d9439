"""`ray-otel-events ray-env URL`: the environment a Ray node needs to send `serve` every event.

    eval "$(ray-otel-events ray-env http://127.0.0.1:8265)"
    ray start --head

Prints `export NAME=VALUE` lines (shell-quoted) for the Ray release installed here, or the one
`--ray-version` names (a node whose Ray differs from this machine's). The lines come from
events/ray_releases.py, one per variable and release. No `--token-file`: Ray's aggregator agent
posts with no token and no custom header (Ray 2.60), so there is no variable to print; a `serve`
with `--auth-token-file` cannot be reached by it, and under `RAY_AUTH_MODE=token` alone `serve`
leaves those POSTs open. With `--lineage`, one more line sets every worker of the node up for the
lineage mode (tracing/lineage.py; the variable's story is in events/ray_releases.py).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import shlex
import sys

from ray_otel_events.events.ray_releases import (
    COLLECT_COMMAND,
    EVENTS_PATH,
    NEWEST,
    OLDEST,
    UnknownRelease,
    events_url,
    lineage_environment,
    node_environment,
    parse_release,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = (
        f'Use: eval "$(ray-otel-events ray-env http://HOST:PORT)" before `ray start` on every node.'
        f" Knows Ray {OLDEST[0]}.{OLDEST[1]} to {NEWEST[0]}.{NEWEST[1]}."
    )
    parser.add_argument(
        "url", metavar="URL", help="serve's address, http://HOST:PORT (its /v1/ray-events is appended)"
    )
    parser.add_argument(
        "--ray-version",
        default=None,
        metavar="X.Y.Z",
        help="the Ray release on the cluster's nodes (default: the one installed here)",
    )
    parser.add_argument(
        "--lineage",
        action="store_true",
        help="also set up every worker for the lineage mode (docs/tracing.md): user spans under the"
        " spans Ray's events give each task attempt; set OTEL_EXPORTER_OTLP_ENDPOINT for where they go",
    )


def installed_ray_version() -> str | None:
    """The installed `ray` distribution's version, read from its metadata (importing Ray takes
    seconds and starts threads)."""
    try:
        return importlib.metadata.version("ray")
    except importlib.metadata.PackageNotFoundError:
        return None


def run(args: argparse.Namespace) -> int:
    try:
        url = events_url(args.url)
    except ValueError as exc:
        print(f"ray-otel-events ray-env: URL: {exc}", file=sys.stderr)
        return 2
    version = args.ray_version or installed_ray_version()
    if version is None:
        print(
            "ray-otel-events ray-env: Ray is not installed here; pass --ray-version X.Y.Z"
            " (the Ray release on the cluster's nodes)",
            file=sys.stderr,
        )
        return 2
    try:
        release = parse_release(version)
    except UnknownRelease as exc:
        print(f"ray-otel-events ray-env: {exc}", file=sys.stderr)
        return 2
    origin = "--ray-version" if args.ray_version else "installed here"
    print(f"# ray-otel-events ray-env: Ray {version} ({origin}), events to {url}")
    settings = node_environment(url, release)
    if args.lineage:
        from ray_otel_events.tracing.lineage import HOOK  # only then: it loads the OTel SDK

        settings += lineage_environment(HOOK)
    for name, value in settings:
        print(f"export {name}={shlex.quote(value)}")
    base = url.removesuffix(EVENTS_PATH)
    print(
        "# and beside `ray start` on every node, to ship its export events and log files: "
        + COLLECT_COMMAND.format(url=shlex.quote(base))
    )
    return 0
