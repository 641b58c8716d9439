"""`make sanitize`: the compiled helpers' tests (each compares a compiled module with its Python
twin) run against the sanitized build, ASan and UBSan stopping at the first report; one pytest
process a module, SANITIZE_JOBS (default: the cores) at a time.

Usage: python fuzz/sanitize.py [pytest arguments]"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed

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
    "tests/test_spool_lines.py",
    "tests/test_spool_line.py",
    "tests/test_tracing_span_json.py",
]

# Run first, in the same environment: the tests must see the sanitized modules, not the source
# tree's (a quiet fallback to either would pass without testing anything).
CHECK = (
    "import pathlib, sys\n"
    "from ray_otel_events.native import _posted_events, _post_fold, _entity_spans\n"
    "for m in (_posted_events, _post_fold, _entity_spans):\n"
    f"    assert pathlib.Path(m.__file__).is_relative_to({str(SANITIZED)!r}), m.__file__\n"
)


def _run(test: str, env: dict[str, str], extra: list[str]) -> tuple[str, int, str]:
    # --capture=sys: a sanitizer writes its report to file descriptor 2 and stops the process, and
    # pytest's default capture of that descriptor would lose it.
    command = [sys.executable, "-m", "pytest", "-q", "--capture=sys", "-p", "no:cacheprovider", test, *extra]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    return test, done.returncode, done.stdout + done.stderr


def main() -> int:
    env = sanitized_env(clang_runtime())
    env["HYPOTHESIS_PROFILE"] = "sanitized"  # a tenth of the examples (tests/conftest.py)
    subprocess.run([sys.executable, "-c", CHECK], cwd=ROOT, env=env, check=True)
    jobs = int(os.environ.get("SANITIZE_JOBS", "0")) or os.cpu_count() or 1
    print(f"{len(TESTS)} test modules against the sanitized build, {jobs} at a time", flush=True)
    failed = 0
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        runs = [pool.submit(_run, test, env, sys.argv[1:]) for test in TESTS]
        for done in as_completed(runs):
            test, code, output = done.result()
            lines = output.strip().splitlines()
            print(f"{test}: {lines[-1] if lines else f'exit {code}'}", flush=True)
            if code:
                failed += 1
                print(output, file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
