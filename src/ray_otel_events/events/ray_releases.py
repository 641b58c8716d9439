"""What a Ray node of each release needs in its environment so that every event the store reads
reaches `serve`: one line per variable (or exposed event type) and the releases it holds for.

`ray-otel-events ray-env` prints these; `serve` names the types when a session lacks some. A new
release, variable or type is one more line in `SETTINGS` or `EXPOSED_TYPES` (issues 44-46 add
theirs), nothing else. Ray 2.60's lines were read from its package (the `RAY_enable_*` switches
among `ray/_raylet.so`'s config names, the exposable-type filter in
`ray/dashboard/modules/aggregator/publisher/`, the Python event switch in
`ray/_private/ray_constants.py`) and proved on a live cluster (tests/test_ray_env.py); the other
releases' lines come from reading the 2.49.2, 2.52.1 and 2.55.0 packages, not from a live run here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

Release = tuple[int, int]  # (major, minor): Ray's patch releases do not change what is exported

OLDEST: Release = (2, 49)  # the first release whose aggregator agent posts RayEvents over HTTP
NEWEST: Release = (2, 60)  # the newest release these lines were checked against
EVENTS_PATH = "/v1/ray-events"  # serve's (and the bridge's) receiver of Ray's POSTs

# The variable that carries the comma list of EXPOSED_TYPES.
EXPOSABLE_TYPES_VARIABLE = "RAY_DASHBOARD_AGGREGATOR_AGENT_EXPOSABLE_EVENT_TYPES"
EXPORT_ADDR_VARIABLE = "RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR"
ENABLE_RAY_EVENT = "RAY_enable_ray_event"  # Ray's master switch for RayEvents
CORE_WORKER_RAY_EVENTS = "RAY_enable_core_worker_ray_event_to_aggregator"  # core workers' task events
URL = "{url}"  # in a value: the receiver's URL


@dataclass(frozen=True)
class Setting:
    """One environment variable, for the releases `since`..`until` (inclusive; None: still)."""

    name: str
    value: str
    since: Release = OLDEST
    until: Release | None = None
    why: str = ""


@dataclass(frozen=True)
class ExposedType:
    """One event type the aggregator must let through, for the releases `since`..`until`."""

    name: str
    since: Release = OLDEST
    until: Release | None = None


SETTINGS: tuple[Setting, ...] = (
    Setting(ENABLE_RAY_EVENT, "1", why="core workers and the GCS emit RayEvents at all"),
    Setting(
        CORE_WORKER_RAY_EVENTS,
        "1",
        why="core workers send their task events to the node's aggregator agent",
    ),
    Setting(EXPORT_ADDR_VARIABLE, URL, why="where the aggregator agent POSTs"),
    Setting(EXPOSABLE_TYPES_VARIABLE, "{types}", why="every type the store reads (Ray leaves some out)"),
    # Ray 2.60 gates Python-emitted events by type; its default lets only PLATFORM_EVENT through.
    # Its job manager does not emit submission-job events yet (they go to export files only), so
    # naming them here costs nothing and lets a release that does send them reach the store.
    Setting(
        "RAY_ENABLE_PYTHON_RAY_EVENT_TYPES",
        "PLATFORM_EVENT,SUBMISSION_JOB_DEFINITION_EVENT,SUBMISSION_JOB_LIFECYCLE_EVENT",
        since=(2, 60),
        why="Python-emitted event types (platform, submission jobs)",
    ),
    # Train v2 keeps its runs in its state actor (and writes them as EXPORT_TRAIN_RUN* export
    # events, which `serve` keeps) only with this on (ray/train/v2/api/data_parallel_trainer.py).
    Setting(
        "RAY_TRAIN_ENABLE_STATE_TRACKING",
        "1",
        since=(2, 60),
        why="Ray Train v2 records its runs, attempts and workers",
    ),
)

# The Export API types whose files `ray-otel-events collect` ships (Ray Data's datasets, Train's runs
# and attempts, submitted jobs): ExportEvent.SourceType names Ray 2.60's writers check
# (ray/_private/event/export_event_logger.py, ray_constants.RAY_enable_export_api_write_config).
# Not the core's EXPORT_TASK/ACTOR/NODE/DRIVER_JOB: their content reaches serve as RayEvents.
EXPORT_API_TYPES = (
    "EXPORT_DATASET_METADATA",
    "EXPORT_DATASET_OPERATOR_EVENT",
    "EXPORT_DATASET_OPERATOR_SCHEMA",
    "EXPORT_TRAIN_RUN",
    "EXPORT_TRAIN_RUN_ATTEMPT",
    "EXPORT_SUBMISSION_JOB",
)
SETTINGS += (
    # Read in 2.60's package only: earlier releases' writers (and so their types) differ.
    Setting(
        "RAY_enable_export_api_write_config",
        ",".join(EXPORT_API_TYPES),
        since=(2, 60),
        why="Ray writes these export events to the session's files, which `collect` ships",
    ),
)
COLLECT_COMMAND = "ray-otel-events collect --to {url}"  # beside `ray start` on every node

# The lineage mode for every job of a cluster (`ray-env --lineage`, tracing/lineage.py). Ray has no
# documented cluster-wide worker_process_setup_hook (only the per-job runtime_env field, and
# RAY_RUNTIME_ENV_HOOK, which rewrites a driver's runtime_env in that driver's process alone). Its
# default_worker.py runs the hook a job's runtime_env turned into this variable, read from the
# worker's environment, which it inherits from the node's: set at `ray start`, it sets up every
# worker of every job (a job giving its own hook replaces it for its workers). A Ray-internal name,
# the same in 2.49.2, 2.52.1, 2.55.0 and 2.60.0's packages; proved live on 2.60
# (tests/test_tracing_lineage.py).
WORKER_SETUP_HOOK_VARIABLE = "__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR"


def lineage_environment(hook: str) -> list[tuple[str, str]]:
    """(name, value) that makes every worker of a node run `hook` (`module.function`) at start."""
    return [(WORKER_SETUP_HOOK_VARIABLE, hook)]


# Checked in 2.49.2, 2.52.1, 2.55.0 and 2.60.0. Between two of those a type's first release is
# not known, so its line starts at the earliest it may: the agent compares the names literally, so
# a name its release does not emit lets nothing extra through and costs nothing.
EXPOSED_TYPES: tuple[ExposedType, ...] = (
    ExposedType("TASK_DEFINITION_EVENT"),
    ExposedType("TASK_EXECUTION_EVENT", until=(2, 51)),  # 2.49's name for number 2
    ExposedType("ACTOR_TASK_EXECUTION_EVENT", until=(2, 51)),  # named by 2.49's default filter
    ExposedType("TASK_LIFECYCLE_EVENT", since=(2, 50)),
    ExposedType("ACTOR_TASK_DEFINITION_EVENT"),
    ExposedType("TASK_PROFILE_EVENT"),
    ExposedType("DRIVER_JOB_DEFINITION_EVENT", since=(2, 50)),
    ExposedType("DRIVER_JOB_LIFECYCLE_EVENT", since=(2, 50)),
    ExposedType("NODE_DEFINITION_EVENT", since=(2, 50)),
    ExposedType("NODE_LIFECYCLE_EVENT", since=(2, 50)),
    ExposedType("ACTOR_DEFINITION_EVENT", since=(2, 50)),
    ExposedType("ACTOR_LIFECYCLE_EVENT", since=(2, 50)),
    ExposedType("PLACEMENT_GROUP_DEFINITION_EVENT", since=(2, 53)),
    ExposedType("PLACEMENT_GROUP_LIFECYCLE_EVENT", since=(2, 53)),
    ExposedType("SUBMISSION_JOB_DEFINITION_EVENT", since=(2, 53)),
    ExposedType("SUBMISSION_JOB_LIFECYCLE_EVENT", since=(2, 53)),
    ExposedType("PLATFORM_EVENT", since=(2, 53)),
    ExposedType("WORKER_LIFECYCLE_EVENT", since=(2, 56)),
    ExposedType("WORKER_DEFINITION_EVENT", since=(2, 56)),
)


class UnknownRelease(ValueError):
    """A version ray-env has no lines for."""


def parse_release(version: str) -> Release:
    """(major, minor) of `2.60.0`, `2.60.0rc1`, `2.60.0.dev0`; UnknownRelease when it is not a
    Ray version or outside OLDEST..NEWEST."""
    found = re.fullmatch(r"\s*(\d+)\.(\d+)(?:\.\d+)?(?:[.+-]?[A-Za-z0-9.+-]*)?\s*", version)
    if not found:
        raise UnknownRelease(f"{version!r} is not a Ray version (like 2.60.0)")
    release = (int(found[1]), int(found[2]))
    if release < OLDEST:
        raise UnknownRelease(
            f"Ray {version} does not export its events over HTTP (its aggregator agent posts them"
            f" from Ray {_name(OLDEST)} on); upgrade the cluster's Ray"
        )
    if release > NEWEST:
        raise UnknownRelease(
            f"Ray {version} is newer than the releases ray-env knows ({_name(OLDEST)} to"
            f" {_name(NEWEST)}); pass --ray-version {_name(NEWEST)}.0 to use {_name(NEWEST)}'s"
            " variables, and check them against that release's notes"
        )
    return release


def _name(release: Release) -> str:
    return f"{release[0]}.{release[1]}"


def _holds(since: Release, until: Release | None, release: Release) -> bool:
    return since <= release and (until is None or release <= until)


def exposed_types(release: Release) -> list[str]:
    """The type names a node of `release` must expose (its own names: 2.49's differ)."""
    return [t.name for t in EXPOSED_TYPES if _holds(t.since, t.until, release)]


def node_environment(events_url: str, release: Release) -> list[tuple[str, str]]:
    """(name, value) of every variable a node of `release` needs to post to `events_url`."""
    types = ",".join(exposed_types(release))
    return [
        (s.name, s.value.replace(URL, events_url).replace("{types}", types))
        for s in SETTINGS
        if _holds(s.since, s.until, release)
    ]


def events_url(base: str) -> str:
    """`serve`'s receiver under `base` (`http://HOST:PORT`, maybe behind a path prefix); a URL that
    already ends with EVENTS_PATH is taken as it is. ValueError says what is wrong with `base`."""
    parts = urlsplit(base.strip())
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{base!r} is not an http:// or https:// URL (like http://127.0.0.1:8265)")
    if not parts.hostname:
        raise ValueError(f"{base!r} names no host (like http://127.0.0.1:8265)")
    try:
        parts.port  # noqa: B018 (a bad port raises here)
    except ValueError:
        raise ValueError(f"{base!r} has a bad port (1-65535)") from None
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError(
            f"{base!r}: give serve's address alone, no query, fragment or user (http://HOST:PORT)"
        )
    path = parts.path.rstrip("/")
    if not path.endswith(EVENTS_PATH):
        path += EVENTS_PATH
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))
