"""The compiled helpers setup.py lists, and which of them did not build (the Makefile's build-deps
and tests/test_native_layer.py ask)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_LISTS = ("NATIVE_MODULES", "SQLITE_MODULES", "ZLIB_MODULES")


def setup_modules() -> list[str]:
    """NATIVE_MODULES, SQLITE_MODULES and ZLIB_MODULES, read from setup.py's text (running it would build)."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    found: dict[str, tuple[str, ...]] = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        if isinstance(target, ast.Name) and target.id in _LISTS:
            found[target.id] = ast.literal_eval(node.value)  # type: ignore[attr-defined]
    assert set(found) == set(_LISTS), f"setup.py should assign {', '.join(_LISTS)}"
    return [module for name in _LISTS for module in found[name]]


def build_problem(name: str) -> str | None:
    """Why `ray_otel_events.native.<name>` is not built from its sources as they are (it does not
    import, or a build that failed left an older one in place), or None when it is."""
    try:
        module = importlib.import_module(f"ray_otel_events.native.{name}")
    except ImportError as error:
        return f"native/{name}.c is not built (see `make venv`'s compiler output): {error}"
    built = Path(str(module.__file__)).stat().st_mtime
    native = ROOT / "src" / "ray_otel_events" / "native"
    newer = [p.name for p in (native / f"{name}.c", *native.glob("*.h")) if p.stat().st_mtime > built]
    if newer:
        changed = ", ".join(sorted(newer))
        return f"native/{name}.c's module is older than {changed}: its build failed, or ran before them"
    return None


def missing() -> list[str]:
    """The modules setup.py lists that are not built from their sources as they are."""
    return [name for name in setup_modules() if build_problem(name) is not None]


if __name__ == "__main__":
    print(" ".join(missing()))
