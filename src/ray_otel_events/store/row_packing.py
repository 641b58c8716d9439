"""A state row's JSON as the SQLite store keeps it: deflated against a fixed dictionary.

A row's JSON (a task's transitions, profile events, error text and log paths) was most of the
store's bytes (2.7 KB of 5.9 KB per task attempt of a real stream) and is only ever read whole,
so it is kept as one blob: a format byte (`PACKED_V1`), the text's length (4 bytes,
little-endian), then its raw deflate (32 KiB window) primed with `ROW_DICTIONARY`, the keys and
values every row repeats. The dictionary is part of the format: another one takes another format
byte. Rows are `PACKED_V2` (SQLite's, and PostgreSQL's since its schema step 10): their dictionary
is `ROW_DICTIONARY` followed by the row's own ids as its key columns keep them beside the blob
(`row_ids_text`), which deflate cannot squeeze but can refer back to (a task attempt's JSON 619 ->
526 bytes of a replicated stream); every reader reads those columns with the blob. `PACKED_V1` rows
(of earlier versions, and PostgreSQL's with an id column holding a value that is not text) and rows
written as JSON text (older still) are read as they are. The compiled row writer packs and the
compiled fold unpacks the same way (native/row_packing.h); this is their Python twin.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from typing import Any

PACKED_V1 = 1
PACKED_V2 = 2
_HEAD = 5
_LEVEL = 6  # native/row_packing.h's ROW_PACKED_LEVEL
_MAX_TEXT = 256 * 1024 * 1024  # a longer unpacked length is a damaged blob (row_packing.h's too)
_ID_BYTES_MAX = 512  # row_packing.h's ROW_ID_MAX / 2: an id's bytes a row's dictionary takes
_HEX_ID = re.compile(r"(?:[0-9a-fA-F]{2}){1,512}")  # row_packing.h's row_id_bytes: at most ROW_ID_MAX digits

# What rows of every resource repeat: Ray's keys and values, the shapes of a task's transitions,
# profile events, log paths and tracebacks. Deflate reaches back into it as into earlier text; the
# commonest strings are last (the nearest). Never change it: stored rows are read with it.
ROW_DICTIONARY = (
    b'"death_cause":{"creation_task_failure_context":{"serialized_exception":"","formatted_exception_string":'
    b'"Traceback (most recent call last):\\n\\n  File \\"python/ray/_raylet.pyx\\", line '
    b'"ray_namespace":"","is_detached":false,"class_name":"","repr_name":"","exit_type":"","exit_detail":"'
    b'{"job_id":"","type":"DRIVER","entrypoint":"python ","metadata":{},"runtime_env":{},"driver_node_id":"'
    b'","driver_info":{"id":"","node_ip_address":"","pid":""},"status":"SUCCEEDED","start_time":,"end_time":'
    b'{"worker_id":"","worker_type":"WORKER","pid":,"ip":"","is_alive":false,"worker_launch_time_ms":'
    b',"worker_launched_time_ms":{"state":"ALIVE","created_ms":{"state":"DEAD","created_ms":'
    b'{"actor_id":"","state":"DEPENDENCIES_UNREADY","PENDING_CREATION","RESTARTING",'
    b'"DRIVER_TASK","ACTOR_CREATION_TASK","ACTOR_TASK","SUBMITTED_TO_WORKER","PENDING_ARGS_FETCH",'
    b'"PENDING_OBJ_STORE_MEM_AVAIL","actor_id":"","actor_repr_name":"","is_debugger_paused":false,'
    b'"error_type":"TASK_EXECUTION_EXCEPTION","ACTOR_DIED","WORKER_DIED","TASK_CANCELLED","NODE_DIED",'
    b'"error_message":"User exception:\\n\\u001b[36mray::()\\u001b[39m (pid=, ip=)\\n  File \\"'
    b'{"event_name":"submit_task","start_time":,"end_time":,"extra_data":{}},'
    b'{"event_name":"task:store_outputs","start_time":,"end_time":,"extra_data":{}},'
    b'"extra_data":{"type":"<class \'ValueError\'>","value":"","traceback":"Traceback (most recent call '
    b"last):"
    b'\\n  File \\"python/ray/_raylet.pyx\\", line 2306, in ray._raylet.execute_task\\n  File \\"'
    b'python/ray/_raylet.pyx\\", line 2205, in ray._raylet.execute_task\\n  File \\"'
    b'/site-packages/ray/_private/function_manager.py\\", line , in actor_method_executor\\n'
    b'", line , in \\n    raise \\nError: \\n"}},'
    b'"profiling_data":{"component_type":"worker","component_id":"","node_ip_address":"","events":['
    b'{"event_name":"task:deserialize_arguments","start_time":,"end_time":,"extra_data":{}},'
    b'{"event_name":"task:execute","start_time":,"end_time":,"extra_data":{}},'
    b'{"event_name":"task::","start_time":,"end_time":,"extra_data":{"name":"__main__.","task_id":"'
    b'ffffffffffffffffffffffff01000000"}}]},'
    b'"task_log_info":{"stdout_file":"/tmp/ray/session_20-","/logs/worker-","-ffffffff-.out",'
    b'"stderr_file":"/tmp/ray/session_20-","/logs/worker-","-ffffffff-.err",'
    b'"stdout_start":,"stdout_end":,"stderr_start":,"stderr_end":},'
    b'"node_id":"","worker_id":"","worker_pid":,"creation_time_ms":,"start_time_ms":,"end_time_ms":'
    b'{"task_id":"ffffffffffffffffffffffff01000000","attempt_number":0,"name":"","type":"NORMAL_TASK",'
    b'"func_or_class_name":"","language":"PYTHON","required_resources":{"CPU":1.0},'
    b'"runtime_env_info":{"serialized_runtime_env":"{}"},"placement_group_id":"ffffffffffffffffffffffffffffffffffff",'
    b'"parent_task_id":"ffffffffffffffffffffffff01000000","job_id":"01000000","label_selector":{},"events":['
    b'{"state":"PENDING_ARGS_AVAIL","created_ms":,"created_ns":},'
    b'{"state":"PENDING_NODE_ASSIGNMENT","created_ms":,"created_ns":},'
    b'{"state":"SUBMITTED_TO_WORKER","created_ms":,"created_ns":},'
    b'{"state":"RUNNING","created_ms":,"created_ns":},{"state":"FINISHED","created_ms":,"created_ns":},'
    b'{"state":"FAILED","created_ms":,"created_ns":}],"state":"FINISHED","state":"FAILED","job_id":"'
)


# What comes before each key column's hex in a `PACKED_V2` row's dictionary (row_packing.h's
# ROW_ID_PREFIXES): its entity id, node and worker, as the JSON holds them (an entity's own key
# differs by resource: its id alone, quoted).
ROW_ID_PREFIXES = (b'"', b'"node_id":"', b'"worker_id":"')


def row_ids_text(ids: Sequence[Any]) -> bytes:
    """What a `PACKED_V2` row's dictionary adds to `ROW_DICTIONARY`: each of the row's key columns
    (entity id, node, worker: `ids`, as they are stored beside it) that is an id (bytes, or a hex
    text read as its bytes by `id_value`; 1 to 512 bytes) as its JSON holds it: its prefix
    (`ROW_ID_PREFIXES`), its lower-case hex and a quote; any other value (NULL, a text not hex)
    adds nothing. An id as its bytes, not its text: neither the case a NOCASE upsert keeps of a
    text id nor the rewrite of text ids as bytes (schema 6) changes a row's dictionary. Deflate
    then refers back to the ids it cannot squeeze (about 120 bytes of a task's JSON)."""
    if len(ids) > len(ROW_ID_PREFIXES):
        raise ValueError(f"a row's dictionary takes at most {len(ROW_ID_PREFIXES)} ids")
    out = []
    for prefix, value in zip(ROW_ID_PREFIXES, ids, strict=False):
        key = id_value(value) if isinstance(value, str) else value
        if isinstance(key, bytes) and 0 < len(key) <= _ID_BYTES_MAX:
            out.append(prefix + key.hex().encode() + b'"')
    return b"".join(out)


def _dictionary(version: int, ids: Sequence[Any]) -> bytes:
    return ROW_DICTIONARY + row_ids_text(ids) if version == PACKED_V2 else ROW_DICTIONARY


def pack_row(text: str | bytes, ids: Sequence[Any] | None = None) -> bytes:
    """A row's JSON as it is stored: `PACKED_V2` with `ids` (the key columns' values as they are
    stored beside it, `row_ids_text`), `PACKED_V1` without."""
    raw = text.encode() if isinstance(text, str) else text
    if len(raw) > _MAX_TEXT:
        raise ValueError(f"a row of {len(raw)} bytes: at most {_MAX_TEXT} are stored")
    version = PACKED_V1 if ids is None else PACKED_V2
    deflater = zlib.compressobj(
        _LEVEL, zlib.DEFLATED, -15, 8, zlib.Z_DEFAULT_STRATEGY, _dictionary(version, ids or ())
    )
    return bytes((version, *len(raw).to_bytes(4, "little"))) + deflater.compress(raw) + deflater.flush()


def row_json(stored: str | bytes, ids: Sequence[Any]) -> str | bytes:
    """A stored row's JSON (what orjson.loads takes): a packed blob unpacked, a text as it is.
    `ids`: the row's key columns as read beside it (entity id, node, worker), which a `PACKED_V2`
    blob's dictionary is made of; `PACKED_V1` and text rows do without (pass ())."""
    if isinstance(stored, str):
        return stored
    if len(stored) < _HEAD or stored[0] not in (PACKED_V1, PACKED_V2):
        raise ValueError("a stored row's data is neither JSON text nor a packed row this version reads")
    length = int.from_bytes(stored[1:_HEAD], "little")
    inflater = zlib.decompressobj(-15, _dictionary(stored[0], ids))
    try:
        text = inflater.decompress(stored[_HEAD:], length + 1)
    except zlib.error as exc:
        raise ValueError(f"a stored row's packed data is damaged: {exc}") from None
    if len(text) != length:
        raise ValueError("a stored row's packed data is damaged: not its stated length")
    if not inflater.eof:  # its text whole but its deflate cut short: row_unpack refuses it too
        raise ValueError("a stored row's packed data is damaged: its deflate does not end")
    return text


def id_value(value: Any) -> Any:
    """An id column's value as the SQLite store keeps it: a hex text (an entity's id, 48 digits of a
    task's; Ray's node and worker ids, 56) as its bytes, half the size in the row and in its
    indexes; any other value as it is. The compiled row writer stores them so too (`hex_ids`), the
    compiled fold looks rows up so (row_packing.h's row_id_bytes); a filter's value is read so
    before it is compared."""
    if isinstance(value, str) and _HEX_ID.fullmatch(value):
        return bytes.fromhex(value)
    return value
