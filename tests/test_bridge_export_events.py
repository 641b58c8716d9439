"""The bridge's `/v1/ray-export-events`: Ray Data's datasets and Train v2's runs as spans in their
jobs' traces, read back from a real OTLP receiver (our sink, a separate process).

The events are tests/fixtures/ray-2.60-export-events.jsonl (a live Ray 2.60 head's export files:
tests/test_store_export_entities.py says how they were made), POSTed a file at a time as the
per-node collector POSTs them, then all again (at least once): the same spans, once each.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import requests
from helpers.bridge_procs import ServerGroup, otlp_spans, url, wait_until

from ray_otel_events.otel.export_spans import dataset_span_id, train_attempt_span_id, train_run_span_id
from ray_otel_events.otel.from_ray_events import actor_span_id, job_span_id, trace_id_for_job

FIXTURE = Path(__file__).parent / "fixtures" / "ray-2.60-export-events.jsonl"
SESSION = "session_2026-12-02_03-47-42_246953_32340"
JOB = bytes.fromhex("01000000")
# 2 datasets and their 2 + 3 operators; a run, its attempt and the attempt's 2 workers
SPANS = 11


def _by_file(lines: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    files: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        files.setdefault(line["source_type"], []).append(line)
    return list(files.values())


def test_datasets_and_train_runs_become_spans_of_their_jobs_traces(tmp_path: Path) -> None:
    lines = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    with ServerGroup(tmp_path) as group:
        sink, out = group.sink("otlp")
        bridge = group.bridge("--otlp-endpoint", url(sink))
        for _ in range(2):  # the second time, a resend: no span again
            # attempts before their run (the collector ships its files in any order)
            for batch in sorted(
                _by_file(lines), key=lambda b: b[0]["source_type"] != "EXPORT_TRAIN_RUN_ATTEMPT"
            ):
                body = {"sessionName": SESSION, "nodeId": "", "hostname": "head", "events": batch}
                answer = requests.post(url(bridge, "/v1/ray-export-events"), json=body, timeout=30)
                assert answer.status_code == 200 and answer.json()["rejected"] == 0, answer.text
        spans = wait_until(lambda: otlp_spans(out), SPANS)
        bridge.stop()
        spans = otlp_spans(out)
    assert len(spans) == SPANS, [s["name"] for s in spans]
    trace = trace_id_for_job(SESSION, JOB).hex()
    assert {s["traceId"] for s in spans} == {trace}
    by_id = {s["spanId"]: s for s in spans}
    datasets = [s for s in spans if s["name"].startswith("dataset ")]
    assert len(datasets) == 2
    for dataset in datasets:
        dataset_id = dataset["_attrs"]["ray.dataset_id"]
        assert dataset["spanId"] == dataset_span_id(SESSION, dataset_id).hex()
        assert dataset["parentSpanId"] == job_span_id(SESSION, JOB).hex()  # the job's root span
        operators = [s for s in spans if s.get("parentSpanId") == dataset["spanId"]]
        assert [s["name"] for s in operators] == dataset["_attrs"]["ray.dataset.operators"]
        assert all(int(op["endTimeUnixNano"]) <= int(dataset["endTimeUnixNano"]) for op in operators)
    (run,) = [s for s in spans if s["name"] == "train run tiny-run"]
    run_id = run["_attrs"]["ray.train.run_id"]
    assert run["spanId"] == train_run_span_id(SESSION, run_id).hex()
    assert run["parentSpanId"] == job_span_id(SESSION, JOB).hex()
    (attempt,) = [s for s in spans if s.get("parentSpanId") == run["spanId"]]
    assert (
        attempt["spanId"] == train_attempt_span_id(SESSION, attempt["_attrs"]["ray.train.attempt_id"]).hex()
    )
    workers = sorted(
        (s for s in spans if s.get("parentSpanId") == attempt["spanId"]),
        key=lambda s: s["_attrs"]["ray.train.world_rank"],
    )
    assert [w["name"] for w in workers] == ["train worker 0", "train worker 1"]
    attempt_line = next(
        line["event_data"]
        for line in reversed(lines)
        if line["source_type"] == "EXPORT_TRAIN_RUN_ATTEMPT" and line["event_data"]["status"] == "FINISHED"
    )
    for worker, recorded in zip(workers, attempt_line["workers"], strict=True):
        actor = base64.b64decode(recorded["actor_id"])
        assert worker["_attrs"]["ray.actor_id"] == actor.hex()
        # joined to the worker actor's own span, as the bridge names it from Ray's events
        assert worker["links"] == [{"traceId": trace, "spanId": actor_span_id(SESSION, actor).hex()}]
        assert worker["_attrs"]["ray.pid"] == str(recorded["pid"])
    assert all(s["spanId"] in by_id for s in spans)
