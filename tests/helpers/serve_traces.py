"""Ray Serve requests as traces, for the tests: a cluster started with one of our hooks and Serve's
tracing pointed at `ray_otel_events.tracing.serve:span_processors`, the composed app's driver,
spans read back from span files or OTLP requests, and the structure each request's trace must have.
A test module that imports it is skipped where Ray Serve or /proc (how the cluster's processes are
found) is missing.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from helpers.agg_procs import free_port, run_json_script
from helpers.otlp_counting_receiver import OtlpReceiver, attributes_of
from helpers.ray_cluster import start_head, stop_cluster
from helpers.tracing_procs import HELPERS, read_lines

# Found, not imported: every xdist worker collects this module, and Ray Serve takes seconds to import;
# the processes that use it import it themselves.
if importlib.util.find_spec("ray") is None or importlib.util.find_spec("ray.serve") is None:
    pytest.skip("ray.serve is not installed (the ray extra)", allow_module_level=True)
pytest.importorskip("starlette")
if not Path("/proc/self/cmdline").exists():
    pytest.skip("finds the cluster's processes through /proc", allow_module_level=True)

SERVE_EXPORTER = "ray_otel_events.tracing.serve:span_processors"
APP = str(HELPERS / "serve_app.py")
PROXY_SPAN = "proxy_http_request Ingress GET /"
SERVE_REQUEST_SPANS = ("proxy_http_request ", "route_to_replica ", "replica_handle_request ")
CONTROLLER_INIT = "ServeController.__init__ ray.remote_worker"


@dataclass(frozen=True)
class Span:
    trace_id: str  # 32 hex digits
    span_id: str  # 16 hex digits
    parent_id: str | None
    name: str
    pid: int | None  # the process that made it
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]


@contextlib.contextmanager
def serve_cluster(hook: str, env: dict[str, str], ratio: float) -> Iterator[dict[str, str]]:
    """`ray start --head --tracing-startup-hook=HOOK` with Serve's tracing variables in the
    cluster's environment (Ray 2.60's proxy reads only those); yields the drivers' environment."""
    temp_dir = tempfile.mkdtemp(prefix="rs", dir="/tmp")  # short: Ray puts unix sockets in it
    port = free_port()
    env = {
        **env,
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "disabled",
        "RAY_ADDRESS": f"127.0.0.1:{port}",
        "RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH": SERVE_EXPORTER,
        "RAY_SERVE_TRACING_SAMPLING_RATIO": str(ratio),
        # Serve's controller restarts a proxy not ready within 5 s three times in a row, and its
        # start then fails: a proxy importing Serve on a machine busy with the suite's other
        # clusters once took longer in CI. What is traced is the same.
        "RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "60",
        "RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S": "60",
    }
    try:
        start_head(env, temp_dir, port, tracing_hook=hook)
        yield env
    finally:
        # No grace: the tests have read every span by now, and Serve's controller, proxy and
        # replicas at times outwait SIGTERM by ten seconds (so the 3 s grace was spent in vain).
        stop_cluster(temp_dir, grace_s=0.0)
        shutil.rmtree(temp_dir, ignore_errors=True)


def run_app(env: dict[str, str], ratio: float, requests: list[dict[str, str]]) -> dict[str, Any]:
    """Deploys the composed app, sends `requests`; returns the driver's summary."""
    args = [sys.executable, APP, str(free_port()), str(ratio), json.dumps(requests)]
    summary: dict[str, Any]
    summary, _, stderr = run_json_script(args, env, 300)
    summary["stderr"] = stderr
    return summary


def _hex(value: str | None) -> str | None:
    return value[2:] if value else None


def _file_time(text: str) -> int:
    moment = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ")
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000


def spans_from_files(folder: Path) -> list[Span]:
    """Every span in the local hook's `<pid>.json` files."""
    spans = []
    for path in sorted(folder.glob("*.json")):
        for line in read_lines(path):
            spans.append(
                Span(
                    str(_hex(line["context"]["trace_id"])),
                    str(_hex(line["context"]["span_id"])),
                    _hex(line["parent_id"]),
                    line["name"],
                    int(path.stem),
                    _file_time(line["start_time"]),
                    _file_time(line["end_time"]),
                    line["attributes"],
                )
            )
    return spans


def spans_from_otlp(receiver: OtlpReceiver) -> list[Span]:
    """Every span `receiver` has had; the pid is the resource's `process.pid`."""
    spans = []
    with receiver.lock:
        requests = list(receiver.traces)
    for request in requests:
        for resource_spans in request.resource_spans:
            resource = attributes_of(resource_spans.resource.attributes)
            pid = int(resource["process.pid"]) if "process.pid" in resource else None
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    spans.append(
                        Span(
                            span.trace_id.hex(),
                            span.span_id.hex(),
                            span.parent_span_id.hex() or None,
                            span.name,
                            pid,
                            span.start_time_unix_nano,
                            span.end_time_unix_nano,
                            attributes_of(span.attributes),
                        )
                    )
    return spans


def wait_until_checked(read: Callable[[], list[Span]], check: Callable[[list[Span]], None]) -> list[Span]:
    """Until `check` passes on what `read` returns (spans leave processes in batches), at most a
    minute; then once more, letting its assertion fail."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        spans = read()
        with contextlib.suppress(AssertionError, KeyError, ValueError):
            check(spans)
            return spans
        time.sleep(0.25)
    spans = read()
    check(spans)
    return spans


def traceparent_ids(traceparent: str) -> tuple[str, str]:
    _, trace_id, span_id, _ = traceparent.split("-")
    return trace_id, span_id


def check_request_trace(spans: list[Span], response: dict[str, Any], traceparent: str | None) -> str:
    """One request's trace: rooted at the proxy's span (a child of the caller's `traceparent` when
    given), through the ingress replica, the handle call to Inner's replica, and the task and actor
    call Inner made, each span a child of the one before, in the process that did the work.
    Returns the trace id."""
    (ingress,) = [
        s
        for s in spans
        if s.name == "replica_handle_request Ingress __call__"
        and s.attributes.get("request_id") == response["request_id"]
    ]
    trace = [s for s in spans if s.trace_id == ingress.trace_id]
    ids = {s.span_id for s in trace}
    roots = [s for s in trace if s.parent_id not in ids]
    assert [r.name for r in roots] == [PROXY_SPAN], [(r.name, r.pid) for r in roots]
    (root,) = roots
    if traceparent is None:
        assert root.parent_id is None
    else:
        assert (root.trace_id, root.parent_id) == traceparent_ids(traceparent)
    ingress_pid, inner_pid = response["ingress_pid"], response["inner_pid"]
    assert root.pid not in (ingress_pid, inner_pid, None)  # the proxy's own process

    def child(parent: Span, name: str, pid: int | None) -> Span:
        (found,) = [s for s in trace if s.parent_id == parent.span_id and s.name == name]
        assert pid is None or found.pid == pid, (name, found.pid, pid)
        return found

    route = child(root, "route_to_replica Ingress __call__", root.pid)
    assert ingress.parent_id == route.span_id and ingress.pid == ingress_pid
    route_inner = child(ingress, "route_to_replica Inner __call__", ingress_pid)
    inner = child(route_inner, "replica_handle_request Inner __call__", inner_pid)
    leaf = child(inner, "__main__.leaf ray.remote", inner_pid)
    child(leaf, "__main__.leaf ray.remote_worker", response["leaf_pid"])
    add = child(inner, "Counter.add ray.remote", inner_pid)
    child(add, "Counter.add ray.remote_worker", None)
    return root.trace_id


def check_nothing_twice(spans: list[Span]) -> None:
    repeated = [span_id for span_id, n in Counter(s.span_id for s in spans).items() if n > 1]
    assert not repeated, f"{len(repeated)} spans exported more than once"


def check_controller_trace_not_lumped(spans: list[Span]) -> None:
    """The trace that created Serve's controller holds nothing the controller did after its
    constructor returned (its control loop, started there, calls the proxy and the replicas)."""
    (ctor,) = [s for s in spans if s.name == CONTROLLER_INIT]
    later = [
        s.name
        for s in spans
        if s.trace_id == ctor.trace_id and s.pid == ctor.pid and s.start_ns > ctor.end_ns
    ]
    assert not later, later
    assert not any(s.trace_id == ctor.trace_id for s in spans if s.name.startswith(SERVE_REQUEST_SPANS))
