"""The session name of the Ray cluster this process is connected to, for the events a hook sends.

Ray's own events carry it (`session_2026-...`); the hook's events must carry the same one, or the
store keeps them as another session. Ray calls a startup hook from `ray._private.worker.connect`
once the worker knows its node, so the hook reads it there, once per process (a forked child
inherits it with the installation). Ray itself is not imported: a process without it (a traced
process pool) has no such session.
"""

from __future__ import annotations

import dataclasses
import sys

from ray_otel_events.config import TracingConfig

RAY_WORKER_MODULE = "ray._private.worker"


def connected_session_name() -> str:
    """Ray's session name (`ray.get_runtime_context().get_session_name()`), or "" when this
    process has not loaded Ray or is not connected to a cluster."""
    worker_module = sys.modules.get(RAY_WORKER_MODULE)
    if worker_module is None:
        return ""
    node = getattr(getattr(worker_module, "global_worker", None), "node", None)
    name = getattr(node, "session_name", None)
    return name if isinstance(name, str) else ""


def with_ray_session(config: TracingConfig, name: str | None = None) -> TracingConfig:
    """`config` with the session of the Ray cluster this process is connected to (`name`, else
    read), which wins over `RAY_OTEL_EVENTS_SESSION_NAME` (Ray's own events carry it); unchanged
    elsewhere."""
    name = connected_session_name() if name is None else name
    if not name or name == config.session_name:
        return config
    return dataclasses.replace(config, session_name=name)
