"""A real Arize Phoenix server for a test: a subprocess on 127.0.0.1 with its own free ports and
working dir (its SQLite store), no telemetry and nothing fetched from the internet. Its HTTP port
takes OTLP at /v1/traces; what it kept is read back through its own REST API
(`/v1/projects/{project}/spans`), as a user's script would ask it.

Phoenix starts slowly (imports, then its database migrations: a minute under load), so a test
starts it first and waits for it (`wait_ready`) only when it needs it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import requests

from helpers.agg_procs import free_port

READY_TIMEOUT_S = 240.0


class Phoenix:
    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.port, self.grpc_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = folder / "phoenix.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PHOENIX_", "OTEL_"))}
        env.update(
            {
                "PHOENIX_HOST": "127.0.0.1",
                "PHOENIX_PORT": str(self.port),
                "PHOENIX_GRPC_PORT": str(self.grpc_port),
                "PHOENIX_WORKING_DIR": str(folder),
                "PHOENIX_TELEMETRY_ENABLED": "false",
                "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
            }
        )
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "phoenix.server.main", "serve"],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=folder,
            )

    def _tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            assert self.proc.poll() is None, f"Phoenix exited ({self.proc.returncode}):\n{self._tail()}"
            try:
                if requests.get(f"{self.url}/healthz", timeout=5).status_code == 200:
                    return
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, f"Phoenix not ready in {timeout_s} s:\n{self._tail()}"
            time.sleep(0.1)  # a refused connection costs nothing: the module's setup waits on this

    def spans(self, trace_id: str, project: str = "default") -> list[dict[str, Any]]:
        """Every span Phoenix holds of `trace_id`, each in the shape `serve`'s trace view gives
        (trace_id, span_id, parent_span_id ("" for a root), name, status, attributes)."""
        found: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            params: dict[str, Any] = {"trace_id": trace_id, "limit": 1000}
            if cursor:
                params["cursor"] = cursor
            answer = requests.get(f"{self.url}/v1/projects/{project}/spans", params=params, timeout=30)
            if answer.status_code == 404:  # no project yet: nothing received
                return []
            assert answer.status_code == 200, answer.text
            body = answer.json()
            found += [
                {
                    "trace_id": span["context"]["trace_id"],
                    "span_id": span["context"]["span_id"],
                    "parent_span_id": span["parent_id"] or "",
                    "name": span["name"],
                    "status": span["status_code"],
                    "attributes": span["attributes"],
                }
                for span in body["data"]
            ]
            cursor = body.get("next_cursor")
            if not cursor:
                return found

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
