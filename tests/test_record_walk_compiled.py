"""The compiled log-record walk (otel/_record_walk.c) against the Python walk it copies."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import sysconfig
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ray_otel_events.otel import log_records
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent
from tests.test_otlp_wire import _fixture_dicts

try:
    from ray_otel_events.otel import _record_walk
except ImportError:
    _record_walk = None  # type: ignore[assignment]

needs_compiled = pytest.mark.skipif(_record_walk is None, reason="built without a C compiler")


def _compiler() -> str | None:
    command = shlex.split(sysconfig.get_config_var("CC") or "cc")
    return shutil.which(command[0]) if command else None


def test_the_walk_is_compiled_where_a_c_compiler_is_present() -> None:
    if _compiler() is None:
        assert log_records._walk is log_records._walk_python
        return
    assert _record_walk is not None, "setup.py should have built otel/_record_walk.c"
    assert log_records._walk is _record_walk.walk


def _plans() -> tuple[log_records._Plan, log_records._Plan]:
    """Fresh plans for each walk, so that each fills its own caches (first use and repeats)."""
    return (
        log_records._Plan("ray.event", RayEvent.DESCRIPTOR),
        log_records._Plan("ray.event", RayEvent.DESCRIPTOR),
    )


def _both(obj: Any, plans: tuple[log_records._Plan, log_records._Plan]) -> list[Any]:
    """What each walk returns and appends, or the error it raises."""
    assert _record_walk is not None
    results: list[Any] = []
    for walk, plan in ((_record_walk.walk, plans[0]), (log_records._walk_python, plans[1])):
        attrs: list[bytes] = []
        try:
            results.append((walk(obj, plan, attrs), attrs))
        except (TypeError, ValueError, UnicodeError) as error:
            results.append(type(error))
    return results


@needs_compiled
def test_every_real_event_walks_to_the_same_bytes_first_time_and_again() -> None:
    plans = _plans()
    dicts = _fixture_dicts()
    assert len(dicts) > 150
    for obj in dicts + dicts:
        compiled, python = _both(obj, plans)
        assert compiled == python


@needs_compiled
def test_a_field_whose_values_never_repeat_stays_exact_past_its_cache() -> None:
    plans = _plans()
    for i in range(log_records._LEAF_VALUES_MAX + 50):
        obj = {"eventId": f"id-{i}", "taskDefinitionEvent": {"taskAttempt": i, "taskName": "f"}}
        compiled, python = _both(obj, plans)
        assert compiled == python


_NAMES = [
    "eventId",
    "taskDefinitionEvent",
    "taskLifecycleEvent",
    "stateTransitions",
    "taskId",
    "requiredResources",
    "rayErrorInfo",
    "labels",
    "k",
    "",
]
_scalars = (
    st.text(max_size=6)
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.none()
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(_NAMES), inner, max_size=4),
    max_leaves=16,
)


@needs_compiled
@settings(max_examples=400)
@given(st.dictionaries(st.sampled_from(_NAMES) | st.text(max_size=4), _values, max_size=5))
def test_any_json_shape_walks_to_the_same_bytes_or_the_same_error(obj: dict[str, Any]) -> None:
    """Schema fields and unknown keys, maps, nested lists, floats, None, ints past 64 bits."""
    plans = _plans()
    compiled, python = _both(obj, plans)
    assert compiled == python
    assert _both(obj, plans) == [compiled, python]  # again, from the caches


def test_the_environment_can_turn_the_compiled_walk_off() -> None:
    code = "from ray_otel_events.otel import log_records as r; print(r._walk is r._walk_python)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={"RAY_OTEL_EVENTS_PURE_PYTHON": "1", "PATH": ""},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "True"
