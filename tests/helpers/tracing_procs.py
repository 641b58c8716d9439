"""Helpers for the tracing tests: run workload scripts as real processes, read span and log files."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from helpers.agg_procs import clean_env, run_json_script

HELPERS = Path(__file__).resolve().parent
LOCAL_HOOK = "ray_otel_events.tracing.setup_local_tmp_tracing:setup_tracing"
OTLP_HOOK = "ray_otel_events.tracing.setup_otlp_tracing:setup_tracing"


def script_env(spans_dir: Path | None = None, extra: dict[str, str] | None = None) -> dict[str, str]:
    """A clean environment with tests/helpers importable (also by spawned workers)."""
    env = {k: v for k, v in clean_env().items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HELPERS), env.get("PYTHONPATH", "")]))
    if spans_dir is not None:
        env["RAY_OTEL_EVENTS_SPANS_DIR"] = str(spans_dir)
    env.update(extra or {})
    return env


def run_pool(
    spec: dict[str, Any], env: dict[str, str], timeout_s: float = 120.0
) -> tuple[dict[str, Any], str]:
    """Run tracing_pool.py with a JSON spec; returns (its summary, its stderr)."""
    summary, _, stderr = run_pool_output(spec, env, timeout_s)
    return summary, stderr


def run_pool_output(
    spec: dict[str, Any], env: dict[str, str], timeout_s: float = 120.0
) -> tuple[dict[str, Any], str, str]:
    """Run tracing_pool.py with a JSON spec; returns (its summary, its stdout, its stderr)."""
    return run_json_script(
        [sys.executable, str(HELPERS / "tracing_pool.py"), json.dumps(spec)], env, timeout_s
    )


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def spans_by_pid(spans_dir: Path) -> dict[int, list[dict[str, Any]]]:
    """Every `<pid>.json` span file, parsed line by line with plain json."""
    return {int(p.stem): read_lines(p) for p in sorted(spans_dir.glob("*.json"))}


def logs_by_pid(spans_dir: Path) -> dict[int, list[dict[str, Any]]]:
    return {int(p.name.split(".")[0]): read_lines(p) for p in sorted(spans_dir.glob("*.logs.jsonl"))}


def sid(span: dict[str, Any]) -> str:
    return str(span["context"]["span_id"])


def tid(span: dict[str, Any]) -> str:
    return str(span["context"]["trace_id"])
