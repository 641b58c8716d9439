"""Builds the package with every compiled helper under AddressSanitizer and UBSan into
build/sanitized/ (never the source tree's modules, which the normal suite imports).

The Python files are copied beside the sanitized modules so that `PYTHONPATH=build/sanitized`
imports a whole package; the copy is refreshed on every build. clang compiles with -Werror and the
warnings setup.py asks for, so a new warning fails `make sanitize` and `make fuzz`. The modules are
also instrumented for libFuzzer's coverage (-fsanitize=fuzzer-no-link), which the fuzzing engine
reads and the plain ASan runtime ignores."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "build" / "sanitized"
PACKAGE = ROOT / "src" / "ray_otel_events"
NATIVE = PACKAGE / "native"

FLAGS = [
    "-O1",
    "-g",
    "-fno-omit-frame-pointer",
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=undefined",
    "-fsanitize=fuzzer-no-link",
    "-Werror",
]


def _copy_python() -> None:
    """The package's Python files (not its compiled modules) under build/sanitized/."""
    target = OUT / "ray_otel_events"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(PACKAGE, target, ignore=shutil.ignore_patterns("*.so", "*.c", "*.h", "__pycache__"))


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    _copy_python()
    env = dict(
        os.environ,
        CC="clang",
        LDSHARED="clang -shared",
        CFLAGS=" ".join(FLAGS),
        LDFLAGS="-fsanitize=address,undefined",
    )
    command = [
        sys.executable,
        "setup.py",
        "-q",
        "build_ext",
        "--force",
        "--build-lib",
        str(OUT),
        "--build-temp",
        str(OUT / "objects"),
    ]
    subprocess.run(command, cwd=ROOT, env=env, check=True)
    # setup.py's modules are optional (a user without a compiler still installs): here each must
    # have built, or a warning or missing header would pass unseen.
    wanted = sorted(p.stem for p in NATIVE.glob("_*.c"))
    built = {p.name.split(".")[0] for p in (OUT / "ray_otel_events" / "native").glob("_*.so")}
    missing = [m for m in wanted if m not in built]
    if missing:
        print(
            f"sanitized build: not built: {', '.join(missing)} (see the compiler's output above)",
            file=sys.stderr,
        )
        return 1
    print(f"sanitized build: {len(wanted)} modules in {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
