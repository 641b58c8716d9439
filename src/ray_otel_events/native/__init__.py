"""The compiled helpers: C twins of Python code in encoding/, otel/ and store/ (docs/native.md).

Each module is optional; its Python twin imports it when built and runs the same logic otherwise."""

from collections.abc import Mapping
from types import ModuleType
from typing import Final

from ray_otel_events import config

ENABLED: Final[bool] = config.compiled_enabled()
"""Whether the twins may use the built modules. Read here once, when the first twin is imported,
so every twin decides the same way at its own import and no call asks the environment."""


def check_numbers(module: ModuleType, numbers: Mapping[str, int]) -> None:
    """Refuse a built module whose numbers shared with Python (the kinds, labels or field numbers
    of a header, which it exports under their C names) are not `numbers`: it was built from other
    sources, and would misread everything it is given."""
    found = {name: getattr(module, name, None) for name in numbers}
    wrong = sorted(name for name, number in numbers.items() if found[name] != number)
    if wrong:
        raise ImportError(f"{module.__name__} numbers these otherwise: {', '.join(wrong)}")
