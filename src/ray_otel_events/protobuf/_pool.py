"""The descriptor pool our generated protobuf modules register into.

A private pool lets our `ray.rpc.events` messages live in the same process as Ray's own generated
ones (same full names, different files) without a duplicate-symbol error.
"""

from google.protobuf import descriptor_pool, timestamp_pb2

POOL = descriptor_pool.DescriptorPool()
POOL.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
