"""RayEvent → the JSON Ray's aggregator posts (protobuf JSON mapping, defaults printed).

PLACEHOLDER: delegates to json_format until the fast encoder lands.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson
from google.protobuf import json_format
from google.protobuf.message import Message

from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent


class RayEventJsonEncoder:
    def __init__(self, preserve_proto_field_name: bool = False) -> None:
        self.preserve_proto_field_name = preserve_proto_field_name

    def to_dict(self, message: Message) -> dict[str, Any]:
        return json_format.MessageToDict(
            message,
            always_print_fields_with_no_presence=True,
            preserving_proto_field_name=self.preserve_proto_field_name,
        )

    def encode(self, events: Iterable[RayEvent]) -> bytes:
        return orjson.dumps([self.to_dict(e) for e in events])

    def encode_serialized(self, payloads: Iterable[bytes]) -> bytes:
        return self.encode(RayEvent.FromString(p) for p in payloads)
