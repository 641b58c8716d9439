"""`make bench`: run every bench/bench_*.py and collect their sections into bench/RESULTS.md.

Each bench script prints one Markdown section (with its own command and figures) on stdout. This
runner adds when and where they ran, so figures are never quoted without their machine.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
ORDER = [
    "encoder",
    "aggregator",
    "production",
    "tracing",
    "lineage",
    "ray_wrappers",
    "bridge",
    "store",
    "soak",
]


def _machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kb / 1024 / 1024:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    return f"{cpu}, {os.cpu_count()} cores{mem}, {platform.system()} {platform.release()}"


def _versions() -> str:
    names = ["protobuf", "grpcio", "orjson", "aiohttp", "opentelemetry-sdk", "ray"]
    found = []
    for name in names:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name} (not installed)")
    return ", ".join(found)


def replace_sections(results: str, sections: list[str]) -> str:
    """RESULTS.md with each of `sections` in place of the section under the same heading (appended
    when it has none yet), the others and the header kept: `--only` re-runs a bench without
    dropping the figures of the benches it did not run."""
    for section in sections:
        heading = section.split("\n", 1)[0]
        start = results.find("\n" + heading + "\n")
        if start < 0:
            results = results.rstrip("\n") + "\n\n" + section
            continue
        end = results.find("\n## ", start + 1)
        results = results[: start + 1] + section + ("" if end < 0 else "\n" + results[end + 1 :])
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small runs, for a sanity check only")
    parser.add_argument(
        "--only",
        action="append",
        help="run only these benches (e.g. --only encoder); their sections replace theirs in RESULTS.md",
    )
    args = parser.parse_args()
    scripts = sorted(
        HERE.glob("bench_*.py"),
        key=lambda p: (ORDER.index(p.stem[6:]) if p.stem[6:] in ORDER else 99, p.name),
    )
    if args.only:
        scripts = [s for s in scripts if s.stem[6:] in args.only]
    sections = []
    failed = []
    for script in scripts:
        cmd = [sys.executable, str(script.relative_to(HERE.parent))] + (["--quick"] if args.quick else [])
        print(f"running {' '.join(cmd)}", flush=True)
        proc = subprocess.run(cmd, cwd=HERE.parent, capture_output=True, text=True)
        if proc.returncode != 0:
            failed.append(script.name)
            sections.append(
                f"## {script.stem}\n\nFAILED (exit {proc.returncode}):\n\n```\n{proc.stderr[-3000:]}\n```\n"
            )
        else:
            sections.append(proc.stdout.strip() + "\n")
        print(sections[-1])
    header = [
        "# Benchmark results",
        "",
        f"- Command: `make bench` (= `python bench/run_all.py{' --quick' if args.quick else ''}`)",
        f"- Run at: {datetime.datetime.now(datetime.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- Machine: {_machine()}",
        f"- Python {platform.python_version()}; {_versions()}",
        "- Earlier runs, and what each change measured or was tried and not kept: `bench/HISTORY.md`",
        "",
    ]
    out = HERE / "RESULTS.md"
    if args.only and out.exists():
        out.write_text(replace_sections(out.read_text(), sections))
    else:
        out.write_text("\n".join(header) + "\n" + "\n".join(sections))
    print(f"wrote {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
