"""RayEvent -> JSON array: our generated encoder against the way Ray 2.60's aggregator does it.

Ray's way, per batch: ``json.loads(MessageToJson(e, always_print_fields_with_no_presence=True,
preserving_proto_field_name=False))`` for each event (what ``ray._private.protobuf_compat.
message_to_json`` resolves to with protobuf >= 5.26; default indent), then aiohttp's ``json.dumps``
of the list, encoded to bytes. Ours: ``RayEventJsonEncoder.encode`` (messages in) and
``encode_serialized`` (wire bytes in, the aggregator's hot path; the Ray figure for it includes
``RayEvent.FromString``, as Ray's gRPC layer parses each event too).

The mix cycles through every event of a real Ray 2.60 workload (tests/fixtures/ray-2.60/raw/runE),
with a fresh event id, task id and timestamp per copy so no cache sees more repetition than a real
stream. Every round encodes freshly parsed messages (upb caches field objects on first access).
Both outputs are checked equal before timing. Prints one Markdown section.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from google.protobuf import json_format

from ray_otel_events.encoding.ray_json import RayEventJsonEncoder
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = ROOT / "tests" / "fixtures" / "ray-2.60" / "raw" / "runE"
BATCH = 1000  # Ray's publisher batch cap
TARGET_SPEEDUP = 5.0


def load_templates() -> list[RayEvent]:
    events = []
    for body in sorted(TEMPLATES.glob("*.body")):
        for event in json.loads(body.read_text()):
            events.append(json_format.ParseDict(event, RayEvent()))
    return events


def make_stream(templates: list[RayEvent], n: int, seed: int = 7) -> list[bytes]:
    """``n`` wire-format events cycling through the templates, each copy with fresh ids and time."""
    rng = random.Random(seed)
    stream = []
    for i in range(n):
        copy, template = divmod(i, len(templates))
        event = RayEvent()
        event.CopyFrom(templates[template])
        event.event_id = rng.randbytes(28)
        event.timestamp.seconds += copy // 10  # ~10 copies (1200 events) per second
        event.timestamp.nanos = rng.randrange(1_000_000_000)
        for name in ("task_definition_event", "task_lifecycle_event", "actor_task_definition_event"):
            if name in event:
                payload = getattr(event, name)
                payload.task_id = copy.to_bytes(4, "big") + payload.task_id[4:]
        if "task_profile_events" in event:
            event.task_profile_events.task_id = (
                copy.to_bytes(4, "big") + event.task_profile_events.task_id[4:]
            )
        stream.append(event.SerializeToString())
    return stream


def ray_way(events: list[RayEvent]) -> bytes:
    return json.dumps(
        [
            json.loads(
                json_format.MessageToJson(
                    e, always_print_fields_with_no_presence=True, preserving_proto_field_name=False
                )
            )
            for e in events
        ]
    ).encode("utf-8")


def ray_way_from_wire(wires: list[bytes]) -> bytes:
    return ray_way([RayEvent.FromString(w) for w in wires])


def batches(items: list[bytes]) -> list[list[bytes]]:
    return [items[i : i + BATCH] for i in range(0, len(items), BATCH)]


def time_rounds(
    stream: list[bytes], rounds: int, run: Callable[[list[RayEvent] | list[bytes]], bytes], parsed: bool
) -> list[float]:
    """Seconds per event for each round; parsing for message-input runs happens outside the timer."""
    per_event = []
    for _ in range(rounds):
        total = 0.0
        for wires in batches(stream):
            items: list[RayEvent] | list[bytes] = [RayEvent.FromString(w) for w in wires] if parsed else wires
            start = time.perf_counter()
            run(items)
            total += time.perf_counter() - start
        per_event.append(total / len(stream))
    return per_event


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sanity run (a few seconds)")
    parser.add_argument("-n", type=int, help="events per round (default 20000, quick 2000)")
    parser.add_argument("--rounds", type=int, help="timed rounds (default 5, quick 3)")
    args = parser.parse_args()
    n = args.n or (2_000 if args.quick else 20_000)
    rounds = args.rounds or (3 if args.quick else 5)

    templates = load_templates()
    stream = make_stream(templates, n)
    encoder = RayEventJsonEncoder()

    for wires in batches(stream)[:2]:  # same JSON value before any timing
        assert json.loads(encoder.encode_serialized(wires)) == json.loads(ray_way_from_wire(wires))
        assert json.loads(encoder.encode([RayEvent.FromString(w) for w in wires])) == json.loads(
            ray_way_from_wire(wires)
        )

    rows = []
    for label, ray_run, our_run, parsed in (
        ("`encode_serialized`: wire bytes in", ray_way_from_wire, encoder.encode_serialized, False),
        ("`encode`: parsed messages in", ray_way, encoder.encode, True),
    ):
        theirs = time_rounds(stream, rounds, ray_run, parsed)  # type: ignore[arg-type]
        ours = time_rounds(stream, rounds, our_run, parsed)  # type: ignore[arg-type]
        rows.append((label, theirs, ours))

    types = Counter(RayEvent.EventType.Name(e.event_type) for e in templates)
    cmd = "python bench/bench_encoder.py" + (" --quick" if args.quick else "")
    lines = [
        "## encoder",
        "",
        f"Command: `{cmd}`. N = {n:,} events per round in batches of {BATCH}, {rounds} rounds; "
        f"a cycle of the {len(templates)} events of a real Ray 2.60 workload ({len(types)} types: "
        + ", ".join(f"{name} {count}" for name, count in types.most_common())
        + ") with fresh event ids, task ids and timestamps. Figures: best round (median in brackets), "
        "one core. Ray's way = `json.loads(MessageToJson(e, always_print_fields_with_no_presence=True))` "
        "per event, then `json.dumps` of the list (what Ray 2.60's aggregator and aiohttp do); "
        "for wire bytes in it includes `RayEvent.FromString`. Outputs checked equal first.",
        "",
        "| path | Ray's way us/event | ours us/event | speed-up | ours events/s |",
        "|---|---|---|---|---|",
    ]
    speedups = []
    for label, theirs, ours in rows:
        speedup = min(theirs) / min(ours)
        speedups.append(speedup)
        lines.append(
            f"| {label} | {min(theirs) * 1e6:.1f} ({statistics.median(theirs) * 1e6:.1f}) | "
            f"{min(ours) * 1e6:.2f} ({statistics.median(ours) * 1e6:.2f}) | **{speedup:.1f}x** | "
            f"{1 / min(ours):,.0f} |"
        )
    verdict = "met" if min(speedups) >= TARGET_SPEEDUP else "NOT met"
    lines += ["", f"- Target >= {TARGET_SPEEDUP:.0f}x faster than Ray's way: {verdict}."]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
