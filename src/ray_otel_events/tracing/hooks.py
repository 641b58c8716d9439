"""Loading and running a tracing startup hook given as `"package.module:attr.sub"`.

Ray resolves the same string form and calls it with no arguments once per process; if anything goes
wrong the worker dies. Here every failure is a `HookError` subclass whose message names the hook and
the cause, and `run_hook_once` reports a failure once per process and carries on, so a broken hook
costs tracing, never the tasks.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from collections.abc import Callable

logger = logging.getLogger("ray_otel_events.tracing")


class HookError(Exception):
    """A startup hook that could not be loaded or that failed; `hook` is the string given."""

    def __init__(self, hook: str, cause: str) -> None:
        super().__init__(f"tracing startup hook {hook!r}: {cause}")
        self.hook = hook
        self.cause = cause

    def __reduce__(self) -> tuple[type[HookError], tuple[str, str]]:
        return (type(self), (self.hook, self.cause))


class HookSpecError(HookError):
    """The string is not of the form `module:attribute`."""


class HookModuleNotFound(HookError):
    """The module part cannot be imported because it does not exist."""


class HookImportFailed(HookError):
    """The module exists but importing it raised."""


class HookAttributeNotFound(HookError):
    """The module has no such (dotted) attribute."""


class HookNotCallable(HookError):
    """The attribute exists but cannot be called."""


class HookFailed(HookError):
    """Calling the hook raised."""


def load_hook(spec: str) -> Callable[[], object]:
    """Resolve `"module:attr.sub"` to the callable it names, or raise a HookError saying why."""
    if not isinstance(spec, str):
        raise HookSpecError(repr(spec), f"expected a string 'module:attribute', got {type(spec).__name__}")
    module_name, sep, attr_path = spec.strip().partition(":")
    if not sep or not module_name or not attr_path or any(not part for part in attr_path.split(".")):
        raise HookSpecError(spec, "expected the form 'package.module:attribute' (e.g. 'mypkg.tracing:setup')")
    try:
        target: object = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise HookModuleNotFound(spec, f"no module named {exc.name!r}") from None
        raise HookImportFailed(spec, f"importing {module_name!r} failed: {exc!r}") from exc
    except Exception as exc:
        raise HookImportFailed(spec, f"importing {module_name!r} failed: {exc!r}") from exc
    walked = module_name
    for part in attr_path.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise HookAttributeNotFound(spec, f"{walked!r} has no attribute {part!r}") from None
        walked = f"{walked}.{part}" if walked != module_name else f"{module_name}:{part}"
    if not callable(target):
        raise HookNotCallable(spec, f"{attr_path!r} is a {type(target).__name__}, not callable")
    return target


def call_hook(spec: str) -> None:
    """Load and call the hook with no arguments; every failure becomes a HookError."""
    hook = load_hook(spec)
    try:
        hook()
    except Exception as exc:
        raise HookFailed(spec, f"raised {type(exc).__name__}: {exc}") from exc


_lock = threading.Lock()
_outcomes: dict[tuple[int, str], HookError | None] = {}


def run_hook_once(spec: str, *, raise_errors: bool = False) -> HookError | None:
    """Call the hook unless this process already did; return (and report once) its failure.

    "Once" is per process id, so a forked child runs its hook again, as a new Ray worker would.
    With `raise_errors=False` a failure is logged once (stderr when logging is not configured) and
    returned; the caller keeps running without tracing.
    """
    key = (os.getpid(), spec)
    with _lock:
        if key in _outcomes:
            outcome = _outcomes[key]
            if outcome is not None and raise_errors:
                raise outcome
            return outcome
        try:
            call_hook(spec)
            error: HookError | None = None
        except HookError as exc:
            error = exc
        _outcomes[key] = error
    if error is not None:
        if raise_errors:
            raise error
        logger.error("%s (pid %d); continuing without it", error, os.getpid())
    return error
