"""`make sanitize`: the compiled helpers' tests (each compares a compiled module with its Python
twin) run against the sanitized build, ASan and UBSan stopping at the first report.

Usage: python fuzz/sanitize.py [pytest arguments]"""

from __future__ import annotations

import subprocess
import sys

from environment import ROOT, SANITIZED, clang_runtime, sanitized_env

TESTS = [
    "tests/test_compiled_helpers.py",
    "tests/test_entity_spans.py",
    "tests/test_posted_events.py",
    "tests/test_store_posted_fold.py",
    "tests/test_log_events.py",
    "tests/test_json_lexer.py",
    "tests/test_otlp_wire.py",
    "tests/test_ray_json.py",
    "tests/test_bridge_ray_json_decode.py",
]

# Run first, in the same environment: the tests must see the sanitized modules, not the source
# tree's (a quiet fallback to either would pass without testing anything).
CHECK = (
    "import pathlib, sys\n"
    "from ray_otel_events.native import _posted_events, _post_fold, _entity_spans\n"
    "for m in (_posted_events, _post_fold, _entity_spans):\n"
    f"    assert pathlib.Path(m.__file__).is_relative_to({str(SANITIZED)!r}), m.__file__\n"
)


def main() -> int:
    env = sanitized_env(clang_runtime())
    subprocess.run([sys.executable, "-c", CHECK], cwd=ROOT, env=env, check=True)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS, *sys.argv[1:]]
    return subprocess.run(command, cwd=ROOT, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
