"""Bearer tokens and TLS on real servers: no token, wrong token, right token; TLS with and without
client certificates, on gRPC (aggregator) and HTTP (sink, bridge, the aggregator's metrics port)."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import grpc
import pytest
import requests
from helpers.agg_procs import CliServer, free_port, refused_by_cli, start, wait_for_lines
from helpers.certs import Certs, make_certs

from ray_otel_events.config import ClientSecurityConfig
from ray_otel_events.producer.aggregator_client import GrpcAggregatorExporter
from ray_otel_events.protobuf import events_event_aggregator_service_pb2 as svc
from ray_otel_events.protobuf import events_event_aggregator_service_pb2_grpc as svc_grpc
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent

TOKEN = "s3cret-token-for-tests"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def token_file(tmp_path: Path) -> str:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return str(path)


def one_request() -> svc.AddEventsRequest:
    request = svc.AddEventsRequest()
    event = RayEvent(event_id=os.urandom(16), event_type=RayEvent.TASK_DEFINITION_EVENT, message="secured")
    event.task_definition_event.task_name = "secured"  # a payload: one without is kept raw
    request.events_data.events.append(event)
    return request


def add_events(channel: grpc.Channel, metadata: tuple[tuple[str, str], ...] | None) -> grpc.StatusCode:
    stub = svc_grpc.EventAggregatorServiceStub(channel)  # type: ignore[no-untyped-call]
    try:
        stub.AddEvents(one_request(), timeout=10, metadata=metadata)
    except grpc.RpcError as exc:
        return exc.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


def test_http_token_no_wrong_right(servers: list[CliServer], tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    sink = start(servers, "sink", "--out", str(out), "--auth-token-file", token_file(tmp_path))
    url = f"http://{sink.address}/events"
    body = [{"eventId": "AQ=="}]
    missing = requests.post(url, json=body, timeout=5)
    assert missing.status_code == 401 and missing.headers["WWW-Authenticate"] == "Bearer"
    assert "bearer token" in missing.json()["error"]
    wrong = requests.post(url, json=body, headers={"Authorization": "Bearer nope"}, timeout=5)
    assert wrong.status_code == 403  # as Ray answers a wrong token (missing: 401)
    right = requests.post(url, json=body, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5)
    assert right.status_code == 200
    assert requests.get(f"http://{sink.address}/healthz", timeout=5).status_code == 200  # open
    assert requests.get(f"http://{sink.address}/metrics", timeout=5).status_code == 401
    ready = requests.get(f"http://{sink.address}/readyz", timeout=5)  # a kubelet's probe carries no token
    assert ready.status_code == 200 and ready.json()["ready"] is True
    assert sink.stop()["events"] == 1


def test_grpc_token_no_wrong_right_and_the_recorder_sends_it(
    servers: list[CliServer], tmp_path: Path
) -> None:
    out = tmp_path / "out.jsonl"
    sink = start(servers, "sink", "--out", str(out))
    agg = start(
        servers,
        "aggregator",
        "--export-addr",
        f"http://{sink.address}/e",
        "--exposable-event-types",
        "ALL",
        env={"RAY_OTEL_EVENTS_AUTH_TOKEN": TOKEN},
    )
    with grpc.insecure_channel(agg.address) as channel:
        assert add_events(channel, None) == grpc.StatusCode.UNAUTHENTICATED
        assert add_events(channel, (("authorization", "Bearer wrong"),)) == grpc.StatusCode.UNAUTHENTICATED
        assert add_events(channel, (("authorization", f"Bearer {TOKEN}"),)) == grpc.StatusCode.OK
    exporter = GrpcAggregatorExporter(agg.address, security=ClientSecurityConfig(token=TOKEN))
    exporter.export(one_request())
    exporter.close()
    assert len(wait_for_lines(out, 2)) == 2
    stats = agg.stop()
    assert stats["received_total"] == 2  # refused calls took nothing


def test_grpc_tls_and_mutual_tls(servers: list[CliServer], tmp_path: Path, certs: Certs) -> None:
    tls = ("--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key))
    agg = start(servers, "aggregator", *tls)
    root = certs.ca.read_bytes()
    with grpc.secure_channel(agg.address, grpc.ssl_channel_credentials(root_certificates=root)) as channel:
        assert add_events(channel, None) == grpc.StatusCode.OK
    with grpc.insecure_channel(agg.address) as channel:  # plain text to a TLS port
        assert add_events(channel, None) == grpc.StatusCode.UNAVAILABLE
    other = grpc.ssl_channel_credentials(root_certificates=certs.other_ca.read_bytes())
    with grpc.secure_channel(agg.address, other) as channel:  # a server we cannot verify
        assert add_events(channel, None) == grpc.StatusCode.UNAVAILABLE
    exporter = GrpcAggregatorExporter(agg.address, security=ClientSecurityConfig(tls_ca_file=str(certs.ca)))
    exporter.export(one_request())
    exporter.close()

    mtls = start(servers, "aggregator", *tls, "--tls-client-ca", str(certs.ca))
    with grpc.secure_channel(mtls.address, grpc.ssl_channel_credentials(root_certificates=root)) as channel:
        assert add_events(channel, None) == grpc.StatusCode.UNAVAILABLE  # no client certificate
    with_cert = grpc.ssl_channel_credentials(
        root_certificates=root,
        private_key=certs.client_key.read_bytes(),
        certificate_chain=certs.client_cert.read_bytes(),
    )
    with grpc.secure_channel(mtls.address, with_cert) as channel:
        assert add_events(channel, None) == grpc.StatusCode.OK
    assert mtls.stop()["received_total"] == 1
    assert agg.stop()["received_total"] == 2


def test_https_and_mutual_tls_on_http_servers(servers: list[CliServer], tmp_path: Path, certs: Certs) -> None:
    tls = ("--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key))
    sink = start(servers, "sink", "--out", str(tmp_path / "a.jsonl"), *tls)
    url = f"https://{sink.address}/events"
    assert requests.post(url, json=[{"a": 1}], verify=str(certs.ca), timeout=5).status_code == 200
    with pytest.raises(requests.exceptions.SSLError):
        requests.post(url, json=[{"a": 1}], verify=str(certs.other_ca), timeout=5)
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.post(f"http://{sink.address}/events", json=[{"a": 1}], timeout=5)

    mtls = start(servers, "sink", "--out", str(tmp_path / "b.jsonl"), *tls, "--tls-client-ca", str(certs.ca))
    url = f"https://{mtls.address}/events"
    with pytest.raises((requests.exceptions.SSLError, requests.exceptions.ConnectionError)):
        requests.post(url, json=[{"a": 1}], verify=str(certs.ca), timeout=5)
    client = (str(certs.client_cert), str(certs.client_key))
    ok = requests.post(url, json=[{"a": 1}], verify=str(certs.ca), cert=client, timeout=5)
    assert ok.status_code == 200
    assert mtls.stop()["events"] == 1


def test_aggregator_exports_over_https_with_a_token(
    servers: list[CliServer], tmp_path: Path, certs: Certs
) -> None:
    """The whole secured path: producer -(TLS+token)-> aggregator -(https+token, CA file)-> sink."""
    out = tmp_path / "out.jsonl"
    tls = ("--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key))
    sink = start(servers, "sink", "--out", str(out), *tls, "--auth-token-file", token_file(tmp_path))
    metrics_port = free_port()
    agg = start(
        servers,
        "aggregator",
        *tls,
        "--auth-token-file",
        token_file(tmp_path),
        "--export-addr",
        f"https://localhost:{sink.port}/events",
        "--export-header",
        f"Authorization: Bearer {TOKEN}",
        "--export-ca-file",
        str(certs.ca),
        "--exposable-event-types",
        "ALL",
        "--metrics-port",
        str(metrics_port),
    )
    exporter = GrpcAggregatorExporter(
        agg.address, security=ClientSecurityConfig(token=TOKEN, tls_ca_file=str(certs.ca))
    )
    exporter.export(one_request())
    exporter.close()
    assert len(wait_for_lines(out, 1)) == 1
    metrics = f"https://127.0.0.1:{metrics_port}/metrics"
    assert requests.get(metrics, verify=str(certs.ca), timeout=5).status_code == 401
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert requests.get(metrics, verify=str(certs.ca), headers=auth, timeout=5).status_code == 200
    assert agg.stop()["publishers"]["http_service"]["published"] == {"TASK_DEFINITION_EVENT": 1}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tls-cert", "/nonexistent.pem"], "--tls-cert and --tls-key go together"),
        (["--tls-cert", "/nonexistent.pem", "--tls-key", "/nonexistent.key"], "TLS files unusable"),
        (["--auth-token-file", "/nonexistent-token"], "--auth-token-file"),
        (["--tls-client-ca", "/x.pem"], "--tls-client-ca needs --tls-cert"),
    ],
)
def test_bad_security_flags_are_clear_errors(args: list[str], message: str, tmp_path: Path) -> None:
    assert message in refused_by_cli("sink", "--out", str(tmp_path / "o"), *args).stderr


def test_a_bad_token_file_variable_is_named(tmp_path: Path) -> None:
    env = {"RAY_OTEL_EVENTS_AUTH_TOKEN_FILE": str(tmp_path / "none")}
    refused = refused_by_cli("sink", "--out", str(tmp_path / "o"), env=env)
    assert f"RAY_OTEL_EVENTS_AUTH_TOKEN_FILE '{tmp_path / 'none'}'" in refused.stderr


def test_server_ssl_context_refuses_old_protocols(certs: Certs) -> None:
    from ray_otel_events.security.tls import TlsFiles

    context = TlsFiles(str(certs.server_cert), str(certs.server_key)).ssl_context()
    assert context.minimum_version >= ssl.TLSVersion.TLSv1_2
