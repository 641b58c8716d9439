"""Python code run in a fresh interpreter with the compiled helpers turned off."""

from __future__ import annotations

import subprocess
import sys


def run_pure_python(code: str) -> str:
    """`code`'s stdout, stripped, from `python -c` with RAY_OTEL_EVENTS_PURE_PYTHON=1 (and no other
    environment, so nothing else of this process leaks in)."""
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={"RAY_OTEL_EVENTS_PURE_PYTHON": "1", "PATH": ""},
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()
