"""What a client costs a server is bounded by the server's settings, not by the client (issue 43).

Each test runs our CLI's servers as subprocesses on 127.0.0.1 and plays an abusive client cheaply:
gzip bodies that inflate and are never finished, a gzip bomb, idle and slowloris connections,
more connections than allowed, made-up event type numbers, CR/LF in what gets logged, malformed
requests and undecodable gRPC messages. Memory is read from /proc/PID/status (VmRSS, VmHWM) and
compared with the configured budget; times are only ever the configured timeout plus a deadline.
"""

from __future__ import annotations

import contextlib
import gzip
import re
import select
import socket
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import grpc
import orjson
import pytest
import requests
from helpers.agg_procs import FIXTURE, CliServer, wait_until
from helpers.bridge_procs import BRIDGE_ENV

from ray_otel_events.events.registry import REGISTRY, event_type_name
from ray_otel_events.protobuf.events_event_aggregator_service_pb2 import AddEventsRequest

MiB = 1024 * 1024
DEADLINE_S = 15.0  # beyond a configured timeout: how long the test waits for the server to act
EVENTS = orjson.loads(Path(FIXTURE).read_text())


def status_of(pid: int, field: str) -> int:
    """VmRSS, VmHWM... of a process, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def metric(address: str, name: str) -> float:
    text = requests.get(f"http://{address}/metrics", timeout=30).text
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if re.match(rf"{name}(\{{| )", line)
    )


@contextlib.contextmanager
def server(command: str, *args: str, tmp_path: Path) -> Iterator[CliServer]:
    extra = {
        "sink": ["--out", str(tmp_path / "sink.jsonl")],
        "serve": ["--store", str(tmp_path / "store.sqlite3")],
    }.get(command, [])
    one = CliServer(command, *extra, *args, env=BRIDGE_ENV)
    try:
        yield one
    finally:
        one.close()


def head(path: str, length: int, gzipped: bool = False) -> bytes:
    coding = b"Content-Encoding: gzip\r\n" if gzipped else b""
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n".encode()
        + coding
        + f"Content-Length: {length}\r\n\r\n".encode()
    )


def answer_of(sock: socket.socket, timeout_s: float) -> bytes:
    """What the server sent until it closed the connection (or the time ran out)."""
    sock.settimeout(timeout_s)
    got = b""
    with contextlib.suppress(TimeoutError, ConnectionError):
        while chunk := sock.recv(65536):
            got += chunk
    return got


def closed_by_peer(sock: socket.socket, timeout_s: float) -> bool:
    """True once the server closes the connection (EOF or reset) within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while (remaining := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([sock], [], [], remaining)
        if ready:
            try:
                if not sock.recv(65536):
                    return True
            except ConnectionError:
                return True
    return False


# -- memory: bodies in flight ------------------------------------------------------------------

BUDGET = 16 * MiB
INFLATED = 4 * MiB
CLIENTS = 24  # 96 MiB of inflated bodies held open, six times the budget


@pytest.mark.parametrize("command", ["serve", "bridge"])
def test_bodies_held_open_are_bounded_by_the_budget(tmp_path: Path, command: str) -> None:
    body = gzip.compress(b"[" + b" " * (INFLATED - 2) + b"]")
    with server(command, "--max-bodies-bytes", str(BUDGET), tmp_path=tmp_path) as one:
        pid = one.proc.pid
        before = status_of(pid, "VmRSS")
        clients = []
        for _ in range(CLIENTS):
            sock = socket.create_connection((one.host, one.port), timeout=30)
            sock.sendall(head("/v1/ray-events", len(body), gzipped=True) + body[:-1])  # never finished
            clients.append(sock)
        refused: dict[socket.socket, bytes] = {}
        deadline = time.monotonic() + 60
        while len(refused) < CLIENTS - BUDGET // INFLATED and time.monotonic() < deadline:
            waiting = [s for s in clients if s not in refused]
            ready, _, _ = select.select(waiting, [], [], 1.0)
            for sock in ready:
                refused[sock] = answer_of(sock, 30)
        assert len(refused) >= CLIENTS - BUDGET // INFLATED, (
            f"{len(refused)} of {CLIENTS} held bodies were refused; {one.stderr()}"
        )
        for answer in refused.values():
            assert answer.startswith(b"HTTP/1.1 503"), answer[:200]
            assert b"\r\nretry-after: " in answer.lower(), answer[:300]
        held = status_of(pid, "VmRSS") - before
        # Without the budget: 96 MiB of inflated bodies. With it: at most the budget, plus the
        # allocator's and the answers' slack.
        assert held < BUDGET + 24 * MiB, f"RSS grew {held / MiB:.0f} MiB under a {BUDGET // MiB} MiB budget"
        in_flight = metric(one.address, "ray_otel_events_http_bodies_in_flight_bytes")
        assert 0 < in_flight <= BUDGET
        for sock in clients:
            sock.close()
        wait_until(
            lambda: metric(one.address, "ray_otel_events_http_bodies_in_flight_bytes") == 0,
            "the bodies given back once their clients closed",
        )
        wait_until(
            lambda: status_of(pid, "VmRSS") - before < 8 * MiB,
            "the memory of the closed clients' bodies freed",
        )
        # The server still takes a whole body at once.
        whole = requests.post(
            f"http://{one.address}/v1/ray-events",
            data=gzip.compress(orjson.dumps(EVENTS[:2])),
            headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
            timeout=30,
        )
        assert whole.status_code == 200, whole.text
        assert metric(one.address, "ray_otel_events_server_client_errors_total") >= len(refused)
        # Refused and abandoned bodies are the clients' errors: counted lines, no traceback.
        assert "Traceback" not in one.stderr(), one.stderr()


def gzip_bomb(inflated_mib: int) -> bytes:
    """A gzip stream of `inflated_mib` MiB of zeros, about 1 KB a MiB (its trailer is wrong: a
    server that inflates it all finds out only at the end)."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    mib = bytes(MiB)
    block = deflate.compress(mib) + deflate.flush(zlib.Z_FULL_FLUSH)
    repeated = deflate.compress(mib) + deflate.flush(zlib.Z_FULL_FLUSH)
    stream = block + repeated * (inflated_mib - 1) + deflate.flush()
    return b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + stream + bytes(8)


SINK_LIMIT = 64 * MiB


def test_sink_stops_a_gzip_bomb_at_its_limit(tmp_path: Path) -> None:
    bomb = gzip_bomb(600)  # past the 512 MiB aiohttp let the sink inflate to before its 413
    with server("sink", tmp_path=tmp_path) as sink:
        pid = sink.proc.pid
        peak_before = status_of(pid, "VmHWM")
        for path in ("/v1/events", "/v1/traces"):
            refused = requests.post(
                f"http://{sink.address}{path}",
                data=bomb,
                headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
                timeout=60,
            )
            assert refused.status_code == 413, (path, refused.status_code, refused.text[:300])
        peak = status_of(pid, "VmHWM") - peak_before
        assert peak < SINK_LIMIT + 32 * MiB, f"the sink's peak RSS grew {peak / MiB:.0f} MiB"
        ok = requests.post(f"http://{sink.address}/v1/events", json=EVENTS[:1], timeout=30)
        assert ok.status_code == 200


# -- time: idle, slow headers, slow bodies ----------------------------------------------------

IDLE_S = 1.0


@pytest.mark.parametrize("command", ["serve", "bridge", "sink", "aggregator"])
def test_idle_and_slow_header_connections_are_closed(tmp_path: Path, command: str) -> None:
    args = ["--idle-timeout", str(IDLE_S)]
    if command == "aggregator":
        args += ["--metrics-port", "0"]
    with server(command, *args, tmp_path=tmp_path) as one:
        port = metrics_port(one) if command == "aggregator" else one.port
        idle = socket.create_connection(("127.0.0.1", port), timeout=30)
        slow = socket.create_connection(("127.0.0.1", port), timeout=30)
        slow.sendall(b"GET /healthz HTTP/1.1\r\n")
        started = time.monotonic()
        # A header line every tenth of the timeout: the head never completes.
        closed = False
        while time.monotonic() - started < IDLE_S + DEADLINE_S:
            try:
                slow.sendall(b"X-Slow: 1\r\n")
            except OSError:
                closed = True
                break
            if closed_by_peer(slow, IDLE_S / 10):
                closed = True
                break
        assert closed, f"{command}: a slowloris head was kept past {IDLE_S} s + {DEADLINE_S} s"
        assert closed_by_peer(idle, IDLE_S + DEADLINE_S), f"{command}: an idle connection was kept"
        idle.close()
        slow.close()
        # A client that asks in time is answered.
        assert requests.get(f"http://127.0.0.1:{port}/healthz", timeout=30).status_code == 200


def metrics_port(aggregator: CliServer) -> int:
    """The aggregator's metrics port, from its log line `... metrics http=HOST:PORT ...`."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = re.search(r"metrics http=[^ :]+:(\d+)", aggregator.stderr())
        if found:
            return int(found.group(1))
        time.sleep(0.05)
    raise AssertionError(f"no metrics port logged; {aggregator.stderr()}")


def test_a_slow_body_is_answered_408_and_closed(tmp_path: Path) -> None:
    with server("sink", "--body-timeout", "1", tmp_path=tmp_path) as sink:
        sock = socket.create_connection((sink.host, sink.port), timeout=30)
        sock.sendall(head("/v1/events", 1000) + b"[")
        answer = answer_of(sock, 1 + DEADLINE_S)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert closed_by_peer(sock, DEADLINE_S)
        sock.close()


# -- descriptors: a cap on connections ----------------------------------------------------------

CAP = 8


def test_connections_past_the_cap_are_refused_and_admitted_work_completes(tmp_path: Path) -> None:
    with server("sink", "--max-connections", str(CAP), tmp_path=tmp_path) as sink:
        admitted = [socket.create_connection((sink.host, sink.port), timeout=30) for _ in range(CAP)]
        # The server accepts in order; once the last admitted one is known to be served, the cap is full.
        admitted[-1].sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b"200" in admitted[-1].recv(4096).split(b"\r\n", 1)[0]
        extra = [socket.create_connection((sink.host, sink.port), timeout=30) for _ in range(3)]
        for sock in extra:
            answer = answer_of(sock, DEADLINE_S)
            assert answer.startswith(b"HTTP/1.1 503"), answer[:200]
            assert b"Retry-After: 1" in answer
            sock.close()
        body = orjson.dumps(EVENTS[:1])
        admitted[0].sendall(head("/v1/events", len(body)) + body)
        assert admitted[0].recv(4096).startswith(b"HTTP/1.1 200"), "an admitted request was not served"
        for sock in admitted:
            sock.close()
        wait_until(
            lambda: _served(sink), "a new connection served once the others closed", timeout_s=DEADLINE_S
        )
        assert metric(sink.address, "ray_otel_events_server_refused_connections_total") == 3


def test_grpc_connections_past_the_cap_are_refused(tmp_path: Path) -> None:
    method = "/ray.rpc.events.EventAggregatorService/AddEvents"
    with server("aggregator", "--max-connections", "2", tmp_path=tmp_path) as aggregator:
        # A channel of its own each (no shared subchannel): one connection a channel.
        channels = [
            grpc.insecure_channel(aggregator.address, options=[("grpc.use_local_subchannel_pool", 1)])
            for _ in range(3)
        ]
        try:
            for channel in channels[:2]:
                channel.unary_unary(method)(b"", timeout=30)
            with pytest.raises(grpc.RpcError) as refused:
                channels[2].unary_unary(method)(b"", timeout=5)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            channels[0].unary_unary(method)(b"", timeout=30)  # the admitted ones are still served
        finally:
            for channel in channels:
                channel.close()


def _served(sink: CliServer) -> bool:
    try:
        return requests.get(f"http://{sink.address}/healthz", timeout=5).status_code == 200
    except requests.ConnectionError:
        return False


# -- metrics of fixed size ---------------------------------------------------------------------

UNKNOWN_TYPES = 2000


def test_unknown_event_types_share_one_series(tmp_path: Path) -> None:
    with server("aggregator", "--metrics-port", "0", tmp_path=tmp_path) as aggregator:
        request = AddEventsRequest()
        for number in range(UNKNOWN_TYPES):
            event = request.events_data.events.add(event_id=number.to_bytes(4, "big"))
            event.event_type = 1000 + number  # type: ignore[assignment]
        with grpc.insecure_channel(aggregator.address) as channel:
            channel.unary_unary("/ray.rpc.events.EventAggregatorService/AddEvents")(
                request.SerializeToString(), timeout=30
            )
        port = metrics_port(aggregator)
        text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text
        labels = set(re.findall(r'event_type="([^"]*)"', text))
        known = {event_type_name(number) for number in REGISTRY}
        assert labels <= known | {"unknown"}, sorted(labels - known)[:10]
        assert "unknown" in labels
        assert sum(1 for line in text.splitlines() if "event_type=" in line) < 50
        received = [
            line for line in text.splitlines() if line.startswith("ray_otel_events_receiver_received")
        ]
        assert any(
            'event_type="unknown"' in line and line.endswith(f" {UNKNOWN_TYPES}.0") for line in received
        )


# -- logs no one can flood or forge ------------------------------------------------------------

FORGED = "2026-01-01 00:00:00,000 ERROR ray_otel_events: FORGED"


def forged_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if line.startswith(("2026-01-01", "FORGED"))]


def test_crlf_in_a_grpc_method_name_forges_no_line(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    token = "s3cret"
    (tmp_path / "token").write_text(token)
    args = ["--ray-dashboard-port", "0", "--ray-gcs-port", "0", "--log-format", "text"]
    with server("serve", *args, "--auth-token-file", str(tmp_path / "token"), tmp_path=tmp_path) as serve:
        serve.read_line(30)  # listening ray-dashboard=...
        gcs = serve.read_line(30).split("=", 1)[1]
        with grpc.insecure_channel(gcs) as channel:
            # The health service is open by its methods' whole names, not by their prefix.
            with pytest.raises(grpc.RpcError) as unauthenticated:
                channel.unary_unary(f"/grpc.health.v1.Health/x\r\n{FORGED}")(b"", timeout=30)
            assert unauthenticated.value.code() == grpc.StatusCode.UNAUTHENTICATED
            signed = (("authorization", f"Bearer {token}"),)
            with pytest.raises(grpc.RpcError) as unimplemented:
                channel.unary_unary(f"/ray.rpc.Nope/x\r\n{FORGED}")(b"", timeout=30, metadata=signed)
            assert unimplemented.value.code() == grpc.StatusCode.UNIMPLEMENTED
            wait_until(lambda: "ray.rpc.Nope" in serve.stderr(), "the unanswered method's line")
            log = serve.stderr()
            assert not forged_lines(log), forged_lines(log)
            assert "/ray.rpc.Nope/x\\x0d\\x0a2026-01-01" in log, log[-2000:]
            assert "Health/x" not in log, "a method under the open prefix reached the facade"
            # An undecodable message to a method that exists: INVALID_ARGUMENT, one line, no traceback.
            for _ in range(20):
                with pytest.raises(grpc.RpcError) as undecodable:
                    channel.unary_unary("/ray.rpc.NodeInfoGcsService/GetClusterId")(
                        b"\xff\xff", timeout=30, metadata=signed
                    )
                assert undecodable.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        wait_until(lambda: "undecodable_grpc_message" in serve.stderr(), "the undecodable calls' line")
        log = serve.stderr()
        assert "Traceback" not in log, log[-3000:]
        assert log.count("undecodable_grpc_message") == 1, log[-3000:]


def test_crlf_in_an_event_id_refused_by_the_fold_forges_no_line(tmp_path: Path) -> None:
    lifecycle = next(e for e in EVENTS if e["eventType"] == "TASK_LIFECYCLE_EVENT")
    bad = dict(
        lifecycle,
        eventId=f"YmFk\r\n{FORGED}",
        taskLifecycleEvent=dict(lifecycle["taskLifecycleEvent"], workerId="not base64!"),
    )
    with server("serve", "--log-format", "text", tmp_path=tmp_path) as serve:
        posted = requests.post(f"http://{serve.address}/v1/ray-events", json=[bad], timeout=30)
        assert posted.status_code == 200, posted.text
        wait_until(lambda: "YmFk" in serve.stderr(), "the refused event's line")
        log = serve.stderr()
        assert not forged_lines(log), forged_lines(log)


MALFORMED = [
    b"GET / HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
    b"GARBAGE\r\n\r\n",
]


@pytest.mark.parametrize("command", ["serve", "sink"])
def test_malformed_requests_log_one_counted_line(tmp_path: Path, command: str) -> None:
    with server(command, tmp_path=tmp_path) as one:
        for _ in range(10):
            for raw in MALFORMED:
                with socket.create_connection((one.host, one.port), timeout=30) as sock:
                    sock.sendall(raw)
                    assert sock.recv(4096).split(b" ", 2)[1] == b"400"
        total = len(MALFORMED) * 10
        wait_until(
            lambda: metric(one.address, "ray_otel_events_server_client_errors_total") >= total,
            "every malformed request counted",
        )
        log = one.stderr()
        assert "Traceback" not in log and "Error handling request" not in log, log[-3000:]
        assert log.count("malformed_http_request") == 1, log[-3000:]
