"""The OTLP hook's forwarder presents its client certificate (OTEL_EXPORTER_OTLP_[SIGNAL_]
CLIENT_CERTIFICATE / _CLIENT_KEY) and verifies the Collector with OTEL_EXPORTER_OTLP_CERTIFICATE,
over http/protobuf and grpc, to real TLS servers that require client certificates; without one
the failure is logged and counted, and the spool kept. The bridge's OTLP exporter, which reads the
same settings, presents it too."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import orjson
import pytest
from helpers.certs import Certs, make_certs
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from ray_otel_events.config import ConfigError, OtlpSignalConfig
from ray_otel_events.exporters.otlp import RETRYABLE_FAILURES, OtlpHttpPublisherClient, OtlpPayload
from ray_otel_events.exporters.retry import SendError

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "spool"
SPOOL = FIXTURES / "ray" / "26818.4433a69a.000001.spool"  # a Ray worker's spans (and task events)
SPANS = sum(1 for line in SPOOL.read_bytes().splitlines() if line.startswith(b'["E"'))


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


class Received:
    """What a server accepted: (signal path, body, the client certificate's common name)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: list[tuple[str, bytes, str]] = []

    def add(self, path: str, body: bytes, client: str) -> None:
        with self.lock:
            self.items.append((path, body, client))

    def spans(self) -> int:
        with self.lock:
            bodies = [
                body for path, body, _ in self.items if path.endswith(("/v1/traces", "TraceService/Export"))
            ]
        requests = [ExportTraceServiceRequest.FromString(body) for body in bodies]
        return sum(len(ss.spans) for r in requests for rs in r.resource_spans for ss in rs.scope_spans)


@contextmanager
def https_server(certs: Certs, received: Received) -> Iterator[str]:
    """OTLP/HTTP over TLS that takes only clients with a certificate our CA signed."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            peer: Any = self.connection.getpeercert()  # type: ignore[attr-defined]
            subject = dict(item[0] for item in peer["subject"])
            received.add(self.path, body, str(subject["commonName"]))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(certs.ca))
    context.load_cert_chain(str(certs.server_cert), str(certs.server_key))
    context.verify_mode = ssl.CERT_REQUIRED
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.handle_error = lambda *args: None  # type: ignore[method-assign]  # refused handshakes
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextmanager
def grpc_server(certs: Certs, received: Received) -> Iterator[str]:
    """OTLP/gRPC over TLS with `require_client_auth`; bodies kept as sent."""
    from concurrent import futures

    def service(name: str) -> grpc.GenericRpcHandler:
        def export(body: bytes, context: grpc.ServicerContext) -> bytes:
            names = context.auth_context().get("x509_common_name", [b""])
            received.add(f"{name}/Export", body, names[0].decode())
            return b""

        return grpc.method_handlers_generic_handler(
            name, {"Export": grpc.unary_unary_rpc_method_handler(export)}
        )

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers(
        (
            service("opentelemetry.proto.collector.trace.v1.TraceService"),
            service("opentelemetry.proto.collector.logs.v1.LogsService"),
        )
    )
    credentials = grpc.ssl_server_credentials(
        [(certs.server_key.read_bytes(), certs.server_cert.read_bytes())],
        root_certificates=certs.ca.read_bytes(),
        require_client_auth=True,
    )
    port = server.add_secure_port("127.0.0.1:0", credentials)
    server.start()
    try:
        yield f"https://127.0.0.1:{port}"
    finally:
        server.stop(None)


def _forward(tmp_path: Path, env: dict[str, str]) -> tuple[Path, dict[str, Any], str]:
    """A real forwarder on a copy of a Ray worker's spool, until it exits by itself: the folder,
    its counters and its log."""
    folder = tmp_path / "spool" / "dest"
    folder.mkdir(parents=True)
    shutil.copy(SPOOL, folder / SPOOL.name)
    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    run_env = {
        **base,
        "RAY_OTEL_EVENTS_FORWARDER_IDLE_SECONDS": "0.2",
        "RAY_OTEL_EVENTS_FORWARDER_RETRY_SECONDS": "1",
        "RAY_OTEL_EVENTS_FORWARDER_NICE": "0",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "3000",
        **env,
    }
    with open(folder / "forwarder.log", "ab") as log:
        subprocess.run(
            [sys.executable, "-m", "ray_otel_events.tracing.forwarder", str(folder)],
            env=run_env,
            stdout=subprocess.DEVNULL,
            stderr=log,
            timeout=60,
            check=True,
        )
    counters = orjson.loads((folder / "forwarder.stats.json").read_bytes())["counters"]
    return folder, counters, (folder / "forwarder.log").read_text()


def _tls_env(endpoint: str, protocol: str, certs: Certs, variant: str) -> dict[str, str]:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
        "OTEL_EXPORTER_OTLP_CERTIFICATE": str(certs.ca),
    }
    if variant == "all":
        env["OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"] = str(certs.client_cert)
        env["OTEL_EXPORTER_OTLP_CLIENT_KEY"] = str(certs.client_key)
    elif variant == "per-signal":
        for signal in ("TRACES", "LOGS"):
            env[f"OTEL_EXPORTER_OTLP_{signal}_CLIENT_CERTIFICATE"] = str(certs.client_cert)
            env[f"OTEL_EXPORTER_OTLP_{signal}_CLIENT_KEY"] = str(certs.client_key)
    return env


SERVERS = {"http/protobuf": https_server, "grpc": grpc_server}


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
@pytest.mark.parametrize("variant", ["all", "per-signal"])
def test_the_forwarder_presents_its_client_certificate(
    tmp_path: Path, certs: Certs, protocol: str, variant: str
) -> None:
    received = Received()
    with SERVERS[protocol](certs, received) as endpoint:
        env = _tls_env(endpoint, protocol, certs, variant)
        if protocol == "http/protobuf" and variant == "per-signal":
            env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = endpoint + "/v1/traces"
        folder, counters, log = _forward(tmp_path, env)
    assert received.spans() == SPANS
    assert {client for _, _, client in received.items} == {"test client"}
    assert len({path for path, _, _ in received.items}) == 2  # the spans and their task event records
    assert counters["exported_spans"][0]["value"] == SPANS and "retryable_failures" not in counters
    assert not list(folder.glob("*.spool")) and "not delivered" not in log


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_without_a_client_certificate_the_failure_is_logged_counted_and_kept(
    tmp_path: Path, certs: Certs, protocol: str
) -> None:
    received = Received()
    with SERVERS[protocol](certs, received) as endpoint:
        folder, counters, log = _forward(tmp_path, _tls_env(endpoint, protocol, certs, "none"))
    assert received.items == []
    assert counters["retryable_failures"][0]["value"] >= 1 and "exported_spans" not in counters
    assert "traces not delivered, kept in the spool" in log
    assert [p.name for p in folder.glob("*.spool")] == [SPOOL.name]  # for the next forwarder


def test_the_bridge_otlp_exporter_presents_the_client_certificate_too(certs: Certs) -> None:
    """The same settings (`otlp_signal_config`) reach the bridge's OTLP exporter: with the client
    certificate its request is taken; without, the refused handshake is a counted, retryable failure."""
    received = Received()
    with https_server(certs, received) as endpoint:
        url = endpoint + "/v1/traces"
        mtls = OtlpSignalConfig(
            url,
            certificate=str(certs.ca),
            client_certificate=str(certs.client_cert),
            client_key=str(certs.client_key),
        )
        client = OtlpHttpPublisherClient("traces", mtls)

        async def send(client: OtlpHttpPublisherClient) -> None:
            try:
                await client.send(OtlpPayload(ExportTraceServiceRequest().SerializeToString(), 1))
            finally:
                await client.close()

        asyncio.run(send(client))
        assert [(path, who) for path, _, who in received.items] == [("/v1/traces", "test client")]
        without = OtlpHttpPublisherClient("traces", OtlpSignalConfig(url, certificate=str(certs.ca)))
        with pytest.raises(SendError) as refused:
            asyncio.run(send(without))
    assert refused.value.retryable and len(received.items) == 1
    assert without.counters.get(RETRYABLE_FAILURES, signal="traces", status="connection") == 1
    with pytest.raises(ConfigError, match="cannot load client certificate"):
        OtlpHttpPublisherClient("traces", dataclasses.replace(mtls, client_key=str(certs.server_key)))
