"""A real OTLP/HTTP receiver on 127.0.0.1 that records what it accepts and answers with scripted
statuses: what the OTLP hook's exporters are tested against."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class RecordingReceiver:
    """Answers every POST with the next scripted status (200 once the script runs out; a 503 asks
    for a retry at once) and keeps the headers and body of each it accepts."""

    def __init__(self) -> None:
        self.statuses: list[int] = []
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.paths: list[str] = []  # the path of each accepted request, in step with `requests`
        self.lock = threading.Lock()


@contextmanager
def serve_receiver(receiver: RecordingReceiver) -> Iterator[str]:
    """Serves `receiver` until the block ends; yields its base URL (no path)."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            with receiver.lock:
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                if status == 200:
                    receiver.requests.append((dict(self.headers), body))
                    receiver.paths.append(self.path)
            self.send_response(status)
            if status == 503:
                self.send_header("Retry-After", "0")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
