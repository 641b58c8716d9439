"""Task functions and startup hooks the tracing tests run in real worker processes.

Importable as a top-level module (tests/helpers is on sys.path of the scripts and of Ray workers).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import sys
import time

from opentelemetry import trace


class TaskFailure(Exception):
    """A user exception with extra state, to check it reaches the caller unchanged."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message


def square(x: int) -> int:
    return x * x


def fail(code: int) -> None:
    raise TaskFailure(code, f"task failed with {code}")


def with_custom_spans(x: int) -> dict[str, object]:
    """Opens two nested user spans inside the task; returns their ids for the test to find."""
    tracer = trace.get_tracer(__name__)
    with (
        tracer.start_as_current_span("custom-outer") as outer,
        tracer.start_as_current_span("custom-inner") as inner,
    ):
        return {
            "pid": os.getpid(),
            "outer": format(outer.get_span_context().span_id, "016x"),
            "inner": format(inner.get_span_context().span_id, "016x"),
            "value": x + 1,
        }


# Set by a submitting process before it starts its pool: a forked worker inherits the value, a
# spawned or forkserver one imports this module afresh and sees None.
SUBMITTER_PID: int | None = None


def chatty(n: int) -> dict[str, object]:
    """Prints to both streams and logs a warning; says how this worker was started."""
    print(f"hello {n}")
    print(f"oops {n}", file=sys.stderr)
    logging.getLogger("chatty").warning("careful %d", n)
    return {"n": n, "pid": os.getpid(), "ppid": os.getppid(), "inherited": SUBMITTER_PID}


def pid_of(_: int = 0) -> int:
    return os.getpid()


def sleepy(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


# -- hooks -------------------------------------------------------------------------------------


def counting_hook() -> None:
    """Appends this pid to $TRACING_TEST_HOOK_LOG: lets a test count hook runs per process."""
    with open(os.environ["TRACING_TEST_HOOK_LOG"], "a") as log:
        log.write(f"{os.getpid()}\n")


def fail_in_workers_hook() -> None:
    """Works in the submitting process, raises in multiprocessing children."""
    counting_hook()
    if multiprocessing.parent_process() is not None:
        raise RuntimeError("hook broke in a worker")


def raising_hook() -> None:
    raise RuntimeError("hook broke")


not_callable_hook = 42


class Nested:
    class Inner:
        @staticmethod
        def hook() -> None:
            counting_hook()


def user_hook() -> None:
    """A user's own hook built from our blocks, as the README shows: span files in $USER_SPANS_DIR."""
    from ray_otel_events.tracing import SpanFileProcessor, install_tracing

    install_tracing([SpanFileProcessor(os.environ["USER_SPANS_DIR"])])
