"""The descriptor pool our generated protobuf modules register into.

A private pool lets our `ray.rpc.events` messages live in the same process as Ray's own generated
ones (same full names, different files) without a duplicate-symbol error.
"""

from collections.abc import Iterable

from google.protobuf import descriptor_pool, timestamp_pb2

POOL = descriptor_pool.DescriptorPool()
POOL.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)


def field_numbers(full_names: Iterable[str]) -> dict[str, int]:
    """Each field's number by its full name, from the descriptors of our generated modules (those
    imported): what a compiled module that names the fields it reads (its RAY_FIELDS) is bound with."""
    return {name: POOL.FindFieldByName(name).number for name in full_names}
