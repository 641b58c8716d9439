"""`ray_otel_events.tracing.serve:span_processors` against Ray Serve's own `setup_tracing` (the code
Serve's proxy and replicas run), in a real process without a cluster: Serve's spans reach the
hook's provider once, at Serve's sampling ratio, with no second provider and no warning about it.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.agg_procs import run_json_script
from helpers.tracing_procs import read_lines, script_env

# Found, not imported: every xdist worker collects this module, and Ray Serve takes seconds to import;
# the processes that use it import it themselves.
if importlib.util.find_spec("ray") is None or importlib.util.find_spec("ray.serve") is None:
    pytest.skip("ray.serve is not installed (the ray extra)", allow_module_level=True)
EXPORTER = "ray_otel_events.tracing.serve:span_processors"

SCRIPT = """
import json, sys
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from ray.serve._private import tracing_utils
from ray.serve.schema import TracingConfig

if sys.argv[1] == "hook":
    from ray_otel_events.tracing.setup_local_tmp_tracing import setup_tracing
    setup_tracing()
before = trace.get_tracer_provider()
processors = list(before._active_span_processor._span_processors) if sys.argv[1] == "hook" else []
config = TracingConfig(
    enabled=True,
    exporter_import_path="ray_otel_events.tracing.serve:span_processors",
    sampling_ratio=float(sys.argv[2]),
)
enabled = tracing_utils.setup_tracing("proxy", "127.0.0.1", tracing_config=config)
after = trace.get_tracer_provider()
caller = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, True, TraceFlags(1))
caller_context = trace.set_span_in_context(NonRecordingSpan(caller))
with tracing_utils.TraceContextManager("proxy_http_request Ingress GET /", trace_context=caller_context):
    pass
print(json.dumps({
    "enabled": enabled,
    "same_provider": after is before,
    "provider": type(after).__name__,
    "sampler": after.sampler.get_description(),
    "processors_unchanged": list(after._active_span_processor._span_processors) == processors,
}))
"""


def _run(tmp_path: Path, mode: str, ratio: float, proxy_variable: bool = True) -> tuple[dict[str, Any], str]:
    extra = {"RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH": EXPORTER} if proxy_variable else {}
    summary, _, stderr = run_json_script(
        [sys.executable, "-c", SCRIPT, mode, str(ratio)], script_env(tmp_path, extra), 120
    )
    return summary, stderr


def test_serve_spans_go_to_the_hooks_provider_once_at_serves_ratio(tmp_path: Path) -> None:
    summary, stderr = _run(tmp_path, "hook", 0.25)
    assert summary == {
        "enabled": True,
        "same_provider": True,  # Serve's own provider was refused: no second pipeline
        "provider": "CachingTracerProvider",
        "sampler": "ParentBased{root:TraceIdRatioBased{0.25},remoteParentSampled:AlwaysOnSampler,"
        "remoteParentNotSampled:AlwaysOffSampler,localParentSampled:AlwaysOnSampler,"
        "localParentNotSampled:AlwaysOffSampler}",
        "processors_unchanged": True,  # nothing added: each span exported once
    }
    assert "Overriding of current TracerProvider" not in stderr
    assert "RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH" not in stderr
    (span,) = [line for path in tmp_path.glob("*.json") for line in read_lines(path)]
    assert span["name"] == "proxy_http_request Ingress GET /"
    assert span["context"]["trace_id"] == "0x0af7651916cd43dd8448eb211c80319c"
    assert span["parent_id"] == "0xb7ad6b7169203331"


def test_without_our_hook_it_says_so_and_serve_runs_on(tmp_path: Path) -> None:
    summary, stderr = _run(tmp_path, "bare", 1.0)
    assert summary["enabled"] is True and summary["provider"] == "TracerProvider"
    assert "no tracing startup hook of ours ran in this process" in stderr
    assert "--tracing-startup-hook=" in stderr
    assert not list(tmp_path.glob("*.json"))


def test_it_warns_when_the_proxy_would_not_trace(tmp_path: Path) -> None:
    """Ray 2.60's proxy reads only the environment: without the variable, requests have no proxy
    span and the caller's traceparent is ignored; the replicas' exporter says so."""
    summary, stderr = _run(tmp_path, "hook", 1.0, proxy_variable=False)
    assert summary["same_provider"] is True
    assert "RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH is not set to it" in stderr
    assert "Set both where the cluster starts" in stderr
