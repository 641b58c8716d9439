"""Ray's Export API entities in the store, on SQLite and on PostgreSQL: folded per entity (the newest
snapshot wins, whatever order and however often they arrive), kept by `rebuild`, dropped with their
session.

tests/fixtures/ray-2.60-export-events.jsonl: every line a live Ray 2.60 head wrote under
`<session>/logs/export_events/` in tests/test_ray_data_train.py (two Ray Data pipelines, a
two-worker Train v2 run, three `ray job submit` entrypoints), in file order.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from ray_otel_events.encoding.ray_export_events import read_export_post
from ray_otel_events.store.backend import Retention
from ray_otel_events.store.location import open_store

LINES = [
    json.loads(line)
    for line in (Path(__file__).parent / "fixtures" / "ray-2.60-export-events.jsonl").read_text().splitlines()
]
SESSION = "session_2026-12-02_03-47-42_246953_32340"


def _post(events: list[dict[str, Any]], session: str = SESSION) -> bytes:
    return json.dumps(
        {"sessionName": session, "nodeId": "ab" * 28, "hostname": "head", "events": events}
    ).encode()


def _folded(store: Any) -> dict[str, list[dict[str, Any]]]:
    kinds = (
        "EXPORT_DATASET_METADATA",
        "EXPORT_TRAIN_RUN",
        "EXPORT_TRAIN_RUN_ATTEMPT",
        "EXPORT_SUBMISSION_JOB",
    )
    return {
        kind: sorted((e["event_data"] for e in store.export_entities(kind, SESSION)), key=str)
        for kind in kinds
    }


def test_newest_snapshot_wins_in_any_order_and_duplicates_change_nothing(store_location: str | Path) -> None:
    store = open_store(store_location)
    try:
        assert store.add_export_events(read_export_post(_post(LINES)), 1.0) == len(LINES)
        in_order = _folded(store)
        shuffled = LINES * 2
        random.Random(7).shuffle(shuffled)
        store.add_export_events(read_export_post(_post(shuffled)), 2.0)
        assert _folded(store) == in_order
    finally:
        store.close()
    datasets = in_order["EXPORT_DATASET_METADATA"]
    assert len(datasets) == 2 and {d["state"] for d in datasets} == {"FINISHED"}
    for dataset in datasets:  # the last snapshot's states, the first's data context and arguments
        operators = dataset["topology"]["operators"]
        assert {op["state"] for op in operators} == {"FINISHED"}
        assert dataset["data_context"] and all(op["args"] for op in operators)
    (run,) = in_order["EXPORT_TRAIN_RUN"]
    assert run["status"] == "FINISHED" and run["end_time_ns"]
    (attempt,) = in_order["EXPORT_TRAIN_RUN_ATTEMPT"]
    assert attempt["status"] == "FINISHED" and len(attempt["workers"]) == 2
    jobs = {j["submission_job_id"]: j for j in in_order["EXPORT_SUBMISSION_JOB"]}
    assert jobs["raysubmit_fine"]["status"] == "SUCCEEDED"
    assert jobs["raysubmit_exit3"]["driver_exit_code"] == 3
    assert jobs["raysubmit_nodriver"]["status"] == "FAILED"


def test_kept_by_rebuild_and_dropped_with_their_session(store_location: str | Path) -> None:
    store = open_store(store_location)
    try:
        store.add_export_events(read_export_post(_post(LINES)), 1.0)
        store.add_export_events(read_export_post(_post(LINES[:3], "session_newer")), 1000.0)
        store.rebuild(force=True)
        assert len(store.export_entities("EXPORT_DATASET_METADATA", SESSION)) == 2
        assert SESSION in store.sessions()
        store.prune(Retention(max_age_s=100.0), now=1050.0)  # the older session is past its age
        assert store.export_entities("EXPORT_TRAIN_RUN", SESSION) == []
        assert len(store.export_entities("EXPORT_DATASET_METADATA", "session_newer")) >= 1
    finally:
        store.close()
