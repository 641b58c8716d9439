"""Ray Serve requests as traces with the OTLP hook, to a real OTLP/HTTP receiver, at Serve's
sampling ratio 0: requests whose caller sent a sampled `traceparent` are traced end to end under
the caller's trace id (parent-based sampling), the others not at all, in any process.

Same composed application as test_tracing_serve.py (ingress -> handle -> Inner -> task and actor).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from helpers.otlp_counting_receiver import OtlpReceiver
from helpers.serve_traces import (
    PROXY_SPAN,
    SERVE_REQUEST_SPANS,
    Span,
    check_controller_trace_not_lumped,
    check_nothing_twice,
    check_request_trace,
    run_app,
    serve_cluster,
    spans_from_otlp,
    traceparent_ids,
    wait_until_checked,
)
from helpers.tracing_procs import OTLP_HOOK, script_env

pytestmark = pytest.mark.ray
SAMPLED_A = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
UNSAMPLED = "00-5bf92f3577b34da6a3ce929d0e0e4736-10f067aa0ba902b7-00"
SAMPLED_B = "00-6bf92f3577b34da6a3ce929d0e0e4736-20f067aa0ba902b7-01"
REQUESTS: list[dict[str, str]] = [
    {"traceparent": SAMPLED_A},
    {},
    {"traceparent": UNSAMPLED},
    {"traceparent": SAMPLED_B},
]


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[OtlpReceiver, dict[str, Any]]]:
    receiver = OtlpReceiver()
    env = script_env(
        None,
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_EXPERIMENTAL_RESOURCE_DETECTORS": "process",  # each span's pid, as process.pid
        },
    )
    try:
        with serve_cluster(OTLP_HOOK, env, ratio=0.0) as cluster_env:
            yield receiver, run_app(cluster_env, 0.0, REQUESTS)
    finally:
        receiver.stop()


def _check_sampled(spans: list[Span], summary: dict[str, Any]) -> None:
    responses = summary["responses"]
    for index in (0, 3):
        traceparent = REQUESTS[index]["traceparent"]
        assert check_request_trace(spans, responses[index], traceparent) == traceparent_ids(traceparent)[0]


def test_sampled_callers_get_whole_traces_over_otlp_and_the_rest_nothing(
    served: tuple[OtlpReceiver, dict[str, Any]],
) -> None:
    receiver, summary = served
    assert [r["leaf"] for r in summary["responses"]] == [2, 4, 6, 8]
    spans = wait_until_checked(lambda: spans_from_otlp(receiver), lambda s: _check_sampled(s, summary))
    wanted = {traceparent_ids(SAMPLED_A)[0], traceparent_ids(SAMPLED_B)[0]}
    assert {s.trace_id for s in spans if s.name.startswith(SERVE_REQUEST_SPANS)} == wanted
    assert sum(s.name == PROXY_SPAN for s in spans) == 2
    assert sum(s.name == "__main__.leaf ray.remote" for s in spans) == 2  # the task, once per sampled request
    assert not [s for s in spans if s.trace_id == traceparent_ids(UNSAMPLED)[0]]
    check_nothing_twice(spans)


def test_the_controllers_constructor_trace_holds_no_later_work(
    served: tuple[OtlpReceiver, dict[str, Any]],
) -> None:
    receiver, summary = served
    spans = wait_until_checked(lambda: spans_from_otlp(receiver), lambda s: _check_sampled(s, summary))
    check_controller_trace_not_lumped(spans)
