"""Ray 2.60's token authentication, Ray's way, in every component.

Where the token is found (Ray's variables and ~/.ray/auth_token, in Ray's order, under a temporary
HOME); `serve` taking the header, the fallback header and the cookie Ray's CLI, proxies and browser
send, `/readyz` open and `/metrics` not; our aggregator taking the token as Ray's own gRPC client
code sends it; and against a live Ray cluster with token auth on: our recorder reaching Ray's
aggregator with the right token, and refused, logged, counted and kept with none or a wrong one;
Ray's aggregator posting to `serve`; `ray list tasks --address` against `serve`.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from helpers.agg_procs import FIXTURE, CliServer, start

from ray_otel_events.config import (
    ClientSecurityConfig,
    ConfigError,
    RecorderConfig,
    ray_auth_token,
    ray_client_token,
    ray_server_token,
)
from ray_otel_events.producer.aggregator_client import GrpcAggregatorExporter
from ray_otel_events.producer.recorder import RayEventRecorder
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent

TOKEN = "a-cluster-token-0123456789abcdef"


# -- where the token comes from ---------------------------------------------------------------------


def test_token_found_in_rays_order(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text(" home-token \n")
    path = tmp_path / "token-file"
    path.write_text("file-token\n")
    base = {"HOME": str(home)}
    assert ray_auth_token(base) == "home-token"
    assert ray_auth_token({**base, "RAY_AUTH_TOKEN_PATH": str(path)}) == "file-token"
    assert ray_auth_token({**base, "RAY_AUTH_TOKEN_PATH": str(path), "RAY_AUTH_TOKEN": " env "}) == "env"
    with pytest.raises(ConfigError, match="RAY_AUTH_TOKEN_PATH"):
        ray_auth_token({**base, "RAY_AUTH_TOKEN_PATH": str(tmp_path / "missing")})
    # A client sends a token it finds unless told auth is disabled; a server requires one only
    # when told token mode (a stray ~/.ray/auth_token does not lock a server).
    assert ray_client_token(base) == "home-token"
    assert ray_client_token({**base, "RAY_AUTH_MODE": "disabled"}) == ""
    assert ray_server_token(base) == ""
    assert ray_server_token({**base, "RAY_AUTH_MODE": "TOKEN"}) == "home-token"
    with pytest.raises(ConfigError, match="no token"):
        ray_client_token({"HOME": str(tmp_path / "empty"), "RAY_AUTH_MODE": "token"})
    with pytest.raises(ConfigError, match="RAY_AUTH_MODE"):
        ray_client_token({**base, "RAY_AUTH_MODE": "sometimes"})
    # Ours wins over Ray's.
    assert ClientSecurityConfig.from_env({**base, "RAY_OTEL_EVENTS_AUTH_TOKEN": "ours"}).token == "ours"
    assert ClientSecurityConfig.from_env(base).token == "home-token"


# -- serve with a token ------------------------------------------------------------------------------


def _ray_token_env(tmp_path: Path, token: str = TOKEN) -> dict[str, str]:
    path = tmp_path / "ray_token"
    path.write_text(token)
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(path), "HOME": str(tmp_path)}


def test_serve_takes_rays_header_fallback_header_and_cookie(servers: list[CliServer], tmp_path: Path) -> None:
    serve = start(servers, "serve", "--store", str(tmp_path / "s.sqlite3"), env=_ray_token_env(tmp_path))
    base = f"http://{serve.address}"
    tasks = base + "/api/v0/tasks"
    # Probes and the page's shell need no token; data and metrics do.
    assert requests.get(base + "/readyz", timeout=10).status_code == 200
    assert requests.get(base + "/healthz", timeout=10).status_code == 200
    assert requests.get(base + "/", timeout=10).status_code == 200
    assert requests.get(base + "/static/app.js", timeout=10).status_code == 200
    missing = requests.get(base + "/metrics", timeout=10)
    assert missing.status_code == 401 and missing.headers["WWW-Authenticate"] == "Bearer"
    assert requests.get(tasks, timeout=10).status_code == 401
    wrong = {"Authorization": "Bearer not-the-token"}
    assert requests.get(tasks, headers=wrong, timeout=10).status_code == 403
    # Ray's aggregator posts its export with no token: with only Ray's token set, POSTs need none.
    assert requests.post(base + "/v1/ray-events", json=[], timeout=10).status_code == 200
    right = f"Bearer {TOKEN}"
    assert requests.get(tasks, headers={"Authorization": right}, timeout=10).status_code == 200
    assert requests.get(tasks, headers={"X-Ray-Authorization": right}, timeout=10).status_code == 200
    assert requests.get(base + "/metrics", headers={"Authorization": right}, timeout=10).status_code == 200
    # The browser's way: ask the mode, trade the token for Ray's HttpOnly cookie, then send only that.
    assert requests.get(base + "/api/authentication_mode", timeout=10).json() == {
        "authentication_mode": "token"
    }
    browser = requests.Session()
    refused = browser.post(base + "/api/authenticate", headers=wrong, timeout=10)
    assert refused.status_code == 403 and "ray-authentication-token" not in browser.cookies
    granted = browser.post(base + "/api/authenticate", headers={"Authorization": right}, timeout=10)
    assert granted.status_code == 200, granted.text
    assert "HttpOnly" in granted.headers["Set-Cookie"]
    assert browser.cookies["ray-authentication-token"] == TOKEN
    assert browser.get(base + "/api/ui/overview", timeout=10).status_code == 200
    # Our CLI sends Ray's token too, and says plainly when it has none.
    cli = [sys.executable, "-m", "ray_otel_events", "list", "tasks", "--address", base, "--format", "json"]
    ok = subprocess.run(cli, env={**os.environ, **_ray_token_env(tmp_path)}, capture_output=True, text=True)
    assert ok.returncode == 0 and json.loads(ok.stdout) == [], ok.stderr
    no_token_env = {**os.environ, "RAY_AUTH_MODE": "disabled", "HOME": str(tmp_path / "nohome")}
    denied = subprocess.run(cli, env=no_token_env, capture_output=True, text=True)
    assert denied.returncode == 1 and "refused the request (401)" in denied.stderr
    assert "Traceback" not in denied.stderr


def test_serve_with_our_token_too_guards_posts_with_ours(servers: list[CliServer], tmp_path: Path) -> None:
    ours = tmp_path / "our_token"
    ours.write_text("our-own-token")
    env = {**_ray_token_env(tmp_path), "RAY_OTEL_EVENTS_AUTH_TOKEN_FILE": str(ours)}
    serve = start(servers, "serve", "--store", str(tmp_path / "s.sqlite3"), env=env)
    base = f"http://{serve.address}"
    post = base + "/v1/ray-events"
    assert requests.post(post, json=[], timeout=10).status_code == 401
    assert (
        requests.post(post, json=[], headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10).status_code
        == 403
    )
    assert requests.post(post, json=[], headers={"Authorization": "Bearer our-own-token"}, timeout=10).ok
    for token in (TOKEN, "our-own-token"):  # reads take either
        assert requests.get(
            base + "/api/v0/tasks", headers={"Authorization": f"Bearer {token}"}, timeout=10
        ).ok


def test_serve_without_a_token_says_so_and_readyz_needs_none_either(
    servers: list[CliServer], tmp_path: Path
) -> None:
    serve = start(servers, "serve", "--store", str(tmp_path / "s.sqlite3"), env={"RAY_AUTH_MODE": "disabled"})
    base = f"http://{serve.address}"
    mode = requests.get(base + "/api/authentication_mode", timeout=10)
    assert mode.json() == {"authentication_mode": "disabled"}
    assert requests.get(base + "/api/v0/tasks", timeout=10).status_code == 200


def test_aggregator_takes_the_token_as_rays_grpc_client_sends_it(
    servers: list[CliServer], tmp_path: Path
) -> None:
    """Ray's own client-side code (its token loader and auth interceptor, its generated stub) in a
    process configured as a Ray worker is: our aggregator under RAY_AUTH_MODE=token accepts it, and
    refuses the same call with another token."""
    pytest.importorskip("ray")
    agg = start(servers, "aggregator", "--grpc-port", "0", env=_ray_token_env(tmp_path))
    script = """
import sys, grpc
from ray._private.authentication.grpc_authentication_client_interceptor import (
    SyncAuthenticationMetadataClientInterceptor,
)
from ray.core.generated import events_event_aggregator_service_pb2 as svc
from ray.core.generated import events_event_aggregator_service_pb2_grpc as svc_grpc
interceptor = SyncAuthenticationMetadataClientInterceptor()
channel = grpc.intercept_channel(grpc.insecure_channel(sys.argv[1]), interceptor)
try:
    svc_grpc.EventAggregatorServiceStub(channel).AddEvents(svc.AddEventsRequest(), timeout=10)
    print("OK")
except grpc.RpcError as exc:
    print(exc.code().name)
"""
    outcomes = {}
    for name, token in (("right", TOKEN), ("wrong", "another-token")):
        (tmp_path / name).mkdir(exist_ok=True)
        env = {**os.environ, **_ray_token_env(tmp_path / name, token)}
        run = subprocess.run(
            [sys.executable, "-c", script, agg.address], env=env, capture_output=True, text=True
        )
        assert run.returncode == 0, run.stderr
        outcomes[name] = run.stdout.strip()
    assert outcomes == {"right": "OK", "wrong": "UNAUTHENTICATED"}


def test_refused_recorder_keeps_its_bound_and_says_what_it_drops(
    servers: list[CliServer], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Our aggregator under RAY_AUTH_MODE=token refuses a wrong token; the recorder's bound of 10
    then drops the oldest of 25 events, counted and said in one line, and keeps the newest 10."""
    agg = start(servers, "aggregator", "--grpc-port", "0", env=_ray_token_env(tmp_path))
    exporter = GrpcAggregatorExporter(agg.address, timeout_s=5, security=ClientSecurityConfig("wrong"))
    recorder = RayEventRecorder(exporter, config=RecorderConfig(max_queued_events=10, report_interval_ms=50))
    with caplog.at_level(logging.WARNING, logger="ray_otel_events.producer.recorder"):
        recorder.add_many(_task_definitions(5, "first"))
        assert recorder.flush(timeout_s=0.5) is False
        recorder.add_many(_task_definitions(20, "then"))
        assert recorder.flush(timeout_s=0.5) is False
    stats = recorder.stats()
    assert stats["pending"] == 10 and stats["dropped"] == 15 and stats["refused_rpcs"] >= 2, stats
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2, said
    assert "UNAUTHENTICATED" in said[0] and "5 events kept" in said[0]
    assert "buffer full" in said[1] and "refuses" in said[1]
    exporter.close()


# -- a live Ray cluster with token auth on -------------------------------------------------------------


def _task_definitions(count: int, name: str, session: str | None = None) -> list[RayEvent]:
    """Fixture task definitions, each a task of its own (the recorder would merge one task's)."""
    from google.protobuf import json_format

    template = next(
        i for i in json.loads(Path(FIXTURE).read_text()) if i["eventType"] == "TASK_DEFINITION_EVENT"
    )
    events = []
    for i in range(count):
        event = RayEvent()
        json_format.ParseDict(template, event)
        event.event_id = b""
        event.task_definition_event.task_id = os.urandom(8) + b"\xff" * 12 + b"\x01\x00\x00\x00"
        event.task_definition_event.task_name = f"{name}_{i}"
        if session is not None:
            event.session_name = session
        events.append(event)
    return events


def _recorder(address: str, env: dict[str, str]) -> RayEventRecorder:
    exporter = GrpcAggregatorExporter(address, timeout_s=5, security=ClientSecurityConfig.from_env(env))
    return RayEventRecorder(exporter, config=RecorderConfig(max_queued_events=100, report_interval_ms=50))


def _wait(condition: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


@pytest.mark.ray
def test_token_cluster_recorder_aggregator_serve_and_ray_list(
    servers: list[CliServer], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("ray")
    from helpers.ray_cluster import ray_bin, ray_cluster

    serve = start(servers, "serve", "--store", str(tmp_path / "s.sqlite3"), env=_ray_token_env(tmp_path))
    base = f"http://{serve.address}"
    with ray_cluster(f"{base}/v1/ray-events", token=TOKEN) as cluster:
        # Ray's core workers -> Ray's aggregator -> serve: Ray's aggregator posts with Ray's header.
        run = subprocess.run(
            [
                sys.executable,
                "-c",
                "import ray; ray.init(); ray.get(ray.remote(lambda: 1).remote());"
                " print(ray._private.worker.global_worker.node.session_name)",
            ],
            env=cluster.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        session = run.stdout.split()[-1]  # our events are this cluster's, so one session holds them all
        # Our recorder -> Ray's aggregator, with no token and with a wrong one: refused at once,
        # said once with the cause, counted, every event kept.
        for label, env in (
            ("none", {"RAY_AUTH_MODE": "disabled", "HOME": str(tmp_path / "nohome")}),
            ("wrong", {"RAY_AUTH_TOKEN": "wrong-token"}),
        ):
            caplog.clear()
            recorder = _recorder(cluster.agent_grpc, env)
            with caplog.at_level(logging.WARNING, logger="ray_otel_events.producer.recorder"):
                recorder.add_many(_task_definitions(20, f"refused_{label}"))
                assert recorder.flush(timeout_s=1.0) is False
            stats = recorder.stats()
            assert stats["refused_rpcs"] >= 1 and stats["dropped"] == 0 and stats["pending"] == 20, stats
            said = [r.getMessage() for r in caplog.records]
            assert len(said) == 1 and "UNAUTHENTICATED" in said[0] and "RAY_AUTH_TOKEN" in said[0], said
            recorder.exporter.close()
        # ... and with Ray's token, found as Ray finds it: all 20 reach serve through Ray's aggregator.
        recorder = _recorder(cluster.agent_grpc, _ray_token_env(tmp_path))
        recorder.add_many(_task_definitions(20, "accepted", session))
        assert recorder.flush(timeout_s=30.0), recorder.stats()
        assert recorder.stats()["sent_raw"] == 20 and recorder.stats()["refused_rpcs"] == 0
        recorder.stop()
        env = {k: v for k, v in cluster.env.items() if k != "RAY_ADDRESS"}
        listing = [ray_bin(), "list", "tasks", "--address", base, "--format", "json", "--limit", "1000"]

        seen: list[set[str]] = [set()]

        def listed() -> list[dict[str, Any]] | None:
            out = subprocess.run(listing, env=env, capture_output=True, text=True, timeout=120)
            assert out.returncode == 0, out.stderr[-3000:]
            # (an empty answer is printed as a sentence, not JSON)
            rows: list[dict[str, Any]] = json.loads(out.stdout) if out.stdout.startswith("[") else []
            names = seen[0] = {r["name"] for r in rows}
            ours = {n for n in names if n.startswith("accepted_")}
            return rows if len(ours) == 20 and "<lambda>" in names else None

        try:
            rows = _wait(listed, 90, "the workload's task and our 20 events in serve")
        except AssertionError as exc:
            raise AssertionError(f"{exc}: listed {sorted(seen[0])}; serve {serve.stderr()}") from None
    assert not any(r["name"].startswith("refused_") for r in rows)
    # Without the token, Ray's CLI is refused by serve and says why.
    no_token = {**env, "RAY_AUTH_MODE": "disabled", "HOME": str(tmp_path / "nohome")}
    no_token.pop("RAY_AUTH_TOKEN_PATH", None)
    denied = subprocess.run(listing, env=no_token, capture_output=True, text=True, timeout=120)
    said = denied.stdout + denied.stderr
    assert denied.returncode != 0, said
    # Ray words a 401 so (format_authentication_http_error), with serve's reason in it
    assert "Authentication required" in said and "missing bearer token" in said, said[-3000:]


@pytest.mark.ray
def test_auth_off_cluster_takes_our_recorder_without_a_token(
    servers: list[CliServer], tmp_path: Path
) -> None:
    pytest.importorskip("ray")
    from helpers.ray_cluster import ray_cluster

    sink_out = tmp_path / "sink.jsonl"
    sink = start(servers, "sink", "--port", "0", "--out", str(sink_out))
    with ray_cluster(f"http://{sink.address}/") as cluster:
        recorder = _recorder(cluster.agent_grpc, {"RAY_AUTH_MODE": "disabled", "HOME": str(tmp_path)})
        recorder.add_many(_task_definitions(20, "auth_off"))
        assert recorder.flush(timeout_s=30.0), recorder.stats()
        recorder.stop()

        def arrived() -> bool:
            names = set()
            if sink_out.exists():
                for line in sink_out.read_text().splitlines():
                    event = json.loads(line)
                    names.add(event.get("taskDefinitionEvent", {}).get("taskName", ""))
            return sum(n.startswith("auth_off_") for n in names) == 20

        _wait(arrived, 60, "20 events at the sink")


def test_rays_dashboard_port_takes_the_same_token(servers: list[CliServer], tmp_path: Path) -> None:
    """Ray's page over the store under RAY_AUTH_MODE=token: its files load (so it can ask for the
    token), the mode says token, and every answer from the store needs the header or the cookie."""
    pytest.importorskip("ray")
    serve = start(
        servers,
        "serve",
        "--store",
        str(tmp_path / "s.sqlite3"),
        "--ray-dashboard-port",
        "0",
        env=_ray_token_env(tmp_path),
    )
    base = "http://" + serve.read_line(30).split("=", 1)[1]
    assert requests.get(base + "/", timeout=10).status_code == 200
    assert requests.get(base + "/favicon.ico", timeout=10).status_code == 200
    assert requests.get(base + "/api/authentication_mode", timeout=10).json() == {
        "authentication_mode": "token"
    }
    for path in ("/api/jobs/", "/logical/actors", "/nodes?view=summary", "/api/v0/tasks"):
        assert requests.get(base + path, timeout=10).status_code == 401, path
        wrong = requests.get(base + path, headers={"Authorization": "Bearer nope"}, timeout=10)
        assert wrong.status_code == 403, path
        right = requests.get(base + path, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
        assert right.status_code == 200, (path, right.text)
    browser = requests.Session()
    granted = browser.post(
        base + "/api/authenticate", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10
    )
    assert granted.status_code == 200 and browser.get(base + "/api/jobs/", timeout=10).json() == []
