"""Startup hook loading: every failure cause has its own error naming the hook and the cause; a hook
failing in a worker is reported and the worker runs its tasks; our bundled hooks never raise."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.tracing_procs import HELPERS, LOCAL_HOOK, OTLP_HOOK, run_pool, script_env, spans_by_pid

from ray_otel_events.tracing import hooks

CASES = [
    ("no_colon_here", "HookSpecError", "expected the form 'package.module:attribute'"),
    ("tracing_workload:", "HookSpecError", "expected the form"),
    (":counting_hook", "HookSpecError", "expected the form"),
    ("tracing_workload:Nested..hook", "HookSpecError", "expected the form"),
    ("no_such_module_for_tests:hook", "HookModuleNotFound", "no module named 'no_such_module_for_tests'"),
    ("tracing_bad_import:hook", "HookImportFailed", "a_dependency_that_is_not_installed"),
    ("tracing_workload:missing", "HookAttributeNotFound", "'tracing_workload' has no attribute 'missing'"),
    (
        "tracing_workload:Nested.Inner.nope",
        "HookAttributeNotFound",
        "'tracing_workload:Nested.Inner' has no attribute 'nope'",
    ),
    ("tracing_workload:not_callable_hook", "HookNotCallable", "is a int, not callable"),
    ("tracing_workload:raising_hook", "HookFailed", "raised RuntimeError: hook broke"),
    ("tracing_workload:Nested.Inner.hook", None, ""),
]


def test_each_cause_in_the_submitting_process_is_one_clear_error(tmp_path: Path) -> None:
    env = script_env(tmp_path, {"TRACING_TEST_HOOK_LOG": str(tmp_path / "hook.log")})
    out = subprocess.run(
        [sys.executable, str(HELPERS / "tracing_hook_errors.py"), *(hook for hook, _, _ in CASES)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    results = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["hook"] for r in results] == [hook for hook, _, _ in CASES]
    for (hook, error, cause), result in zip(CASES, results, strict=True):
        assert result["error"] == error, result
        if error is not None:
            assert result["message"].startswith(f"tracing startup hook {hook!r}: "), result
            assert cause in result["message"], result
            assert "Traceback" not in result["message"]


def test_errors_are_hook_error_subclasses_and_survive_pickling() -> None:
    import pickle

    with pytest.raises(hooks.HookNotCallable) as caught:
        hooks.load_hook("ray_otel_events.tracing.hooks:logger")
    again = pickle.loads(pickle.dumps(caught.value))
    assert isinstance(again, hooks.HookError) and str(again) == str(caught.value)
    with pytest.raises(hooks.HookSpecError):
        hooks.load_hook(None)  # type: ignore[arg-type]


def test_hook_failing_in_workers_is_reported_once_per_worker_and_tasks_still_run(tmp_path: Path) -> None:
    log = tmp_path / "hook.log"
    summary, stderr = run_pool(
        {
            "hook": "tracing_workload:fail_in_workers_hook",
            "tasks": 6,
            "start_method": "spawn",
            "max_workers": 2,
        },
        script_env(tmp_path, {"TRACING_TEST_HOOK_LOG": str(log)}),
    )
    assert summary["squares"] == [i * i for i in range(6)]
    reports = [line for line in stderr.splitlines() if "fail_in_workers_hook" in line]
    workers = [int(pid) for pid in log.read_text().split() if int(pid) != summary["pid"]]
    assert len(reports) == len(workers) >= 1, stderr
    for report in reports:
        assert "raised RuntimeError: hook broke in a worker" in report
        assert "continuing without it" in report


@pytest.mark.parametrize(
    "hook,extra,cause",
    [
        (LOCAL_HOOK, {"RAY_OTEL_EVENTS_AGGREGATOR_ADDRESS": "no-port-here"}, "expected host:port"),
        (OTLP_HOOK, {"OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon"}, "expected one of http/protobuf, grpc"),
    ],
    ids=["local-bad-aggregator-address", "otlp-bad-protocol"],
)
def test_bundled_hook_with_bad_configuration_reports_and_never_raises(
    tmp_path: Path, hook: str, extra: dict[str, str], cause: str
) -> None:
    summary, stderr = run_pool({"hook": hook, "tasks": 3, "max_workers": 2}, script_env(tmp_path, extra))
    assert summary["squares"] == [0, 1, 4]
    reports = [line for line in stderr.splitlines() if hook in line]
    assert reports and all(cause in line and "runs without it" in line for line in reports), stderr
    assert "Traceback" not in stderr
    assert not list(tmp_path.glob("*.json")), "tracing was not installed, so no span files"


def test_unwritable_spans_folder_is_reported_once_per_process_and_tasks_run(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    summary, stderr = run_pool({"hook": LOCAL_HOOK, "tasks": 4, "max_workers": 2}, script_env(not_a_dir))
    assert summary["squares"] == [0, 1, 4, 9]
    reports = re.findall(r"cannot write .*/(\d+)(\.json|\.logs\.jsonl): ", stderr)
    assert reports and len(reports) == len(set(reports)), stderr  # once per process and file
    assert {int(pid) for pid, _ in reports} >= {summary["pid"], *summary["worker_pids"]}
    assert "Traceback" not in stderr
    assert spans_by_pid(tmp_path) == {}
