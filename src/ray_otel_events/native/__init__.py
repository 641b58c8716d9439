"""The compiled helpers: C twins of Python code in encoding/, otel/ and store/ (docs/native.md).

Each module is optional; its Python twin imports it when built and runs the same logic otherwise."""

from typing import Final

from ray_otel_events import config

ENABLED: Final[bool] = config.compiled_enabled()
"""Whether the twins may use the built modules. Read here once, when the first twin is imported,
so every twin decides the same way at its own import and no call asks the environment."""

