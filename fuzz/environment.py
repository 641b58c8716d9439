"""The environment the sanitized package runs in: its modules first on the path, the sanitizers'
runtime preloaded (CPython itself is not instrumented, so it must come first), CPython's own
allocator off so that ASan sees every object's memory, and UBSan stopping at the first report."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SANITIZED = ROOT / "build" / "sanitized"

ASAN_OPTIONS = ":".join(
    [
        "detect_leaks=0",  # CPython keeps its interned and cached objects to the end: no leak check
        "allocator_may_return_null=1",  # a huge allocation is Python's MemoryError, not a report
        "abort_on_error=0",
        "print_summary=1",
    ]
)
UBSAN_OPTIONS = "halt_on_error=1:print_stacktrace=1"


def clang_runtime() -> str:
    """clang's ASan runtime (UBSan's handlers included)."""
    path = subprocess.run(
        ["clang", "-print-file-name=libclang_rt.asan-x86_64.so"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if not Path(path).is_file():
        raise SystemExit("clang's ASan runtime is missing: run scripts/ensure_clang.sh")
    return path


def sanitized_env(runtime: str) -> dict[str, str]:
    """os.environ with the sanitized package first and `runtime` preloaded."""
    env = dict(os.environ)
    env.pop("RAY_OTEL_EVENTS_PURE_PYTHON", None)
    env.update(
        PYTHONPATH=os.pathsep.join([str(SANITIZED), str(ROOT)]),
        LD_PRELOAD=runtime,
        PYTHONMALLOC="malloc",
        ASAN_OPTIONS=ASAN_OPTIONS,
        UBSAN_OPTIONS=UBSAN_OPTIONS,
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env
