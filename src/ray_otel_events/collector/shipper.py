"""POSTing what was read to `serve`, until it is stored.

Export events go as one JSON object per batch to `/v1/ray-export-events`; a log file's bytes from an
offset to `/v1/ray-log-files` (serve keeps a chunk once by session, node, file and offset, so a
resend is harmless). A 200 is stored; a 400 or 413 says the batch itself is refused, so it is
dropped (logged and counted) rather than sent for ever; anything else (a connection error, 5xx, a
404 from a serve without the endpoint, 401) is NotNow: the file is read again from the same offset
on a later pass, and that endpoint waits a growing time (Retry-After honoured) before it is tried
again. One endpoint failing never holds back the other's files.
"""

from __future__ import annotations

import gzip
import logging
import time
from collections import Counter
from typing import Any
from urllib.parse import urlencode

import orjson
import requests

from ray_otel_events.exporters.retry import parse_retry_after

logger = logging.getLogger(__name__)

EXPORT_EVENTS_PATH = "/v1/ray-export-events"
LOG_FILES_PATH = "/v1/ray-log-files"
DROPPED_STATUSES = frozenset({400, 413})
FIRST_WAIT_S = 0.5
MAX_WAIT_S = 30.0
GZIP_FROM_BYTES = 4096
TIMEOUT_S = 30.0


class NotNow(Exception):
    """The POST failed in a way that may heal (or its endpoint is waiting out an earlier failure):
    the file is read again from the same offset on a later pass."""


class Shipper:
    """POSTs to one `serve` (see the module doc); counts into `counters`."""

    def __init__(self, base_url: str, counters: Counter[str]) -> None:
        self.base_url = base_url.rstrip("/")
        self.counters = counters
        self.http = requests.Session()
        self._cooling: dict[str, tuple[float, float]] = {}  # endpoint -> (until, its wait)

    def close(self) -> None:
        self.http.close()

    def export_events(self, session: str, node_id: str, hostname: str, events: list[bytes]) -> bool:
        """True once stored; False when serve refused the batch (dropped). `events` are JSON
        object texts, sent exactly as read."""
        body = (
            b'{"sessionName":'
            + orjson.dumps(session)
            + b',"nodeId":'
            + orjson.dumps(node_id)
            + b',"hostname":'
            + orjson.dumps(hostname)
            + b',"events":['
            + b",".join(events)
            + b"]}"
        )
        answer = self._post(EXPORT_EVENTS_PATH, body, "application/json", f"{len(events)} export events")
        if answer is None:
            return False
        self.counters["export_events_rejected"] += int(answer.get("rejected", 0) or 0)
        for error in (answer.get("errors") or [])[:3]:
            logger.warning("serve rejected an export event: %s", str(error)[:300])
        return True

    def log_bytes(self, session: str, node_id: str, name: str, offset: int, data: bytes) -> bool:
        query = urlencode({"session": session, "node": node_id, "file": name, "offset": offset})
        what = f"{len(data)} bytes of {name} at {offset}"
        return self._post(f"{LOG_FILES_PATH}?{query}", data, "application/octet-stream", what) is not None

    def _post(self, path: str, body: bytes, media: str, what: str) -> dict[str, Any] | None:
        endpoint = path.split("?", 1)[0]
        waiting = self._cooling.get(endpoint)
        if waiting is not None and time.monotonic() < waiting[0]:
            raise NotNow(f"{endpoint} failed {waiting[1]:.1f} s ago")
        headers = {"Content-Type": media}
        if len(body) >= GZIP_FROM_BYTES:
            body = gzip.compress(body, compresslevel=1)
            headers["Content-Encoding"] = "gzip"
        retry_after: float | None = None
        try:
            response = self.http.post(self.base_url + path, data=body, headers=headers, timeout=TIMEOUT_S)
        except requests.RequestException as exc:
            problem = f"cannot reach {self.base_url}: {type(exc).__name__}"
        else:
            if response.status_code == 200:
                self._cooling.pop(endpoint, None)
                try:
                    answer = response.json()
                except ValueError:
                    answer = {}
                return answer if isinstance(answer, dict) else {}
            text = response.text[:300]
            if response.status_code in DROPPED_STATUSES:
                self.counters["batches_dropped"] += 1
                logger.error("serve refused %s (HTTP %d: %s); dropped", what, response.status_code, text)
                return None
            problem = f"serve answered HTTP {response.status_code}: {text}"
            retry_after = parse_retry_after(response.headers.get("Retry-After"))
        self.counters["post_failures"] += 1
        wait = min(MAX_WAIT_S, waiting[1] * 2) if waiting is not None else FIRST_WAIT_S
        wait = max(wait, min(retry_after or 0.0, MAX_WAIT_S))
        self._cooling[endpoint] = (time.monotonic() + wait, wait)
        logger.warning("sending %s to %s failed (%s); trying again in %.1f s", what, endpoint, problem, wait)
        raise NotNow(problem)
