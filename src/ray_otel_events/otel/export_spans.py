"""Spans of Ray Data's datasets and Train v2's runs, from Ray's Export API events (what the per-node
collector POSTs to the bridge's `/v1/ray-export-events`).

Each lands in its job's trace, with the ids the bridge gives the rest of that trace
(`from_ray_events`: trace = hash of session and job id, the job's root span its parent), and ids of
its own hashed the same way from the session and the entity's id, so a resent event makes the same
span. A dataset is a span with an operator span each under it; a Train run is a span with its
attempts under it, and under each attempt its workers, each carrying its worker actor's id
(`ray.actor_id`) and a link to that actor's span. A span is made once its entity ended (the export
events are snapshots; the ended one holds the times). An attempt names its run, not its job: an
ended attempt whose run has not been seen waits for it (a bounded number of them).
"""

from __future__ import annotations

import binascii
import hashlib
from collections import OrderedDict
from typing import Any

from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from ray_otel_events.encoding.ray_export_events import DATASET, TRAIN_RUN, TRAIN_RUN_ATTEMPT, ExportPost
from ray_otel_events.otel import semconv
from ray_otel_events.otel.from_ray_events import actor_span_id, job_span_id, trace_id_for_job
from ray_otel_events.otel.plain_records import key_values

_ENDED = {"FINISHED", "FAILED", "ERRORED", "ABORTED"}
_FAILED = {"FAILED", "ERRORED", "ABORTED"}
MAX_WAITING = 10_000  # ended attempts held for their run, and runs' jobs remembered
MAX_EMITTED = 100_000  # span ids already made, not made again for a resent event


def _digest(*parts: str) -> bytes:
    return hashlib.sha256(b"\0".join(p.encode() for p in parts)).digest()


def dataset_span_id(session: str, dataset_id: str) -> bytes:
    return _digest("ray-otel-events/dataset", session, dataset_id)[:8]


def operator_span_id(session: str, dataset_id: str, operator_id: str) -> bytes:
    return _digest("ray-otel-events/dataset-operator", session, dataset_id, operator_id)[:8]


def train_run_span_id(session: str, run_id: str) -> bytes:
    return _digest("ray-otel-events/train-run", session, run_id)[:8]


def train_attempt_span_id(session: str, attempt_id: str) -> bytes:
    return _digest("ray-otel-events/train-attempt", session, attempt_id)[:8]


def train_worker_span_id(session: str, attempt_id: str, world_rank: int) -> bytes:
    return _digest("ray-otel-events/train-worker", session, attempt_id, str(world_rank))[:8]


def _bytes_id(value: Any) -> bytes:
    """A bytes field of an export event (base64 in its JSON, as protobuf's JSON writes bytes)."""
    if not isinstance(value, str) or not value:
        return b""
    try:
        return binascii.a2b_base64(value, strict_mode=True)
    except (binascii.Error, ValueError):
        return value.encode()


def _hex_id(value: Any) -> bytes:
    """A string field holding a hex id (a dataset's job id)."""
    try:
        return bytes.fromhex(str(value or ""))
    except ValueError:
        return str(value).encode()


def _ns(seconds: Any) -> int:
    return int(float(seconds) * 1e9) if isinstance(seconds, int | float) and seconds else 0


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


class ExportSpans:
    """Spans from export events (see the module doc); holds only what joins attempts to runs."""

    def __init__(self, max_waiting: int = MAX_WAITING) -> None:
        self.max_waiting = max_waiting
        self._run_jobs: OrderedDict[tuple[str, str], bytes] = OrderedDict()  # (session, run) -> job id
        self._waiting: OrderedDict[tuple[str, str], dict[str, Any]] = OrderedDict()  # (session, attempt)
        self._emitted: OrderedDict[bytes, None] = OrderedDict()
        self.dropped = 0  # attempts whose run never came, pushed out by newer ones

    def spans(self, post: ExportPost) -> list[Span]:
        session = post.session
        made: list[Span] = []
        for entity in post.entities:
            data = entity.data
            if entity.kind == DATASET:
                made += self._dataset(session, data)
            elif entity.kind == TRAIN_RUN:
                job = _bytes_id(data.get("job_id"))
                key = (session, str(data.get("id", "")))
                self._run_jobs[key] = job
                self._run_jobs.move_to_end(key)
                while len(self._run_jobs) > self.max_waiting:
                    self._run_jobs.popitem(last=False)
                made += self._run(session, data, job)
                made += self._released(session, key[1])
            elif entity.kind == TRAIN_RUN_ATTEMPT and data.get("status") in _ENDED:
                known = self._run_jobs.get((session, str(data.get("run_id", ""))))
                if known is None:
                    self._wait(session, data)
                else:
                    made += self._attempt(session, data, known)
        return [span for span in made if self._new(span)]

    def _new(self, span: Span) -> bool:
        key = span.trace_id + span.span_id
        if key in self._emitted:
            return False
        self._emitted[key] = None
        while len(self._emitted) > MAX_EMITTED:
            self._emitted.popitem(last=False)
        return True

    def _wait(self, session: str, attempt: dict[str, Any]) -> None:
        self._waiting[(session, str(attempt.get("attempt_id", "")))] = attempt
        while len(self._waiting) > self.max_waiting:
            self._waiting.popitem(last=False)
            self.dropped += 1

    def _released(self, session: str, run_id: str) -> list[Span]:
        job = self._run_jobs[(session, run_id)]
        ready = [k for k, a in self._waiting.items() if k[0] == session and a.get("run_id") == run_id]
        return [span for key in ready for span in self._attempt(session, self._waiting.pop(key), job)]

    def _dataset(self, session: str, data: dict[str, Any]) -> list[Span]:
        state = str(data.get("state", ""))
        if state not in _ENDED:
            return []
        dataset_id, job = str(data.get("dataset_id", "")), _hex_id(data.get("job_id"))
        trace = trace_id_for_job(session, job)
        own = dataset_span_id(session, dataset_id)
        start, end = _ns(data.get("start_time")), _ns(data.get("execution_end_time"))
        operators = (data.get("topology") or {}).get("operators") or []
        attrs = {
            "ray.dataset_id": dataset_id,
            semconv.RAY_JOB_ID: job.hex(),
            "ray.dataset.state": state,
            "ray.dataset.operators": [str(op.get("name", "")) for op in operators],
        }
        spans = [
            _span(trace, own, job_span_id(session, job), f"dataset {dataset_id}", start, end, attrs, state)
        ]
        for op in operators:
            op_state = str(op.get("state", state))
            op_attrs = {
                "ray.dataset_id": dataset_id,
                "ray.dataset.operator_id": str(op.get("id", "")),
                "ray.dataset.operator_state": op_state,
                "ray.dataset.input_dependencies": [str(i) for i in op.get("input_dependencies") or []],
            }
            spans.append(
                _span(
                    trace,
                    operator_span_id(session, dataset_id, str(op.get("id", ""))),
                    own,
                    str(op.get("name", "")) or "operator",
                    _ns(op.get("execution_start_time")) or start,
                    _ns(op.get("execution_end_time")) or end,
                    op_attrs,
                    op_state,
                )
            )
        return spans

    def _run(self, session: str, data: dict[str, Any], job: bytes) -> list[Span]:
        status = str(data.get("status", ""))
        if status not in _ENDED:
            return []
        run_id = str(data.get("id", ""))
        controller = _bytes_id(data.get("controller_actor_id"))
        attrs = {
            "ray.train.run_id": run_id,
            "ray.train.run_name": str(data.get("name", "")),
            "ray.train.status": status,
            semconv.RAY_JOB_ID: job.hex(),
            "ray.train.controller_actor_id": controller.hex(),
        }
        if data.get("status_detail"):
            attrs["ray.train.status_detail"] = str(data["status_detail"])
        trace = trace_id_for_job(session, job)
        span = _span(
            trace,
            train_run_span_id(session, run_id),
            job_span_id(session, job),
            f"train run {data.get('name') or run_id}",
            _int(data.get("start_time_ns")),
            _int(data.get("end_time_ns")),
            attrs,
            status,
        )
        if controller:
            span.links.add(trace_id=trace, span_id=actor_span_id(session, controller))
        return [span]

    def _attempt(self, session: str, data: dict[str, Any], job: bytes) -> list[Span]:
        status = str(data.get("status", ""))
        attempt_id, run_id = str(data.get("attempt_id", "")), str(data.get("run_id", ""))
        trace = trace_id_for_job(session, job)
        own = train_attempt_span_id(session, attempt_id)
        start, end = _int(data.get("start_time_ns")), _int(data.get("end_time_ns"))
        attrs = {"ray.train.run_id": run_id, "ray.train.attempt_id": attempt_id, "ray.train.status": status}
        if data.get("status_detail"):
            attrs["ray.train.status_detail"] = str(data["status_detail"])
        name = f"train attempt {attempt_id}"
        spans = [_span(trace, own, train_run_span_id(session, run_id), name, start, end, attrs, status)]
        for worker in data.get("workers") or []:
            actor = _bytes_id(worker.get("actor_id"))
            rank = _int(worker.get("world_rank"))
            worker_attrs = {
                semconv.RAY_ACTOR_ID: actor.hex(),
                "ray.train.world_rank": rank,
                "ray.train.local_rank": _int(worker.get("local_rank")),
                "ray.train.node_rank": _int(worker.get("node_rank")),
                semconv.RAY_NODE_ID: _bytes_id(worker.get("node_id")).hex(),
                semconv.RAY_PID: str(worker.get("pid", "")),
                "ray.train.worker_status": str(worker.get("status", "")),
            }
            if worker.get("log_file_path"):
                worker_attrs["ray.train.log_file_path"] = str(worker["log_file_path"])
            span = _span(
                trace,
                train_worker_span_id(session, attempt_id, rank),
                own,
                f"train worker {rank}",
                start,
                end,
                worker_attrs,
                status,
            )
            if actor:
                span.links.add(trace_id=trace, span_id=actor_span_id(session, actor))
            spans.append(span)
        return spans


def _span(
    trace: bytes,
    span_id: bytes,
    parent: bytes,
    name: str,
    start: int,
    end: int,
    attrs: dict[str, Any],
    state: str,
) -> Span:
    span = Span(
        trace_id=trace,
        span_id=span_id,
        parent_span_id=parent,
        name=name,
        kind=Span.SPAN_KIND_INTERNAL,
        start_time_unix_nano=start,
        end_time_unix_nano=max(end, start),
    )
    span.attributes.extend(key_values(attrs))
    if state in _FAILED:
        span.status.CopyFrom(Status(code=Status.STATUS_CODE_ERROR, message=state))
    return span
