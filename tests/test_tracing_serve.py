"""Ray Serve requests as traces with the local hook: real Ray Serve, a composed application (an
ingress deployment calling another through a handle, which runs a Ray task and an actor call).

The cluster is started with `--tracing-startup-hook=<local hook>` and Serve's tracing is pointed at
`ray_otel_events.tracing.serve:span_processors` (sampling ratio 1); spans are read from the span
files of every process. One trace per HTTP request, the caller's `traceparent` honoured, the
controller's constructor trace holding nothing of later work, and no span written twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.serve_traces import (
    PROXY_SPAN,
    SERVE_REQUEST_SPANS,
    Span,
    check_controller_trace_not_lumped,
    check_nothing_twice,
    check_request_trace,
    run_app,
    serve_cluster,
    spans_from_files,
    wait_until_checked,
)
from helpers.tracing_procs import LOCAL_HOOK, script_env

pytestmark = pytest.mark.ray
CALLER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
REQUESTS: list[dict[str, str]] = [{}, {"traceparent": CALLER}, {}]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, Any]]]:
    spans_dir = tmp_path_factory.mktemp("serve") / "spans"
    with serve_cluster(LOCAL_HOOK, script_env(spans_dir), ratio=1.0) as env:
        summary = run_app(env, 1.0, REQUESTS)
        yield spans_dir, summary


def _check_all(spans: list[Span], summary: dict[str, Any]) -> None:
    traces = [
        check_request_trace(spans, response, request.get("traceparent"))
        for request, response in zip(REQUESTS, summary["responses"], strict=True)
    ]
    assert len(set(traces)) == len(REQUESTS)
    # Every span of Serve's request path is in one of the requests' traces.
    assert {s.trace_id for s in spans if s.name.startswith(SERVE_REQUEST_SPANS)} == set(traces)


def test_each_http_request_is_one_trace_across_proxy_replicas_task_and_actor(
    served: tuple[Path, dict[str, Any]],
) -> None:
    spans_dir, summary = served
    assert [r["leaf"] for r in summary["responses"]] == [2, 4, 6]
    spans = wait_until_checked(lambda: spans_from_files(spans_dir), lambda s: _check_all(s, summary))
    assert sum(s.name == PROXY_SPAN for s in spans) == len(REQUESTS)
    check_nothing_twice(spans)
    # Serve's provider was refused on purpose; the API's warning about it is not shown.
    assert "Overriding of current TracerProvider" not in summary["stderr"]


def test_the_controllers_constructor_trace_holds_no_later_work(served: tuple[Path, dict[str, Any]]) -> None:
    spans_dir, summary = served
    spans = wait_until_checked(lambda: spans_from_files(spans_dir), lambda s: _check_all(s, summary))
    check_controller_trace_not_lumped(spans)
