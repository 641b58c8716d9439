"""Imports run one way: schema and codecs, then translation (otel/), then the pipeline's parts
(receivers, processors, exporters, the store...), then the services, then the commands.

A module may import from its own layer or a lower one, and the packages of one layer never import
each other in a circle. Every import in src/ counts, those inside functions and under TYPE_CHECKING
included: a lazy import against the order is still a dependency against it."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = "ray_otel_events"
ROOT = Path(__file__).resolve().parent.parent / "src" / PACKAGE

LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    (
        "schema and codecs",
        frozenset({"__init__", "protobuf", "native", "events", "config", "metrics", "encoding"}),
    ),
    ("translation", frozenset({"otel"})),
    ("the pipeline's shared parts", frozenset({"processors", "durable", "security", "observability"})),
    (
        "receivers, exporters and the other pipeline parts",
        frozenset({"receivers", "exporters", "store", "producer", "tracing", "collector"}),
    ),
    ("services", frozenset({"services"})),
    ("commands", frozenset({"__main__", "cli", "state_cli", "store_cli", "ray_env_cli", "demo", "executor"})),
)
RANK = {unit: rank for rank, (_, units) in enumerate(LAYERS) for unit in units}


def unit_of(module: str) -> str | None:
    """The top-level package or module of the package that `module` (dotted) lies in; a name
    imported from the package itself (`from ray_otel_events import __version__`) is its __init__."""
    parts = module.split(".")
    if parts[0] != PACKAGE:
        return None
    if len(parts) == 1 or not ((ROOT / parts[1]).is_dir() or (ROOT / f"{parts[1]}.py").is_file()):
        return "__init__"
    return parts[1]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, module: str, is_package: bool = False) -> Iterator[tuple[int, str]]:
    """(line, dotted module or name) of every import in `source`, the text of `module`, with
    relative imports resolved."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                name = f"{base}.{node.module}" if node.module else base
            else:
                name = node.module or ""
            for alias in node.names:  # `from package import name` may name a submodule
                yield node.lineno, f"{name}.{alias.name}" if name == PACKAGE else name


def package_imports() -> list[tuple[str, str, str]]:
    """(importing unit, imported unit, where) for every import between two units of the package."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        source = unit_of(module_name(path))
        assert source is not None
        imports = imported_modules(path.read_text(), module_name(path), path.name == "__init__.py")
        for line, module in imports:
            target = unit_of(module)
            if target is not None and target != source:
                found.append((source, target, f"{path.relative_to(ROOT.parent)}:{line} imports {module}"))
    return found


def test_every_package_has_a_layer() -> None:
    units = {unit_of(module_name(path)) for path in ROOT.rglob("*.py")}
    assert units - RANK.keys() == set(), "place each new package in LAYERS"


def test_no_module_imports_from_a_higher_layer() -> None:
    upward = [
        f"{where} ({LAYERS[RANK[source]][0]} -> {LAYERS[RANK[target]][0]})"
        for source, target, where in package_imports()
        if RANK[target] > RANK[source]
    ]
    assert upward == []


def test_no_circle_between_the_packages_of_one_layer() -> None:
    edges: dict[str, set[str]] = {}
    for source, target, _ in package_imports():
        if RANK[source] == RANK[target]:
            edges.setdefault(source, set()).add(target)

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in edges.get(start, ()):
            if nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})):
                return True
        return False

    circles = sorted(
        f"{a} -> {b} -> ... -> {a}" for a, targets in edges.items() for b in targets if reaches(b, a, {b})
    )
    assert circles == []


def test_the_check_sees_imports_of_every_form() -> None:
    """Relative imports, `from package import module`, and imports inside functions all count."""
    source = (
        "from ray_otel_events import config, __version__\n"
        "import ray_otel_events.native\n"
        "def read():\n"
        "    from ..receivers import http_body\n"
        "    from . import semconv\n"
    )
    modules = [module for _, module in imported_modules(source, "ray_otel_events.otel.posted_events")]
    assert modules == [
        "ray_otel_events.config",
        "ray_otel_events.__version__",
        "ray_otel_events.native",
        "ray_otel_events.receivers",
        "ray_otel_events.otel",
    ]
    assert [unit_of(m) for m in modules] == ["config", "__init__", "native", "receivers", "otel"]
    assert RANK["receivers"] > RANK["otel"]  # so the lazy import above is refused
