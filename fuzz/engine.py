"""What every harness shares: `main` runs one under atheris (libFuzzer driving Python, the compiled
modules' coverage read from their -fsanitize=fuzzer-no-link counters), or writes its seeds.

A harness is `check(data)`: it feeds `data` to a compiled entry point and to its Python twin and
returns when both give the same answer (the same output, or both refuse); anything else it raises
(AssertionError for a difference, any other exception for a path that failed where it must answer),
and the engine records the input as a finding. A sanitizer report stops the process the same way."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from known import Known

Check = Callable[[bytes], None]


def write_seeds(seeds: Iterable[bytes], directory: Path) -> int:
    """The seeds as files seed-NNNNN in `directory` (the engine's starting corpus)."""
    directory.mkdir(parents=True, exist_ok=True)
    unique = list(dict.fromkeys(seeds))
    for number, seed in enumerate(unique):
        (directory / f"seed-{number:05d}").write_bytes(seed)
    return len(unique)


def guarded(check: Check, known: Sequence[Known]) -> Check:
    """`check`, skipping the inputs that show a known defect (known.py), each defect named on
    stderr the first time (the run's summary lists them)."""
    skipped: set[str] = set()

    def skip(defect: str) -> None:
        if defect not in skipped:
            skipped.add(defect)
            print(f"KNOWN DEFECT (input skipped): {defect}", file=sys.stderr, flush=True)

    def run(data: bytes) -> None:
        crash = next((k.defect for k in known if k.crashes is not None and k.crashes(data)), None)
        if crash is not None:
            skip(crash)
            return
        try:
            check(data)
        except Exception as exc:
            defect = next((k.defect for k in known if k.shows(data, exc)), None)
            if defect is None:
                raise
            skip(defect)

    return run


def main(check: Check, seeds: Callable[[], Iterable[bytes]], known: Sequence[Known] = ()) -> None:
    """The arguments are libFuzzer's (corpus directories to fuzz from, whose inputs run first, or
    files to run once each), and `--seeds=DIR`: write the seeds into DIR first. `known`: the
    defects whose inputs are skipped until they are fixed."""
    argv = []
    for arg in sys.argv:
        if arg.startswith("--seeds="):
            print(f"seeds: {write_seeds(seeds(), Path(arg.removeprefix('--seeds=')))}", flush=True)
        else:
            argv.append(arg)
    import atheris

    atheris.Setup(argv, guarded(check, known))
    atheris.Fuzz()
