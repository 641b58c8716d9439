"""`POST /v1/ray-log-files?session=S&node=N&file=RELPATH&offset=K`: a node's log file's bytes from
byte K, as `ray-otel-events collect` sends them (application/octet-stream, gzip allowed).

Every parameter is checked before the body is read: a session name as Ray names its folders, a hex
node id, a file name relative to the session's `logs/` folder (no `..`, no leading `/`, no control
characters), an offset from 0. A chunk is kept once by all four (the consumer's business), so the
collector's resend after a restart is harmless.

Answers: 200 `{"accepted": bytes}`; 400/413/415 `{"error": reason}`; 503 with `Retry-After` while the
consumer cannot take it.
"""

from __future__ import annotations

import abc
import re

import orjson
from aiohttp import web

from ray_otel_events.metrics import Counters
from ray_otel_events.receivers.json_answers import Refused, check_post, hand_over, read_post_body, refusal

PATH = "/v1/ray-log-files"
MAX_CHUNK_BYTES = 16 * 1024 * 1024
MAX_OFFSET = 2**62
_SESSION = re.compile(r"session_[0-9A-Za-z_.-]{1,200}")
_NODE = re.compile(r"[0-9a-f]{1,128}")
_FILE_PART = re.compile(r"[0-9A-Za-z_.@+=,-]{1,255}")

# Counter names.
ACCEPTED_BYTES = "accepted_bytes"


class LogChunkConsumer(abc.ABC):
    @abc.abstractmethod
    async def consume_log_chunk(self, session: str, node: str, file: str, start: int, data: bytes) -> None:
        """Keep the chunk (returning means stored), or raise QueueFullError."""


def chunk_key(query: dict[str, str]) -> tuple[str, str, str, int]:
    """(session, node, file, offset) from the query; ValueError names what is wrong."""
    session, node, file = (query.get(k, "") for k in ("session", "node", "file"))
    if not _SESSION.fullmatch(session):
        raise ValueError(f"session {session[:80]!r} is not a Ray session name (session_...)")
    if not _NODE.fullmatch(node):
        raise ValueError(f"node {node[:80]!r} is not a hex node id")
    parts = file.split("/")
    if len(parts) > 4 or not all(_FILE_PART.fullmatch(p) and p not in (".", "..") for p in parts):
        raise ValueError(f"file {file[:80]!r} is not a file name under the session's logs folder")
    raw = query.get("offset", "")
    if not raw.isdigit() or int(raw) > MAX_OFFSET:
        raise ValueError(f"offset {raw[:30]!r} is not a byte offset (0..{MAX_OFFSET})")
    return session, node, file, int(raw)


class RayLogFilesHttpReceiver:
    def __init__(self, consumer: LogChunkConsumer, max_body_bytes: int = MAX_CHUNK_BYTES) -> None:
        self.consumer = consumer
        self.max_body_bytes = max_body_bytes
        self.counters = Counters("ray_log_files_receiver")

    def routes(self) -> list[web.RouteDef]:
        return [web.post(PATH, self.handle)]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        try:
            check_post(request, self.counters, "application/octet-stream", "the file's bytes")
            try:
                session, node, file, start = chunk_key(dict(request.query))
            except ValueError as exc:
                return refusal(self.counters, 400, str(exc))
            data = await read_post_body(request, self.counters, self.max_body_bytes)
            # an empty body too: the file exists (Ray's Logs page lists empty files)
            taking = self.consumer.consume_log_chunk(session, node, file, start, data)
            await hand_over(self.counters, taking, "the log file's bytes")
        except Refused as refused:
            return refused.response
        self.counters.add(ACCEPTED_BYTES, len(data))
        return web.Response(body=orjson.dumps({"accepted": len(data)}), content_type="application/json")
