"""Reads no store or file can answer get 400 or 404, never a 500 (issue 43): integer filters past
64 bits, on both backends and every integer column and read path, and file paths the OS cannot take
(a NUL, a segment past its length limit) on our page and on Ray's dashboard page, served by real
`serve` processes.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import requests
from helpers.agg_procs import CliServer, start
from helpers.postgres import serve_store_args

HUGE = "99999999999999999999"  # past 64 bits


def _raw_get(host: str, port: int, target: bytes) -> bytes:
    """The status line of a GET whose target is sent as given (a client library would quote it)."""
    with socket.create_connection((host, port), timeout=30) as raw:
        raw.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        return raw.recv(64).split(b"\r\n", 1)[0]


def test_integer_filters_past_64_bits_answer_400(
    servers: list[CliServer], store_location: str | Path, tmp_path: Path
) -> None:
    server = start(servers, "serve", *serve_store_args(store_location, tmp_path))
    base = f"http://{server.address}"
    for path in ("/api/v0/tasks", "/api/v0/tasks/summarize"):  # the task filters' integer column
        for value, predicate in ((HUGE, "="), ("-" + HUGE, "!=")):
            answer = requests.get(
                base + path,
                params={
                    "filter_keys": "attempt_number",
                    "filter_predicates": predicate,
                    "filter_values": value,
                },
                timeout=30,
            )
            assert answer.status_code == 400, (path, value, answer.status_code, answer.text)
            assert "64 bits" in answer.text
    # In range, and not a number at all: answered (no row matches), as before.
    for value in ("9223372036854775807", "x"):
        answer = requests.get(
            f"{base}/api/v0/tasks",
            params={"filter_keys": "attempt_number", "filter_predicates": "=", "filter_values": value},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["data"]["result"]["result"] == []
    stats = server.stop()
    assert stats["posts"] == 0


def test_file_paths_the_os_cannot_take_answer_404(servers: list[CliServer], tmp_path: Path) -> None:
    pytest.importorskip("ray")
    server = start(servers, "serve", "--store", str(tmp_path / "s.sqlite3"), "--ray-dashboard-port", "0")
    line = server.read_line(30)
    assert line.startswith("listening ray-dashboard=127.0.0.1:"), line
    dashboard_port = int(line.rsplit(":", 1)[1])
    long = b"a" * 300
    for port, targets in (
        (dashboard_port, (b"/%00", b"/static/%00.js", b"/static/" + long, b"/" + long + b".js")),
        (server.port, (b"/static/%00.js", b"/static/" + long + b".js", b"/static/" + long)),
    ):
        for target in targets:
            status = _raw_get(server.host, port, target)
            assert status == b"HTTP/1.1 404 Not Found", (port, target[:20], status)
    # The files that are there are still served.
    assert requests.get(f"http://127.0.0.1:{dashboard_port}/index.html", timeout=30).status_code == 200
    assert requests.get(f"http://{server.address}/static/app.js", timeout=30).status_code == 200
    server.stop()
    assert "Traceback" not in server.stderr()
