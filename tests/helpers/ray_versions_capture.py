"""Records one Ray release's fixtures: a live head of it (its own venv) runs the matrix workload
while its aggregator exports to our `sink`, which keeps every event POSTed; the live cluster's
`ray list tasks --detail`, `ray list actors` and `ray list jobs` answers are kept beside them as
the expected values.

    python tests/helpers/ray_versions_capture.py VERSION [--venvs build/ray-versions]

writes tests/fixtures/ray-versions/VERSION/{events.jsonl,tasks.json,actors.json,jobs.json} and
capture.json (the counts, and whether the cluster's GCS gave up on its exporter agent: then the
recording has no actor, job or node event, whatever the release sends).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from helpers.agg_procs import CliServer, read_jsonl
from helpers.ray_versions import FIXTURES, live_release, venvs_root

QUIET_S = 3.0  # the sink's file has not grown for this long: the agent has sent what it holds


def _wait_quiet(path: Path, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    size, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        now = path.stat().st_size if path.exists() else 0
        if now != size:
            size, since = now, time.monotonic()
        elif time.monotonic() - since >= QUIET_S:
            return
        time.sleep(0.2)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("version")
    parser.add_argument("--venvs", type=Path, default=venvs_root() or Path("build/ray-versions"))
    args = parser.parse_args()
    out = FIXTURES / "ray-versions" / args.version
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        events_file = Path(tmp) / "events.jsonl"
        sink = CliServer("sink", "--out", str(events_file))
        try:
            with live_release(args.version, args.venvs.resolve(), f"http://{sink.address}/v1/events") as run:
                _wait_quiet(events_file)
                gave_up = run.gcs_gave_up()
            live = run.answers
            _wait_quiet(events_file)  # what the agent flushed as it stopped
            sink.stop()
        finally:
            sink.close()
        events = read_jsonl(events_file)
    (out / "events.jsonl").write_text("".join(json.dumps(e, sort_keys=True) + "\n" for e in events))
    for name, rows in (("tasks", live.tasks), ("actors", live.actors), ("jobs", live.jobs)):
        (out / f"{name}.json").write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n")
    summary = {
        "version": args.version,
        "events": len(events),
        "tasks": len(live.tasks),
        "gcs_gave_up": gave_up,
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
