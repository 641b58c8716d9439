"""`ray-otel-events spans`: trees from Ray's span files and ours, filters, Chrome trace JSON, errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from helpers.tracing_procs import LOCAL_HOOK, run_pool, script_env

FIXTURES = Path(__file__).parent / "fixtures" / "ray-2.60-spans"
MAIN_TRACE = "00b4c11a968dbd45675c7ab0b6dd8116"


def spans_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ray_otel_events", "spans", *args], capture_output=True, text=True, timeout=60
    )


def tree_lines(output: str) -> list[tuple[int, str]]:
    """(depth, text) of each span line."""
    return [
        ((len(line) - len(line.lstrip())) // 2 - 1, line.strip())
        for line in output.splitlines()
        if line.startswith("  ")
    ]


def test_rays_files_become_trees_with_cross_process_links() -> None:
    out = spans_cli(str(FIXTURES))
    assert out.returncode == 0, out.stderr
    traces = [line for line in out.stdout.splitlines() if line.startswith("trace ")]
    assert [t.split()[1] for t in traces] == [f"0x{MAIN_TRACE}", "0x69e2fd89949a14eedf39579c27a21117"]
    assert traces[0].startswith(f"trace 0x{MAIN_TRACE}  15 spans, 3 processes, ")
    lines = tree_lines(out.stdout)
    assert lines[0][0] == 0 and lines[0][1].startswith("[INTERNAL] driver-root  ")
    texts = [text for _, text in lines]
    mid = next(i for i, t in enumerate(texts) if t.startswith("[PRODUCER] __main__.mid ray.remote "))
    assert lines[mid][0] == 1
    assert lines[mid + 1][0] == 2 and texts[mid + 1].startswith("[CONSUMER] __main__.mid ray.remote_worker ")
    assert texts[mid + 1].endswith("UNSET  pid=12464")
    assert lines[mid + 2][0] == 3 and texts[mid + 2].startswith("[PRODUCER] __main__.leaf ray.remote ")
    boom = next(t for t in texts if t.startswith("[CONSUMER] __main__.boom"))
    assert "ERROR (ValueError: traced failure)  pid=12464" in boom
    init = next(i for i, t in enumerate(texts) if t.startswith("[PRODUCER] Acc.__init__ ray.remote "))
    assert (
        texts[init + 1].startswith("[CONSUMER] Acc.__init__ ray.remote_worker ") and lines[init + 1][0] == 2
    )
    assert texts[init + 1].endswith("pid=12538")
    assert (
        sum(t.startswith("[CONSUMER]") for t in texts) == 7
    )  # leaf, mid, boom, Acc x3 (first trace), leaf (second)
    assert out.stderr == ""


def test_filters_by_trace_prefix_and_name() -> None:
    only = spans_cli(str(FIXTURES), "--trace", "0x69E2FD")
    assert only.returncode == 0
    assert [line for line in only.stdout.splitlines() if line.startswith("trace ")] == [
        "trace 0x69e2fd89949a14eedf39579c27a21117  2 spans, 2 processes, "
        + only.stdout.split(", ")[2].split("\n")[0]
    ]
    named = spans_cli(str(FIXTURES), "--name", "Acc.add")
    assert named.returncode == 0 and named.stdout.count("trace 0x") == 1 and MAIN_TRACE in named.stdout
    none = spans_cli(str(FIXTURES), "--name", "no-such-span")
    assert (
        none.returncode == 1 and "no matching trace" in none.stderr and "17 spans in 3 files" in none.stderr
    )
    bad = spans_cli(str(FIXTURES), "--trace", "xyz")
    assert bad.returncode == 2 and "not a hex trace id" in bad.stderr


def test_chrome_trace_json(tmp_path: Path) -> None:
    target = tmp_path / "trace.json"
    out = spans_cli(str(FIXTURES), "--trace", MAIN_TRACE, "--chrome", str(target))
    assert out.returncode == 0, out.stderr
    doc = json.loads(target.read_text())
    events = doc["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    assert len(slices) == 15
    for e in slices:
        assert (
            isinstance(e["ts"], float)
            and e["dur"] >= 0
            and isinstance(e["pid"], int)
            and isinstance(e["tid"], int)
        )
        assert e["args"]["trace_id"] == f"0x{MAIN_TRACE}"
    names = {e["args"]["name"] for e in events if e["ph"] == "M"}
    assert {"pid 12444", "pid 12464", "pid 12538"} <= names
    starts = [e for e in events if e["ph"] == "s"]
    finishes = [e for e in events if e["ph"] == "f"]
    # A flow to every span from its parent in another process: the 6 CONSUMER spans whose parent
    # is in the files (the nested leaf ran in a worker whose file was not kept).
    assert len(starts) == len(finishes) == 6
    assert {e["id"] for e in starts} == {e["id"] for e in finishes}
    # Slices on one track nest properly (what Perfetto needs to draw them).
    tracks: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for e in slices:
        tracks.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for intervals in tracks.values():
        intervals.sort(key=lambda i: (i[0], -i[1]))
        stack: list[float] = []
        for start, end in intervals:
            while stack and stack[-1] <= start:
                stack.pop()
            assert not stack or end <= stack[-1], "overlapping slices on one track"
            stack.append(end)


def test_our_files_and_rays_together_and_bad_lines(tmp_path: Path) -> None:
    spans = tmp_path / "spans"
    summary, _ = run_pool(
        {"hook": LOCAL_HOOK, "tasks": 2, "custom": True, "max_workers": 2}, script_env(spans)
    )
    for name in ("12444.txt", "12464.txt"):
        shutil.copy(FIXTURES / name, spans / name)
    (spans / "99.txt").write_text('not json\n{"name": "no context"}\n')
    out = spans_cli(str(spans), "--name", "with_custom_spans")
    assert out.returncode == 0
    assert "skipped 2 unreadable line(s); first: " in out.stderr and "99.txt:1: not JSON" in out.stderr
    texts = [t for _, t in tree_lines(out.stdout)]
    assert [t.split("  ")[0] for t in texts] == [
        "[PRODUCER] tracing_workload.with_custom_spans ray.remote",
        "[CONSUMER] tracing_workload.with_custom_spans ray.remote_worker",
        "[INTERNAL] custom-outer",
        "[INTERNAL] custom-inner",
    ]
    assert texts[0].endswith(f"pid={summary['pid']}") and texts[3].endswith(f"pid={summary['custom']['pid']}")
    everything = spans_cli(str(spans))
    assert everything.returncode == 0 and f"0x{MAIN_TRACE}" in everything.stdout


def test_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    out = spans_cli(str(tmp_path / "absent"))
    assert out.returncode == 2
    assert "no such file or folder" in out.stderr and "Traceback" not in out.stderr


def test_largest_trace_tree_for_a_demo(tmp_path: Path) -> None:
    from ray_otel_events.tracing.span_files import largest_trace_tree

    tree = largest_trace_tree(FIXTURES)
    assert tree.startswith(f"trace 0x{MAIN_TRACE}  15 spans") and "driver-root" in tree
    assert largest_trace_tree(FIXTURES, name="no-such-span") == ""
