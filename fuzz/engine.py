"""What every harness shares: `main` runs one under atheris (libFuzzer driving Python, the compiled
modules' coverage read from their -fsanitize=fuzzer-no-link counters), or writes its seeds.

A harness is `check(data)`: it feeds `data` to a compiled entry point and to its Python twin and
returns when both give the same answer (the same output, or both refuse); anything else it raises
(AssertionError for a difference, any other exception for a path that failed where it must answer),
and the engine records the input as a finding. A sanitizer report stops the process the same way."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

Check = Callable[[bytes], None]


class ReadWhatUpbRefuses(AssertionError):
    """A compiled reader answered where upb refuses the bytes `wire`."""

    def __init__(self, wire: bytes) -> None:
        super().__init__(f"the compiled reader read bytes upb refuses: {wire.hex()}")
        self.wire = wire


class RefusedWhatUpbReads(AssertionError):
    """A compiled reader refused bytes upb reads."""


_NAN = object()


def _nan_free(value: object) -> object:
    """`value` with every NaN replaced by one marker: NaN never equals itself, so two readers that
    both read a NaN double would otherwise differ."""
    if isinstance(value, float) and math.isnan(value):
        return _NAN
    if isinstance(value, dict):
        return {key: _nan_free(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_nan_free(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_nan_free(item) for item in value)
    return value


def same(a: object, b: object) -> bool:
    """`a == b`, with a NaN equal to a NaN."""
    return _nan_free(a) == _nan_free(b)


def write_seeds(seeds: Iterable[bytes], directory: Path) -> int:
    """The seeds as files seed-NNNNN in `directory` (the engine's starting corpus)."""
    directory.mkdir(parents=True, exist_ok=True)
    unique = list(dict.fromkeys(seeds))
    for number, seed in enumerate(unique):
        (directory / f"seed-{number:05d}").write_bytes(seed)
    return len(unique)


def main(check: Check, seeds: Callable[[], Iterable[bytes]]) -> None:
    """The arguments are libFuzzer's (corpus directories to fuzz from, whose inputs run first, or
    files to run once each), and `--seeds=DIR`: write the seeds into DIR first."""
    argv = []
    for arg in sys.argv:
        if arg.startswith("--seeds="):
            print(f"seeds: {write_seeds(seeds(), Path(arg.removeprefix('--seeds=')))}", flush=True)
        else:
            argv.append(arg)
    import atheris

    atheris.Setup(argv, check)
    atheris.Fuzz()
