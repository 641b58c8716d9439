"""A Ray driver that compares our stand-ins for Ray's tracing helpers with Ray's own, side by side,
in the driver, in a task and in an actor method of a live cluster.

    python ray_wrappers_driver.py HOOK TEMP_DIR

Prints one JSON line: {"driver": [...], "task": [...], "actor": [...], "disconnected": {...}}, each
list a row per case with both results and whether they are equal.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import ray
from opentelemetry import context, trace
from opentelemetry.context.context import Context
from ray.util.tracing import tracing_helper

from ray_otel_events.tracing import ray_wrappers


def _described(ctx: Context) -> dict[str, Any]:
    """A context as comparable values: its keys and the span context it carries."""
    span = trace.get_current_span(ctx).get_span_context()
    return {"keys": sorted(ctx), "span": [span.trace_id, span.span_id, span.trace_flags, span.is_remote]}


def _in_context(use_context: Any, parent: Context | None) -> dict[str, Any]:
    """What a body run under `use_context(parent)` sees, and what is current after it (also when
    the body raises)."""
    before = context.get_current()
    with use_context(parent):
        inside = context.get_current()
        span = trace.get_current_span().get_span_context()
    try:
        with use_context(parent):
            raise KeyError("body failed")
    except KeyError as exc:
        raised = repr(exc)
    return {
        "inside_is_parent": inside is parent,
        "inside": _described(inside),
        "inside_empty": inside == Context(),
        "span": [span.trace_id, span.span_id],
        "restored": context.get_current() == before,
        "raised": raised,
    }


def _proxy_parts(otel: Any) -> list[int]:
    return [id(otel.trace), id(otel.context), id(otel.propagate), id(otel.Context)]


def compare() -> list[dict[str, Any]]:
    """Each case run through Ray's helper and through ours; the stand-ins must be installed."""
    ray_helpers = dict(ray_wrappers.originals())
    assert ray_helpers, "the stand-ins are not installed in this process"
    ours: dict[str, Any] = {name: getattr(tracing_helper, name) for name in ray_helpers}
    assert ours["_function_hydrate_span_args"] is ray_wrappers.function_hydrate_span_args

    class Acc:
        def add(self) -> None:
            pass

    cases: list[tuple[str, Callable[[dict[str, Any]], Any]]] = [
        ("function_args", lambda h: h["_function_hydrate_span_args"]("mod.func")),
        ("actor_args_names", lambda h: h["_actor_hydrate_span_args"]("Acc", "add")),
        ("actor_args_callables", lambda h: h["_actor_hydrate_span_args"](Acc, Acc.add)),
        ("actor_args_init", lambda h: h["_actor_hydrate_span_args"]("Acc", "__init__")),
    ]
    tracer = trace.get_tracer("tests")
    rows = []
    for case, run in cases:
        rows.append({"case": case, "ray": run(ray_helpers), "ours": run(ours)})
    with tracer.start_as_current_span("parent") as span:
        carriers = {
            "ray": ray_helpers["_DictPropagator"].inject_current_context(),
            "ours": ours["_DictPropagator"].inject_current_context(),
        }
        rows.append({"case": "inject", **carriers})
        parent_ids = [span.get_span_context().trace_id, span.get_span_context().span_id]
    helpers = (("ray", ray_helpers), ("ours", ours))
    extracted = {k: h["_DictPropagator"].extract(carriers["ray"]) for k, h in helpers}
    rows.append({"case": "extract", **{k: _described(v) for k, v in extracted.items()}})
    empty = {k: _described(h["_DictPropagator"].extract({})) for k, h in helpers}
    rows.append({"case": "extract_empty", **empty})
    for label, parent in (("use_context", extracted["ray"]), ("use_context_none", None)):
        rows.append({"case": label, **{k: _in_context(h["_use_context"], parent) for k, h in helpers}})
    rows[-2]["parent"] = parent_ids  # what a body under the extracted context must see as its span
    rows.append(
        {
            "case": "opentelemetry",
            "ray": _proxy_parts(tracing_helper._OpenTelemetryProxy()),
            "ours": _proxy_parts(tracing_helper._get_opentelemetry()),
            "ours_type": type(tracing_helper._get_opentelemetry()).__name__,
        }
    )
    for row in rows:
        row["same"] = row["ray"] == row["ours"]
    return rows


@ray.remote
def in_task() -> list[dict[str, Any]]:
    return compare()


@ray.remote
class InActor:
    def run(self) -> list[dict[str, Any]]:
        return compare()


def disconnected() -> dict[str, Any]:
    """After ray.shutdown() both raise the same error (ours falls back to Ray's)."""
    out: dict[str, Any] = {}
    for label, func in (
        ("ray", dict(ray_wrappers.originals())["_function_hydrate_span_args"]),
        ("ours", tracing_helper._function_hydrate_span_args),
    ):
        try:
            out[label] = func("mod.func")
        except Exception as exc:
            out[label] = f"{type(exc).__name__}: {exc}"
    return out


def main() -> None:
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        logging_level="ERROR",
        _tracing_startup_hook=sys.argv[1],
        _temp_dir=sys.argv[2],
    )
    actor = InActor.remote()  # type: ignore[attr-defined]
    summary = {
        "driver": compare(),
        "task": ray.get(in_task.remote()),
        "actor": ray.get(actor.run.remote()),
    }
    ray.shutdown()
    summary["disconnected"] = disconnected()
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
