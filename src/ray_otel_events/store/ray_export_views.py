"""Ray Data's datasets, Train v2's runs and submitted jobs as Ray 2.60's dashboard answers them,
from the Export API entities the store keeps (`sql_export`).

The live dashboard asks actors inside the cluster: Ray Data's stats actor (`/api/data/datasets/
{job_id}`, `dashboard/modules/data/data_head.py`), Train's state actor (`/api/train/v2/runs/v1`,
`dashboard/modules/train/train_head.py`; `/api/train/v2/runs` is Train v1's) and the job table
(`/api/jobs/`). Their export events carry the same entities in protobuf's JSON: ids as base64,
64-bit numbers as strings, enum names, unset fields left out; here they are put back in the
dashboard's shapes. What the export events do not carry:
- a dataset's and an operator's `progress`, `total` (blocks) and `queued_blocks` come from the
  stats actor's live counters: here `progress` and `total` are the operator's finished tasks in the
  store (Ray Data names a task after its operator; an input buffer, which runs none, counts its
  consumer's; an operator run in the driver, like `AggregateNumRows`, has none: None), a dataset's
  are its last operator's, `queued_blocks` is 0 once the operator ended (None before), and
  `total_rows` is None (no event counts rows);
- a dataset's `end_time` is when the stats actor saw it end; here, when its metadata said so (a
  few milliseconds later);
- the metric fields are what the live dashboard gives without Prometheus (zeros); with Prometheus
  they are its values, which the store does not keep.
"""

from __future__ import annotations

import binascii
from collections.abc import Callable
from typing import Any

import orjson

# The metrics the live dashboard adds to a dataset and each operator (`DATASET_METRICS`), with the
# queries it asks Prometheus for: zero where Prometheus does not answer.
DATASET_METRICS: dict[str, tuple[str, ...]] = {
    "ray_data_output_rows": ("max",),
    "ray_data_spilled_bytes": ("max",),
    "ray_data_current_bytes": ("value", "max"),
    "ray_data_cpu_usage_cores": ("value", "max"),
    "ray_data_gpu_usage_cores": ("value", "max"),
    "ray_data_memory_usage_bytes": ("value", "max"),
}
_ENDED = ("FINISHED", "FAILED")
# Train v2's `TrainingFramework` values by the export's enum names
_FRAMEWORKS = {
    "TORCH": "torch",
    "JAX": "jax",
    "TENSORFLOW": "tensorflow",
    "XGBOOST": "xgboost",
    "LIGHTGBM": "lightgbm",
}
ABORTED_DETAIL = "Terminated due to system errors or killed by the user."


def export_hex(value: Any) -> str:
    """A bytes field of an export event (base64 in its JSON) as Ray's hex; a value that is not
    base64 is given back as it is."""
    if not isinstance(value, str) or not value:
        return ""
    try:
        return binascii.a2b_base64(value, strict_mode=True).hex()
    except (binascii.Error, ValueError):
        return value


def _int(value: Any) -> int | None:
    """A 64-bit number of protobuf's JSON (a string), or an unset one (None)."""
    if value is None or value == "":
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _metrics() -> dict[str, dict[str, int]]:
    return {metric: dict.fromkeys(queries, 0) for metric, queries in DATASET_METRICS.items()}


def datasets_answer(
    entities: list[dict[str, Any]], job_id: str, finished_tasks: Callable[[str], int]
) -> dict[str, Any]:
    """`/api/data/datasets/{job_id}`: the job's datasets, newest first. `finished_tasks(name)`:
    the job's finished task attempts named `name`."""
    datasets = []
    for entity in entities:
        data = entity["event_data"]
        if data.get("job_id") != job_id:
            continue
        state = data.get("state") or "UNKNOWN"
        operators = []
        topology = (data.get("topology") or {}).get("operators") or []
        counts = [finished_tasks(op.get("name", "")) for op in topology]
        for i, op in enumerate(topology):
            done: int | None = counts[i]
            if not done:  # an input buffer runs none: each block it holds feeds a task of its consumer
                feeds = i + 1 < len(counts) and not op.get("input_dependencies") and counts[i + 1]
                done = counts[i + 1] if feeds else None
            op_state = op.get("state") or state
            operators.append(
                {
                    "operator": op.get("id", ""),
                    "name": op.get("name", ""),
                    "progress": done,
                    "total": done,
                    "total_rows": None,
                    "queued_blocks": 0 if op_state in _ENDED else None,
                    "state": op_state,
                    **_metrics(),
                }
            )
        last: dict[str, Any] = operators[-1] if operators else {"progress": None, "total": None}
        end = data.get("execution_end_time") or None
        datasets.append(
            {
                "dataset": data.get("dataset_id", ""),
                "job_id": data.get("job_id", ""),
                "state": state,
                "progress": last["progress"],
                "total": last["total"],
                "total_rows": None,
                "start_time": data.get("start_time") or 0.0,
                "end_time": end if state in _ENDED else None,
                "operators": operators,
                **_metrics(),
            }
        )
    datasets.sort(key=lambda d: d["start_time"], reverse=True)
    return {"datasets": datasets}


def _scaling_config(config: dict[str, Any]) -> dict[str, Any]:
    span = config.get("num_workers_range")
    selector: Any = None
    if "label_selector_single" in config:
        selector = (config["label_selector_single"] or {}).get("values") or {}
    elif "label_selector_list" in config:
        selector = [m.get("values") or {} for m in (config["label_selector_list"] or {}).get("values") or []]
    resources = config.get("resources_per_worker")
    return {
        "num_workers": [span.get("min", 0), span.get("max", 0)]
        if span
        else config.get("num_workers_fixed", 0),
        "use_gpu": bool(config.get("use_gpu", False)),
        "resources_per_worker": (resources or {}).get("values") if resources is not None else None,
        "placement_strategy": config.get("placement_strategy", ""),
        "accelerator_type": config.get("accelerator_type"),
        "use_tpu": bool(config.get("use_tpu", False)),
        "topology": config.get("topology"),
        "bundle_label_selector": selector,
    }


def _execution_options(options: dict[str, Any]) -> dict[str, Any]:
    return {
        "resource_limits": options.get("resource_limits") or {},
        "exclude_resources": options.get("exclude_resources") or {},
        "preserve_order": bool(options.get("preserve_order", False)),
        "actor_locality_enabled": bool(options.get("actor_locality_enabled", False)),
        "verbose_progress": bool(options.get("verbose_progress", False)),
    }


def _data_config(config: dict[str, Any]) -> dict[str, Any]:
    options = config.get("data_execution_options") or {}
    return {
        "datasets_to_split": "all" if "all" in config else (config.get("datasets") or {}).get("values") or [],
        "execution_options": None,
        "data_execution_options": {
            "default": _execution_options(options.get("default") or {}),
            "per_dataset_execution_options": {
                name: _execution_options(o)
                for name, o in (options.get("per_dataset_execution_options") or {}).items()
            },
        },
        "enable_shard_locality": bool(config.get("enable_shard_locality", False)),
    }


def _run_config(config: dict[str, Any]) -> dict[str, Any]:
    failure = config.get("failure_config") or {}
    checkpoint = config.get("checkpoint_config") or {}
    return {
        "name": config.get("name", ""),
        "failure_config": {
            "max_failures": failure.get("max_failures", 0),
            "controller_failure_limit": failure.get("controller_failure_limit", 0),
        },
        "worker_runtime_env": config.get("worker_runtime_env") or {},
        "checkpoint_config": {
            "num_to_keep": checkpoint.get("num_to_keep"),
            "checkpoint_score_attribute": checkpoint.get("checkpoint_score_attribute"),
            "checkpoint_score_order": str(checkpoint.get("checkpoint_score_order", "MAX")).lower(),
        },
        "storage_path": config.get("storage_path", ""),
        "storage_filesystem": config.get("storage_filesystem"),
    }


def _run_settings(settings: dict[str, Any]) -> dict[str, Any]:
    backend = settings.get("backend_config") or {}
    return {
        "train_loop_config": settings.get("train_loop_config"),
        "backend_config": {
            "framework": _FRAMEWORKS.get(str(backend.get("framework"))),
            "config": backend.get("config") or {},
        },
        "scaling_config": _scaling_config(settings.get("scaling_config") or {}),
        "datasets": settings.get("datasets") or [],
        "data_config": _data_config(settings.get("data_config") or {}),
        "run_config": _run_config(settings.get("run_config") or {}),
    }


def train_worker(worker: dict[str, Any]) -> dict[str, Any]:
    """A worker of an attempt as the live dashboard gives it once its actor is gone (no process
    or GPU stats)."""
    return {
        "world_rank": worker.get("world_rank", 0),
        "local_rank": worker.get("local_rank", 0),
        "node_rank": worker.get("node_rank", 0),
        "actor_id": export_hex(worker.get("actor_id")),
        "node_id": export_hex(worker.get("node_id")),
        "node_ip": worker.get("node_ip", ""),
        "pid": worker.get("pid", 0),
        "gpu_ids": worker.get("gpu_ids") or [],
        "status": worker.get("status"),
        "resources": {"resources": (worker.get("resources") or {}).get("resources") or {}},
        "log_file_path": worker.get("log_file_path"),
        "processStats": None,
        "gpus": [],
    }


def train_attempt(attempt: dict[str, Any]) -> dict[str, Any]:
    return {
        "run_id": attempt.get("run_id", ""),
        "attempt_id": attempt.get("attempt_id", ""),
        "status": attempt.get("status", "PENDING"),
        "status_detail": attempt.get("status_detail"),
        "start_time_ns": _int(attempt.get("start_time_ns")) or 0,
        "end_time_ns": _int(attempt.get("end_time_ns")),
        "resources": [{"resources": r.get("resources") or {}} for r in attempt.get("resources") or []],
        "workers": [train_worker(w) for w in attempt.get("workers") or []],
    }


def train_runs_answer(
    runs: list[dict[str, Any]],
    attempts: list[dict[str, Any]],
    jobs: dict[str, dict[str, Any]],
    dead_actors: set[str],
) -> dict[str, Any]:
    """`/api/train/v2/runs/v1`: Train v2's runs, newest first, each with its attempts and its
    job's details. A run still running whose controller actor is dead is ABORTED, as the live
    dashboard says (`_get_run_status`)."""
    by_run: dict[str, list[dict[str, Any]]] = {}
    for entity in attempts:
        attempt = train_attempt(entity["event_data"])
        by_run.setdefault(attempt["run_id"], []).append(attempt)
    answered = []
    for entity in runs:
        run = entity["event_data"]
        job_id = export_hex(run.get("job_id"))
        controller = export_hex(run.get("controller_actor_id"))
        status, detail = run.get("status", "INITIALIZING"), run.get("status_detail")
        if status == "RUNNING" and controller in dead_actors:
            status, detail = "ABORTED", ABORTED_DETAIL
        answered.append(
            {
                "id": run.get("id", ""),
                "name": run.get("name", ""),
                "job_id": job_id,
                "controller_actor_id": controller,
                "status": status,
                "status_detail": detail,
                "start_time_ns": _int(run.get("start_time_ns")) or 0,
                "end_time_ns": _int(run.get("end_time_ns")),
                "controller_log_file_path": run.get("controller_log_file_path"),
                "framework_versions": run.get("framework_versions") or {},
                "run_settings": _run_settings(run.get("run_settings") or {}),
                "attempts": sorted(by_run.get(run.get("id", ""), []), key=lambda a: a["start_time_ns"]),
                "job_details": jobs.get(job_id),
            }
        )
    answered.sort(key=lambda r: r["start_time_ns"], reverse=True)
    return {"train_runs": answered}


def submitted_job(entity: dict[str, Any]) -> dict[str, Any]:
    """A submitted job as `/api/jobs/` gives one (JobDetails), from its EXPORT_SUBMISSION_JOB:
    what the job table holds, and no driver until one registers (`job_id`, `driver_info`)."""
    data = entity["event_data"]
    return {
        "type": "SUBMISSION",
        "job_id": None,
        "submission_id": data.get("submission_job_id"),
        "driver_info": None,
        "status": data.get("status", "PENDING"),
        "entrypoint": data.get("entrypoint", ""),
        "message": data.get("message"),
        "error_type": data.get("error_type"),
        "start_time": _int(data.get("start_time")),
        "end_time": _int(data.get("end_time")),
        "metadata": data.get("metadata") or {},
        "runtime_env": _runtime_env(data.get("runtime_env_json")),
        "driver_agent_http_address": data.get("driver_agent_http_address"),
        "driver_node_id": data.get("driver_node_id"),
        "driver_exit_code": data.get("driver_exit_code"),
    }


def _runtime_env(text: Any) -> dict[str, Any]:
    try:
        value = orjson.loads(text or "{}")
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _seconds(ns: int | None) -> float | None:
    return None if ns is None else ns / 1e9


def dataset_rows(entities: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`ray-otel-events list datasets`: a row per dataset of the session, newest first."""
    rows = []
    for entity in entities:
        data = entity["event_data"]
        operators = (data.get("topology") or {}).get("operators") or []
        rows.append(
            {
                "dataset_id": data.get("dataset_id", ""),
                "job_id": data.get("job_id", ""),
                "state": data.get("state", ""),
                "operators": " -> ".join(str(op.get("name", "")) for op in operators),
                "start_time": data.get("start_time") or None,
                "end_time": data.get("execution_end_time") or None,
                "node_id": entity.get("node_id", ""),
                "topology": [
                    {
                        "id": op.get("id", ""),
                        "name": op.get("name", ""),
                        "state": op.get("state", ""),
                        "input_dependencies": op.get("input_dependencies") or [],
                        "sub_stages": op.get("sub_stages") or [],
                        "execution_start_time": op.get("execution_start_time") or None,
                        "execution_end_time": op.get("execution_end_time") or None,
                    }
                    for op in operators
                ],
            }
        )
    rows.sort(key=lambda r: r["start_time"] or 0, reverse=True)
    return rows


def train_run_rows(runs: list[dict[str, Any]], attempts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`ray-otel-events list train-runs`: a row per Train v2 run, newest first, with its attempts
    and their workers."""
    answer = train_runs_answer(runs, attempts, {}, set())["train_runs"]
    return [
        {
            "run_id": run["id"],
            "name": run["name"],
            "job_id": run["job_id"],
            "status": run["status"],
            "attempts": len(run["attempts"]),
            "workers": len(run["attempts"][-1]["workers"]) if run["attempts"] else 0,
            "start_time": _seconds(run["start_time_ns"]),
            "end_time": _seconds(run["end_time_ns"]),
            "status_detail": run["status_detail"],
            "controller_actor_id": run["controller_actor_id"],
            "attempt_list": run["attempts"],
        }
        for run in answer
    ]
