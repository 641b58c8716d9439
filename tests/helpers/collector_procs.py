"""`ray-otel-events collect` as a real subprocess, and a real HTTP server answering its export-event
POSTs as serve's `/v1/ray-export-events` does (200 `{"accepted", "rejected", "errors"}`), recording
each body: the wire of the contract with that endpoint, checked here while serve's own is built in
another branch (issue 45). Log-file POSTs it hands to a real `serve`, unchanged.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import requests

from helpers.agg_procs import check_ended_well, clean_env

LINE_TIMEOUT_S = 60.0


class Collector:
    """One `python -m ray_otel_events collect --to URL ...` process; stdout's lines are read."""

    def __init__(
        self, url: str, temp_dir: Path, state_dir: Path, *args: str, cwd: Path | None = None
    ) -> None:
        """`cwd`: where it runs, `temp_dir` relative to it (a live cluster's helper stops every
        process whose command line names the cluster's temp dir: the collector outlives it)."""
        self.argv = [
            sys.executable,
            "-m",
            "ray_otel_events",
            "collect",
            "--log-format",
            "json",
            "--to",
            url,
            "--ray-temp-dir",
            str(temp_dir),
            "--state-dir",
            str(state_dir),
            "--poll-interval",
            "0.2",
            *args,
        ]
        self._stderr = tempfile.NamedTemporaryFile(prefix="collect-", suffix=".stderr", delete=False)  # noqa: SIM115
        self.proc = subprocess.Popen(
            self.argv,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=clean_env(),
            text=True,
            bufsize=1,
            cwd=cwd,
        )
        self.state_dir = state_dir
        self.ended_by_test = False

    def read_line(self) -> str:
        assert self.proc.stdout is not None
        result: list[str] = []
        reader = threading.Thread(target=lambda: result.append(self.proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(LINE_TIMEOUT_S)
        assert result and result[0], f"{self.argv}: no line within {LINE_TIMEOUT_S}s; {self.logged()[-3000:]}"
        return result[0].rstrip("\n")

    def logged(self) -> str:
        return Path(self._stderr.name).read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM) -> dict[str, Any]:
        """Signal, wait for exit 0, return the `stats {json}` line's counters."""
        self.ended_by_test = True
        self.proc.send_signal(sig)
        line = self.read_line()
        assert self.proc.wait(LINE_TIMEOUT_S) == 0, self.logged()[-3000:]
        assert line.startswith("stats "), line
        stats: dict[str, Any] = json.loads(line[len("stats ") :])
        return stats

    def kill(self) -> None:
        self.ended_by_test = True
        self.proc.kill()
        self.proc.wait(30)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.kill()
        logged = self.logged()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._stderr.close()
        os.unlink(self._stderr.name)
        check_ended_well(self.proc, logged, ended_by_test=self.ended_by_test)


class ExportEventsServer:
    """Records export-event POST bodies; answers the first `fail_first` (and any while `down`) with
    503, a batch holding
    an event with `"refuse": true` with 400; passes `/v1/ray-log-files` POSTs on to `serve_url`."""

    def __init__(self, serve_url: str = "", fail_first: int = 0) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.failed = 0
        self.fail_first = fail_first
        self.down = False  # while True, every export POST is answered 503
        self.log_posts = 0  # log-file POSTs received
        self.serve_url = serve_url
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                owner.log_posts += self.path.startswith("/v1/ray-log-files")
                if self.headers.get("Content-Encoding") == "gzip":
                    raw = gzip.decompress(raw)
                if self.path.startswith("/v1/ray-log-files") and owner.serve_url:
                    answer = requests.post(
                        owner.serve_url + self.path,
                        data=raw,
                        headers={"Content-Type": self.headers.get("Content-Type", "")},
                        timeout=30,
                    )
                    self._answer(answer.status_code, answer.content)
                    return
                if self.path != "/v1/ray-export-events":
                    self._answer(404, b"{}")
                    return
                if owner.failed < owner.fail_first or owner.down:
                    owner.failed += 1
                    self._answer(503, b'{"error": "failing on purpose"}')
                    return
                body = json.loads(raw)
                if any(event.get("refuse") for event in body["events"]):
                    self._answer(400, b'{"error": "refused on purpose"}')
                    return
                owner.bodies.append(body)
                answer_body = {"accepted": len(body["events"]), "rejected": 0, "errors": []}
                self._answer(200, json.dumps(answer_body).encode())

            def _answer(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def events(self) -> list[dict[str, Any]]:
        return [event for body in self.bodies for event in body["events"]]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def export_events_server(serve_url: str = "", fail_first: int = 0) -> Iterator[ExportEventsServer]:
    server = ExportEventsServer(serve_url, fail_first)
    try:
        yield server
    finally:
        server.close()
