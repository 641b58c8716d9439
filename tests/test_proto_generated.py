"""The committed generated code must be what `make proto` produces from proto/ today."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GENERATED = ROOT / "src" / "ray_otel_events" / "protobuf"


def _load_generator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("gen_proto", ROOT / "scripts" / "gen_proto.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_proto"] = module
    spec.loader.exec_module(module)
    return module


def _is_generated(path: Path) -> bool:
    return path.name.endswith(("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"))


def test_generated_code_is_not_stale(tmp_path: Path) -> None:
    fresh = {p.name: p.read_text() for p in _load_generator().generate(tmp_path)}
    committed = {p.name: p.read_text() for p in GENERATED.iterdir() if _is_generated(p)}
    assert sorted(fresh) == sorted(committed), "generated file set differs: run `make proto`"
    stale = [name for name, text in fresh.items() if committed[name] != text]
    assert not stale, f"stale generated files (run `make proto`): {stale}"


def test_every_event_type_and_the_service_are_defined() -> None:
    from ray_otel_events.events.registry import REGISTRY
    from ray_otel_events.protobuf import events_event_aggregator_service_pb2 as svc
    from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent

    types = {v.number: v.name for v in RayEvent.DESCRIPTOR.enum_types_by_name["EventType"].values}
    assert len(types) == 18 and max(types) == 17  # 17 event types + UNSPECIFIED
    assert sorted(REGISTRY) == list(range(1, 18))
    for spec in REGISTRY.values():
        assert types[spec.event_type] == spec.name
        assert RayEvent.DESCRIPTOR.fields_by_name[spec.payload_field].message_type is not None
    method = svc.DESCRIPTOR.services_by_name["EventAggregatorService"].methods_by_name["AddEvents"]
    assert method.full_name == "ray.rpc.events.EventAggregatorService.AddEvents"
    assert method.input_type.full_name == "ray.rpc.events.AddEventsRequest"


def test_our_messages_load_beside_rays_own() -> None:
    """Same symbols as Ray's generated code, different pool: both import in one process."""
    from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent

    ray_pb = __import__("pytest").importorskip("ray.core.generated.events_base_event_pb2")
    ours = RayEvent(event_type=RayEvent.EventType.TASK_LIFECYCLE_EVENT, message="x")
    theirs = ray_pb.RayEvent.FromString(ours.SerializeToString())
    assert theirs.message == "x" and theirs.event_type == 2
