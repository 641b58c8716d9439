"""The compiled helpers turned off: Python code run that way, and tests that need them skipped."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import settings

from ray_otel_events import config, native

# The child may run property tests (test_task_records.py's do), so it loads this run's hypothesis
# settings (tests/conftest.py: no per-example deadline) rather than hypothesis's defaults, whose
# 200 ms deadline can fail a correct example on a loaded machine.
_SETTINGS = (
    "from hypothesis import settings\n"
    "settings.register_profile('suite', deadline=None, max_examples={max_examples})\n"
    "settings.load_profile('suite')\n"
)


def run_pure_python(code: str) -> str:
    """`code`'s stdout, stripped, from `python -c` with RAY_OTEL_EVENTS_PURE_PYTHON=1 (and no other
    environment, so nothing else of this process leaks in)."""
    prelude = _SETTINGS.format(max_examples=settings.default.max_examples)
    out = subprocess.run(
        [sys.executable, "-c", prelude + code],
        env={"RAY_OTEL_EVENTS_PURE_PYTHON": "1", "PATH": "", **_import_path()},
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def _import_path() -> dict[str, str]:
    """PYTHONPATH as this process has it: the interpreter then imports the same package."""
    import os

    return {"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}


COMPILED_ONLY = f"{config.PURE_PYTHON}=1 runs the Python twins"
"""How the reason of every compiled-only skip ends: tests/conftest.py allows these skips, and only
these, with the compiled helpers off."""


def needs_compiled(built: object, what: str) -> pytest.MarkDecorator:
    """Skip a test that checks the compiled half of a twin: when the run turned the compiled helpers
    off (RAY_OTEL_EVENTS_PURE_PYTHON=1, the suite's second pass in CI, where the Python half runs
    everywhere instead), or when `built` (the module, or the twin's flag) says the build has none."""
    if not native.ENABLED:
        return pytest.mark.skip(reason=f"{what}: {COMPILED_ONLY}")
    return pytest.mark.skipif(not built, reason=f"{what} is not built (no C compiler or headers)")


def skip_unless_compiled(built: object, what: str) -> None:
    """needs_compiled inside a test, for a compiled half found only once the test has run a little."""
    if not native.ENABLED:
        pytest.skip(f"{what}: {COMPILED_ONLY}")
    if not built:
        pytest.skip(f"{what} is not built (no C compiler or headers)")
