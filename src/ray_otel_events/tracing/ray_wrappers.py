"""Cheaper stand-ins for the helpers Ray's own tracing wrappers call on every task.

Once a tracing hook is set, every task and actor call goes through Ray's wrappers in
`ray.util.tracing.tracing_helper`, on the submitting side and in the worker. Each time they fetch
`opentelemetry.trace` / `.context` / `.propagate` through a proxy that calls
`importlib.import_module`, build the span attributes through `get_runtime_context()` (a lock, an
`is_initialized()` check and a Cython call per id, for a pid, node id and worker id that do not
change while the process stays connected), and attach the parent context through a
`@contextmanager` generator. This module gives the same results for less: the modules resolved
once, the per-connection ids cached (keyed on the core worker, dropped after fork), the task,
actor and job ids still read on every call, a plain context manager.

The wrappers look these helpers up as globals of their module when they run, so `install`
replacing the module's attributes reaches wrappers already made; a function or actor class pickled
afterwards carries references to this module's helpers, which its worker imports. Applied only to
the Ray version whose helpers were checked to have this shape; anything else is left as it is.
"""

from __future__ import annotations

import inspect
import logging
import os
import sys
from collections.abc import Callable, Iterator
from types import ModuleType, TracebackType
from typing import Any

import ray
import ray._private.worker as ray_worker
from opentelemetry import context as otel_context
from opentelemetry import propagate as otel_propagate
from opentelemetry import trace as otel_trace
from opentelemetry.context.context import Context

logger = logging.getLogger("ray_otel_events.tracing")

TRACING_HELPER = "ray.util.tracing.tracing_helper"
RAY_VERSIONS = ("2.60.",)  # whose helpers were read and matched, line by line

# The module attribute replaced -> the parameters Ray's version of it takes.
_EXPECTED: dict[str, tuple[str, ...]] = {
    "_function_hydrate_span_args": ("function_name",),
    "_actor_hydrate_span_args": ("class_", "method"),
    "_use_context": ("parent_context",),
}
_EXPECTED_PROPAGATOR = {"inject_current_context": (), "extract": ("context_dict",)}


class OpenTelemetryModules:
    """What Ray's `_OpenTelemetryProxy` hands out, resolved once instead of imported per access."""

    __slots__ = ("Context", "context", "propagate", "trace")

    def __init__(self) -> None:
        self.trace = otel_trace
        self.context = otel_context
        self.propagate = otel_propagate
        self.Context = Context


class _ConnectionIds:
    """The ids that stay the same while this process is connected to one Ray core worker."""

    __slots__ = ("core_worker", "node_id", "pid", "worker_id")

    def __init__(self, core_worker: object, node_id: str, worker_id: str | None) -> None:
        self.core_worker = core_worker
        self.pid = str(os.getpid())
        self.node_id = node_id
        self.worker_id = worker_id


_ids: _ConnectionIds | None = None


def _forget_ids() -> None:
    global _ids
    _ids = None


os.register_at_fork(after_in_child=_forget_ids)


def _connection_ids(worker: Any) -> _ConnectionIds | None:
    """The cached ids of `worker`'s current connection; None when it is not connected (the caller
    then falls back to Ray's own helper, which raises as Ray does)."""
    global _ids
    core_worker = worker.__dict__.get("core_worker")
    if core_worker is None or not worker.connected:
        return None
    ids = _ids
    if ids is None or ids.core_worker is not core_worker:
        raw_worker_id = getattr(worker, "worker_id", None)
        ids = _ConnectionIds(
            core_worker,
            worker.current_node_id.hex(),
            raw_worker_id.hex() if raw_worker_id else None,
        )
        _ids = ids
    return ids


def function_hydrate_span_args(function_name: str) -> dict[str, str]:
    """Ray's `_function_hydrate_span_args`: the same keys, values and order."""
    worker = ray_worker.global_worker
    ids = _connection_ids(worker)
    if ids is None:
        return _ray_helper("_function_hydrate_span_args")(function_name)  # type: ignore[no-any-return]
    span_args = {
        "ray.remote": "function",
        "ray.function": function_name,
        "ray.pid": ids.pid,
        "ray.job_id": worker.current_job_id.hex(),
        "ray.node_id": ids.node_id,
    }
    if worker.mode == ray_worker.WORKER_MODE:
        task_id = worker.current_task_id
        if not task_id.is_nil():
            span_args["ray.task_id"] = task_id.hex()
    if ids.worker_id:
        span_args["ray.worker_id"] = ids.worker_id
    return span_args


def actor_hydrate_span_args(
    class_: str | Callable[..., Any], method: str | Callable[..., Any]
) -> dict[str, str]:
    """Ray's `_actor_hydrate_span_args`: the same keys, values and order."""
    worker = ray_worker.global_worker
    ids = _connection_ids(worker)
    if ids is None:
        return _ray_helper("_actor_hydrate_span_args")(class_, method)  # type: ignore[no-any-return]
    if callable(class_):
        class_ = class_.__name__
    if callable(method):
        method = method.__name__
    span_args = {
        "ray.remote": "actor",
        "ray.actor_class": class_,
        "ray.actor_method": method,
        "ray.function": f"{class_}.{method}",
        "ray.pid": ids.pid,
        "ray.job_id": worker.current_job_id.hex(),
        "ray.node_id": ids.node_id,
    }
    if worker.mode == ray_worker.WORKER_MODE:
        actor_id = worker.actor_id
        if not actor_id.is_nil():
            span_args["ray.actor_id"] = actor_id.hex()
    if ids.worker_id:
        span_args["ray.worker_id"] = ids.worker_id
    return span_args


class UseContext:
    """Ray's `_use_context` (attach the extracted context, or an empty one, for the body) as a
    plain context manager rather than a generator."""

    __slots__ = ("_parent", "_token")

    def __init__(self, parent_context: Context | None) -> None:
        self._parent = parent_context

    def __enter__(self) -> None:
        parent = self._parent
        self._token = otel_context.attach(parent if parent is not None else Context())

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        otel_context.detach(self._token)


class DictPropagator:
    """Ray's `_DictPropagator`: the global propagator into and out of a plain dict."""

    @staticmethod
    def inject_current_context() -> dict[Any, Any]:
        context_dict: dict[Any, Any] = {}
        otel_propagate.inject(context_dict)
        return context_dict

    @staticmethod
    def extract(context_dict: dict[Any, Any]) -> Context:
        return otel_propagate.extract(context_dict)


_REPLACEMENTS: dict[str, object] = {
    "_function_hydrate_span_args": function_hydrate_span_args,
    "_actor_hydrate_span_args": actor_hydrate_span_args,
    "_use_context": UseContext,
    "_DictPropagator": DictPropagator,
}
_originals: dict[str, Any] = {}


def _ray_helper(name: str) -> Any:
    """Ray's own helper: the one `install` replaced, or (in a process that unpickled these
    stand-ins without installing them) the one still in Ray's module."""
    original = _originals.get(name)
    return original if original is not None else getattr(sys.modules[TRACING_HELPER], name)


def _parameters(func: object) -> tuple[str, ...] | None:
    try:
        return tuple(inspect.signature(func).parameters)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _shape_mismatch(helper: ModuleType, version: str) -> str | None:
    """Why Ray's helpers are not the ones these stand-ins copy, or None when they are."""
    if not version.startswith(RAY_VERSIONS):
        return f"Ray {version} is not one whose tracing helpers were checked"
    for name, params in _EXPECTED.items():
        func = inspect.unwrap(getattr(helper, name, None))  # type: ignore[arg-type]
        if func is None or _parameters(func) != params:
            return f"{name} is missing or takes other parameters"
    propagator = getattr(helper, "_DictPropagator", None)
    for name, params in _EXPECTED_PROPAGATOR.items():
        if propagator is None or _parameters(getattr(propagator, name, None)) != params:
            return f"_DictPropagator.{name} is missing or takes other parameters"
    for name in ("_opentelemetry", "_get_opentelemetry", "_OpenTelemetryProxy", "get_runtime_context"):
        if not hasattr(helper, name):
            return f"{name} is missing"
    return None


def install() -> bool:
    """Put the stand-ins into Ray's tracing helper module when it is loaded and has the expected
    shape; True if they are in place."""
    helper = sys.modules.get(TRACING_HELPER)
    if helper is None:
        return False
    if getattr(helper, "_function_hydrate_span_args", None) is function_hydrate_span_args:
        _replace_proxy(helper)
        return True
    reason = _shape_mismatch(helper, getattr(ray, "__version__", "?"))
    if reason is not None:
        logger.debug("ray_otel_events: Ray's tracing helpers left as they are: %s", reason)
        return False
    for name, replacement in _REPLACEMENTS.items():
        _originals[name] = getattr(helper, name)
        setattr(helper, name, replacement)
    _replace_proxy(helper)
    return True


def _replace_proxy(helper: ModuleType) -> None:
    """Ray sets a new proxy on every connect (before the hook runs); swap the live one."""
    if isinstance(getattr(helper, "_opentelemetry", None), helper._OpenTelemetryProxy):
        setattr(helper, "_opentelemetry", OpenTelemetryModules())  # noqa: B010


def uninstall() -> None:
    """Put Ray's own helpers back (bench/bench_ray_wrappers.py times both in one process)."""
    helper = sys.modules.get(TRACING_HELPER)
    if helper is None or not _originals:
        return
    for name, original in _originals.items():
        setattr(helper, name, original)
    if isinstance(getattr(helper, "_opentelemetry", None), OpenTelemetryModules):
        setattr(helper, "_opentelemetry", helper._OpenTelemetryProxy())  # noqa: B010
    _originals.clear()


def originals() -> Iterator[tuple[str, Any]]:
    """Ray's helpers as they were before `install`."""
    yield from _originals.items()
