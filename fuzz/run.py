"""`make fuzz`: every harness (fuzz/fuzz_*.py) against the sanitized build, for FUZZ_SECONDS each.

For each harness: its seeds are written from tests/fixtures into build/fuzz/corpus/NAME (kept
between runs, so a later run starts where the last left off), that corpus and its saved regressions
(fuzz/regressions/NAME/*) run first, then atheris fuzzes it. Any crash, sanitizer report or
difference between the compiled and the Python answer is a finding: its input is saved under
build/fuzz/findings/NAME/ and the run exits non-zero. Prints the executions of each harness.

Usage: python fuzz/run.py [--seconds N] [--jobs N] [NAME ...]"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from environment import ROOT, sanitized_env

HERE = Path(__file__).resolve().parent
WORK = ROOT / "build" / "fuzz"
REGRESSIONS = HERE / "regressions"


@dataclass
class Result:
    name: str
    seeds: int = 0
    regressions: int = 0
    executions: int = 0
    seconds: float = 0.0
    finding: str = ""  # what went wrong, "" when nothing did


def harnesses() -> list[str]:
    return sorted(p.stem.removeprefix("fuzz_") for p in HERE.glob("fuzz_*.py"))


def atheris_runtime() -> str:
    """atheris' ASan runtime with libFuzzer in it: the compiled modules' coverage counters reach
    the engine through it."""
    import atheris

    path = Path(atheris.path()) / "asan_with_fuzzer.so"
    if not path.is_file():
        raise SystemExit(f"{path} is missing: reinstall atheris")
    return str(path)


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _report(text: str) -> str:
    """The part of a harness's output that says what went wrong: the Python traceback, or the
    sanitizer's report."""
    lines = text.splitlines()
    for marker in (
        "=== Uncaught Python exception",
        "ERROR: AddressSanitizer",
        "runtime error:",
        "ERROR: libFuzzer",
    ):
        start = next((i for i, line in enumerate(lines) if marker in line), None)
        if start is not None:
            return "\n".join(lines[start : start + 30])
    return _tail(text)


def fuzz_one(name: str, seconds: int, env: dict[str, str], seed: int) -> Result:
    """One process: the seeds written, the corpus (seeds and what earlier runs added) and the saved
    regressions run first, then fuzzing until `seconds` have passed."""
    result = Result(name)
    corpus, findings = WORK / "corpus" / name, WORK / "findings" / name
    findings.mkdir(parents=True, exist_ok=True)
    saved = REGRESSIONS / name
    result.regressions = sum(1 for p in saved.glob("*") if p.is_file())
    log = WORK / f"{name}.log"
    started = time.monotonic()
    run = subprocess.run(
        [
            sys.executable,
            str(HERE / f"fuzz_{name}.py"),
            f"--seeds={corpus}",
            f"-max_total_time={seconds}",
            *([f"-seed={seed}"] if seed else []),  # libFuzzer's own choice when 0
            "-print_final_stats=1",
            "-timeout=25",  # seconds one input may take, sanitizers and all
            "-rss_limit_mb=4096",
            f"-artifact_prefix={findings}/",
            str(corpus),
            *([str(saved)] if result.regressions else []),
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    result.seconds = time.monotonic() - started
    log.write_text(run.stdout + run.stderr)
    seeded = re.search(r"^seeds: (\d+)", run.stdout, re.MULTILINE)
    result.seeds = int(seeded.group(1)) if seeded else 0
    executed = re.search(r"stat::number_of_executed_units: (\d+)", run.stderr)
    result.executions = int(executed.group(1)) if executed else 0
    if run.returncode:
        result.finding = f"exit {run.returncode} (log: {log}, input in {findings}):\n" + _report(
            run.stdout + run.stderr
        )
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=int(os.environ.get("FUZZ_SECONDS", "60")))
    parser.add_argument(
        "--jobs", type=int, default=int(os.environ.get("FUZZ_JOBS", "0")) or os.cpu_count() or 1
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=int(os.environ.get("FUZZ_SEED", "0")),
        help="libFuzzer's random seed (0: a new one each run); CI fixes it, so a finding there replays here",
    )
    parser.add_argument("names", nargs="*", help=f"harnesses to run (default all: {', '.join(harnesses())})")
    args = parser.parse_args()
    names = args.names or harnesses()
    unknown = sorted(set(names) - set(harnesses()))
    if unknown:
        parser.error(f"no such harness: {', '.join(unknown)}")
    env = sanitized_env(atheris_runtime())
    print(f"fuzzing {len(names)} harnesses for {args.seconds} s each, {args.jobs} at a time", flush=True)
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = []
        for result in pool.map(lambda name: fuzz_one(name, args.seconds, env, args.seed), names):
            status = "FINDING" if result.finding else "ok"
            print(
                f"{result.name:18} {status:8} {result.executions:>9} executions in {result.seconds:5.1f} s"
                f" ({result.seeds} seeds, {result.regressions} regressions)",
                flush=True,
            )
            results.append(result)
    found = [r for r in results if r.finding]
    for result in found:
        print(f"\n== {result.name}: {result.finding}", file=sys.stderr)
    total = sum(r.executions for r in results)
    print(f"{total} executions, {len(found)} harnesses with findings")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
