"""Every environment variable the package reads, in one place.

Ray's own variable names are read as they are, so a node configured for Ray's aggregator configures
ours the same way. Our additions are prefixed `RAY_OTEL_EVENTS_`. Command-line flags override the
environment (`dataclasses.replace` on the loaded config, then `validate()`). A bad value raises
ConfigError naming the variable; the CLI prints it and exits non-zero.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse

from ray_otel_events.events.ray_releases import CORE_WORKER_RAY_EVENTS, ENABLE_RAY_EVENT
from ray_otel_events.events.registry import ET, REGISTRY

Environ = Mapping[str, str]

logger = logging.getLogger(__name__)

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message names the setting and the problem."""


def env_str(env: Environ, name: str, default: str) -> str:
    return env.get(name, default)


def env_bool(env: Environ, name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{name}={raw!r}: expected a boolean (1/0, true/false, yes/no)")


def env_int(env: Environ, name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw.strip())
    except ValueError:
        raise ConfigError(f"{name}={raw!r}: expected an integer") from None


def env_float(env: Environ, name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return float(raw.strip())
    except ValueError:
        raise ConfigError(f"{name}={raw!r}: expected a number") from None


def _require(cond: bool, message: str) -> None:
    if not cond:
        raise ConfigError(message)


# ---------------------------------------------------------------------------------------------
# Security, shared by every server and by the clients that talk to them.

AUTH_TOKEN = "RAY_OTEL_EVENTS_AUTH_TOKEN"  # the bearer token itself
AUTH_TOKEN_FILE = "RAY_OTEL_EVENTS_AUTH_TOKEN_FILE"  # a file holding it (wins over AUTH_TOKEN)
TLS_CA_FILE = "RAY_OTEL_EVENTS_TLS_CA_FILE"  # CA that verifies the aggregator's certificate (producers)


def auth_token_file(env: Environ | None = None) -> str:
    """The token file a server's `--auth-token-file` defaults to ("" when unset)."""
    env = os.environ if env is None else env
    return env.get(AUTH_TOKEN_FILE, "")


def auth_token(env: Environ | None = None) -> str:
    """The bearer token itself, for a server given no token file ("" when unset)."""
    env = os.environ if env is None else env
    return env.get(AUTH_TOKEN, "").strip()


# Ray's own token authentication (on by default since Ray 2.60 once a token exists). The token is
# looked for where Ray's AuthenticationTokenLoader looks, in its order: the variable, the file the
# path variable names (an error when unreadable or empty, as in Ray), then ~/.ray/auth_token.
RAY_AUTH_MODE = "RAY_AUTH_MODE"  # "token" or "disabled" (any case); unset: token if one exists
RAY_AUTH_TOKEN = "RAY_AUTH_TOKEN"
RAY_AUTH_TOKEN_PATH = "RAY_AUTH_TOKEN_PATH"
RAY_DEFAULT_TOKEN_FILE = os.path.join(".ray", "auth_token")  # under the home directory


def _home(env: Environ) -> str:
    return env.get("HOME") or os.path.expanduser("~")


def ray_auth_token(env: Environ | None = None) -> str:
    """The cluster token Ray's clients would send, or "" when there is none to be found."""
    env = os.environ if env is None else env
    token = env.get(RAY_AUTH_TOKEN, "").strip()
    if token:
        return token
    path = env.get(RAY_AUTH_TOKEN_PATH, "").strip()
    if path:
        try:
            with open(path) as handle:
                token = handle.read().strip()
        except OSError as exc:
            raise ConfigError(f"{RAY_AUTH_TOKEN_PATH}={path!r}: {exc.strerror or exc}") from None
        _require(bool(token), f"{RAY_AUTH_TOKEN_PATH}={path!r}: the file is empty")
        return token
    try:
        with open(os.path.join(_home(env), RAY_DEFAULT_TOKEN_FILE)) as handle:
            return handle.read().strip()
    except OSError:
        return ""


def ray_auth_mode(env: Environ | None = None) -> str:
    """ "token", "disabled", or "" (unset: Ray then uses a token when it finds one)."""
    env = os.environ if env is None else env
    raw = env.get(RAY_AUTH_MODE)
    if raw is None:
        return ""
    mode = raw.strip().lower()
    _require(mode in ("token", "disabled"), f"{RAY_AUTH_MODE}={raw!r}: expected token or disabled")
    return mode


def ray_client_token(env: Environ | None = None) -> str:
    """What a client of a Ray cluster sends: Ray's token unless RAY_AUTH_MODE=disabled. With the
    mode unset a token found is sent anyway, as `ray start` turns token mode on when one exists (a
    server without auth ignores it)."""
    env = os.environ if env is None else env
    mode = ray_auth_mode(env)
    if mode == "disabled":
        return ""
    token = ray_auth_token(env)
    if mode == "token" and not token:
        raise ConfigError(
            f"{RAY_AUTH_MODE}=token but no token in {RAY_AUTH_TOKEN}, {RAY_AUTH_TOKEN_PATH} or "
            f"~/{RAY_DEFAULT_TOKEN_FILE}"
        )
    return token


def ray_server_token(env: Environ | None = None) -> str:
    """The token a server requires in Ray's name: only with RAY_AUTH_MODE=token (a server does not
    turn auth on by itself because some file exists in the home directory)."""
    env = os.environ if env is None else env
    return ray_client_token(env) if ray_auth_mode(env) == "token" else ""


@dataclass(frozen=True)
class ClientSecurityConfig:
    """What a producer presents to a secured aggregator: the token, and the CA to verify it by.

    Our token variables win; else Ray's token (see `ray_client_token`), so a recorder in a Ray
    process reaches Ray's token-protected aggregator as Ray's core workers do."""

    token: str = ""
    tls_ca_file: str = ""  # set: connect with TLS, verifying the server against this CA

    @classmethod
    def from_env(cls, env: Environ | None = None) -> ClientSecurityConfig:
        env = os.environ if env is None else env
        token = env.get(AUTH_TOKEN, "").strip()
        token_file = env.get(AUTH_TOKEN_FILE, "").strip()
        if token_file:
            try:
                with open(token_file) as handle:
                    token = handle.read().strip()
            except OSError as exc:
                raise ConfigError(f"{AUTH_TOKEN_FILE}={token_file!r}: {exc}") from None
        if not token:
            token = ray_client_token(env)
        return cls(token=token, tls_ca_file=env.get(TLS_CA_FILE, "").strip())


# ---------------------------------------------------------------------------------------------
# What one client may hold of a server (every HTTP server, and the gRPC ports where gRPC allows):
# memory, connections and time, bounded by these settings rather than by the client.

MAX_BODIES_BYTES = "RAY_OTEL_EVENTS_MAX_BODIES_BYTES"
MAX_CONNECTIONS = "RAY_OTEL_EVENTS_MAX_CONNECTIONS"
IDLE_TIMEOUT_S = "RAY_OTEL_EVENTS_IDLE_TIMEOUT_SECONDS"
BODY_TIMEOUT_S = "RAY_OTEL_EVENTS_BODY_TIMEOUT_SECONDS"
CLIENT_ERROR_LOG_INTERVAL_S = "RAY_OTEL_EVENTS_CLIENT_ERROR_LOG_INTERVAL_SECONDS"
MMAP_THRESHOLD_BYTES = "RAY_OTEL_EVENTS_MMAP_THRESHOLD_BYTES"


@dataclass(frozen=True)
class ServerLimitsConfig:
    """The bounds of one server process (README, "Limits on input", says why these defaults)."""

    # Request bodies held at once, wire bytes and inflated bytes both: two of the largest body
    # (64 MiB, inflated, plus its gzip) and room for the ~1 MB POSTs a cluster sends meanwhile.
    max_bodies_bytes: int = 256 * 1024 * 1024
    # Open connections (one a Ray node's aggregator or exporter keeps); descriptors beyond them
    # stay for the store, the spool and the gRPC port.
    max_connections: int = 4096
    # A connection that has sent no complete request head this long after it opened or after its
    # last answer is closed (idle keep-alive and a slowloris' headers alike). Longer than the 15 s
    # aiohttp's and the OTel SDK's clients keep an idle connection, so they close first.
    idle_timeout_s: float = 60.0
    # The whole body of one request must arrive within this: a 64 MiB body at 1.1 MB/s.
    body_timeout_s: float = 60.0
    client_error_log_interval_s: float = 60.0
    # Blocks at least this large (request bodies, their inflated text) are mapped on their own and
    # unmapped when freed (glibc's mallopt M_MMAP_THRESHOLD). Left to glibc, the threshold rises to
    # the largest block freed so far, bodies then come from the heap, and under a steady stream the
    # heap's free holes (which glibc keeps) grew serve's RSS by ~15 MiB a minute. 0: glibc's own.
    mmap_threshold_bytes: int = 128 * 1024

    @classmethod
    def from_env(cls, env: Environ | None = None) -> ServerLimitsConfig:
        env = os.environ if env is None else env
        cfg = cls(
            max_bodies_bytes=env_int(env, MAX_BODIES_BYTES, cls.max_bodies_bytes),
            max_connections=env_int(env, MAX_CONNECTIONS, cls.max_connections),
            idle_timeout_s=env_float(env, IDLE_TIMEOUT_S, cls.idle_timeout_s),
            body_timeout_s=env_float(env, BODY_TIMEOUT_S, cls.body_timeout_s),
            client_error_log_interval_s=env_float(
                env, CLIENT_ERROR_LOG_INTERVAL_S, cls.client_error_log_interval_s
            ),
            mmap_threshold_bytes=env_int(env, MMAP_THRESHOLD_BYTES, cls.mmap_threshold_bytes),
        )
        cfg.validate()
        return cfg

    def with_overrides(self, **overrides: Any) -> ServerLimitsConfig:
        """Apply command-line values (None means "not given") and validate the result."""
        cfg = dataclasses.replace(self, **{k: v for k, v in overrides.items() if v is not None})
        cfg.validate()
        return cfg

    def validate(self) -> None:
        positive: dict[str, float] = {
            MAX_BODIES_BYTES: self.max_bodies_bytes,
            MAX_CONNECTIONS: self.max_connections,
            IDLE_TIMEOUT_S: self.idle_timeout_s,
            BODY_TIMEOUT_S: self.body_timeout_s,
        }
        for name, value in positive.items():
            _require(value > 0, f"{name} must be > 0, got {value}")
        _require(
            self.client_error_log_interval_s >= 0,
            f"{CLIENT_ERROR_LOG_INTERVAL_S} must be >= 0, got {self.client_error_log_interval_s}",
        )
        _require(
            0 <= self.mmap_threshold_bytes <= 32 * 1024 * 1024,
            f"{MMAP_THRESHOLD_BYTES} must be 0 (glibc's own) to 33554432 (glibc's most), "
            f"got {self.mmap_threshold_bytes}",
        )


# ---------------------------------------------------------------------------------------------
# Producer side: the recorder in every process that emits events.

RECORDER_MAX_QUEUED = "RAY_ray_event_recorder_max_queued_events"
RECORDER_INTERVAL_MS = "RAY_ray_events_report_interval_ms"
RECORDER_FLUSH_TIMEOUT_MS = "RAY_task_events_shutdown_flush_timeout_ms"
RECORDER_RPC_TIMEOUT_S = "RAY_OTEL_EVENTS_RECORDER_RPC_TIMEOUT_SECONDS"
NODE_ID = "RAY_OTEL_EVENTS_NODE_ID"
SESSION_NAME = "RAY_OTEL_EVENTS_SESSION_NAME"
AGGREGATOR_ADDRESS = "RAY_OTEL_EVENTS_AGGREGATOR_ADDRESS"
# Ray's master switch. Ray's default is off; ours is on (a recorder exists because it was asked
# for), so only an explicit RAY_enable_ray_event=0 turns recording off (events counted "disabled").
# ENABLE_RAY_EVENT (events/ray_releases.py, with every variable ray-env prints). With
# CORE_WORKER_RAY_EVENTS too, Ray's core workers export their own task events (Ray 2.60: both off
# by default).


def ray_flag(env: Environ, name: str) -> bool:
    """A boolean of Ray's config as Ray reads it from `RAY_<name>`: on for `1` or `true`."""
    return env.get(name, "").strip().lower() in ("1", "true")


@dataclass(frozen=True)
class RecorderConfig:
    max_queued_events: int = 10_000
    report_interval_ms: int = 1000
    shutdown_flush_timeout_ms: int = 5000
    rpc_timeout_s: float = 5.0
    enabled: bool = True

    @classmethod
    def from_env(cls, env: Environ | None = None) -> RecorderConfig:
        env = os.environ if env is None else env
        cfg = cls(
            enabled=env_bool(env, ENABLE_RAY_EVENT, cls.enabled) if env.get(ENABLE_RAY_EVENT) else True,
            max_queued_events=env_int(env, RECORDER_MAX_QUEUED, cls.max_queued_events),
            report_interval_ms=env_int(env, RECORDER_INTERVAL_MS, cls.report_interval_ms),
            shutdown_flush_timeout_ms=env_int(env, RECORDER_FLUSH_TIMEOUT_MS, cls.shutdown_flush_timeout_ms),
            rpc_timeout_s=env_float(env, RECORDER_RPC_TIMEOUT_S, cls.rpc_timeout_s),
        )
        cfg.validate()
        return cfg

    def validate(self) -> None:
        _require(
            self.max_queued_events > 0, f"{RECORDER_MAX_QUEUED} must be > 0, got {self.max_queued_events}"
        )
        _require(
            self.report_interval_ms > 0, f"{RECORDER_INTERVAL_MS} must be > 0, got {self.report_interval_ms}"
        )
        _require(
            self.shutdown_flush_timeout_ms >= 0,
            f"{RECORDER_FLUSH_TIMEOUT_MS} must be >= 0, got {self.shutdown_flush_timeout_ms}",
        )
        _require(self.rpc_timeout_s > 0, f"{RECORDER_RPC_TIMEOUT_S} must be > 0, got {self.rpc_timeout_s}")


# ---------------------------------------------------------------------------------------------
# The aggregator: gRPC AddEvents in, multi-consumer buffer, one publisher per destination.

_AGENT = "RAY_DASHBOARD_AGGREGATOR_AGENT_"
EXPORT_ADDR = _AGENT + "EVENTS_EXPORT_ADDR"
EXPORT_ADDR_LEGACY = "RAY_events_export_addr"
PUBLISH_TO_HTTP = _AGENT + "PUBLISH_EVENTS_TO_EXTERNAL_HTTP_SERVICE"
MAX_BUFFER_SIZE = _AGENT + "MAX_EVENT_BUFFER_SIZE"
MAX_BUFFER_BYTES = "RAY_OTEL_EVENTS_MAX_EVENT_BUFFER_BYTES"
MAX_BATCH_SIZE = _AGENT + "MAX_EVENT_SEND_BATCH_SIZE"
EXPOSABLE_TYPES = _AGENT + "EXPOSABLE_EVENT_TYPES"
# Newer Ray names the list per publisher; when both are set the per-publisher name wins (it is
# the more specific one, and what current Ray reads).
EXPOSABLE_TYPES_HTTP = _AGENT + "PUBLISHER_HTTP_ENDPOINT_EXPOSABLE_EVENT_TYPES"
PRESERVE_PROTO_FIELD_NAME = _AGENT + "PRESERVE_PROTO_FIELD_NAME"
PUBLISHER_TIMEOUT_S = _AGENT + "PUBLISHER_TIMEOUT_SECONDS"
PUBLISHER_MAX_RETRIES = _AGENT + "PUBLISHER_MAX_RETRIES"
PUBLISHER_INITIAL_BACKOFF_S = _AGENT + "PUBLISHER_INITIAL_BACKOFF_SECONDS"
PUBLISHER_MAX_BACKOFF_S = _AGENT + "PUBLISHER_MAX_BACKOFF_SECONDS"
PUBLISHER_JITTER_RATIO = _AGENT + "PUBLISHER_JITTER_RATIO"
PUBLISHER_SEND_INTERVAL_S = _AGENT + "PUBLISHER_MAX_BUFFER_SEND_INTERVAL_SECONDS"
SHUTDOWN_FLUSH_TIMEOUT_S = "RAY_OTEL_EVENTS_SHUTDOWN_FLUSH_TIMEOUT_SECONDS"
ENCODER_PROCESSES = "RAY_OTEL_EVENTS_ENCODER_PROCESSES"
QUEUE_DIR = "RAY_OTEL_EVENTS_QUEUE_DIR"  # set: accepted events are kept on disk until delivered
QUEUE_MAX_BYTES = "RAY_OTEL_EVENTS_QUEUE_MAX_BYTES"
DEDUP_WINDOW = "RAY_OTEL_EVENTS_DEDUP_WINDOW"  # recent eventIds remembered; 0 turns de-dup off

# Ray 2.60's default HTTP list (profile events deliberately out).
DEFAULT_EXPOSABLE_EVENT_TYPES: frozenset[int] = frozenset(
    {
        ET.TASK_DEFINITION_EVENT,
        ET.TASK_LIFECYCLE_EVENT,
        ET.ACTOR_TASK_DEFINITION_EVENT,
        ET.DRIVER_JOB_DEFINITION_EVENT,
        ET.DRIVER_JOB_LIFECYCLE_EVENT,
        ET.ACTOR_DEFINITION_EVENT,
        ET.ACTOR_LIFECYCLE_EVENT,
        ET.NODE_DEFINITION_EVENT,
        ET.NODE_LIFECYCLE_EVENT,
        ET.WORKER_DEFINITION_EVENT,
        ET.WORKER_LIFECYCLE_EVENT,
        ET.PLATFORM_EVENT,
    }
)


def parse_exposable_event_types(raw: str, source: str = EXPOSABLE_TYPES) -> frozenset[int] | None:
    """A comma list of EventType names, or `ALL` (returned as None: every type, known or not)."""
    if raw.strip().upper() == "ALL":
        return None
    by_name = {spec.name: spec.event_type for spec in REGISTRY.values()}
    chosen: set[int] = set()
    for item in raw.split(","):
        name = item.strip()
        if not name:
            continue
        if name not in by_name:
            raise ConfigError(
                f"{source}: unknown event type {name!r} (known: {', '.join(sorted(by_name))}, or ALL)"
            )
        chosen.add(by_name[name])
    return frozenset(chosen)


@dataclass(frozen=True)
class AggregatorConfig:
    host: str = "127.0.0.1"
    grpc_port: int = 0
    export_addr: str = ""
    publish_to_http: bool = True
    max_buffer_size: int = 100_000
    max_buffer_bytes: int = 256 * 1024 * 1024
    max_batch_size: int = 1000
    exposable_event_types: frozenset[int] | None = DEFAULT_EXPOSABLE_EVENT_TYPES
    preserve_proto_field_name: bool = False
    publisher_timeout_s: float = 3.0
    publisher_max_retries: int = -1
    publisher_initial_backoff_s: float = 0.01
    publisher_max_backoff_s: float = 5.0
    publisher_jitter_ratio: float = 0.1
    publisher_send_interval_s: float = 0.1
    shutdown_flush_timeout_s: float = 10.0
    # None: 0 where the compiled JSON writer is built (it encodes a batch in less time than handing
    # it to a process takes), else 2 (the generated Python encoder, beside the event loop).
    encoder_processes: int | None = None
    metrics_port: int | None = None  # None: no /metrics, /healthz, /readyz HTTP port
    export_headers: tuple[tuple[str, str], ...] = ()  # sent with every POST (e.g. a token)
    export_ca_file: str = ""  # verifies an https export address against this CA
    queue_dir: str = ""
    queue_max_bytes: int = 1024 * 1024 * 1024  # with queue_dir: the bound of disk and memory both
    dedup_window: int = 100_000

    @classmethod
    def from_env(cls, env: Environ | None = None) -> AggregatorConfig:
        env = os.environ if env is None else env
        exposable_var = EXPOSABLE_TYPES_HTTP if env.get(EXPOSABLE_TYPES_HTTP) is not None else EXPOSABLE_TYPES
        exposable_raw = env.get(exposable_var)
        cfg = cls(
            export_addr=env.get(EXPORT_ADDR) or env.get(EXPORT_ADDR_LEGACY) or "",
            publish_to_http=env_bool(env, PUBLISH_TO_HTTP, cls.publish_to_http),
            max_buffer_size=env_int(env, MAX_BUFFER_SIZE, cls.max_buffer_size),
            max_buffer_bytes=env_int(env, MAX_BUFFER_BYTES, cls.max_buffer_bytes),
            max_batch_size=env_int(env, MAX_BATCH_SIZE, cls.max_batch_size),
            exposable_event_types=(
                DEFAULT_EXPOSABLE_EVENT_TYPES
                if exposable_raw is None
                else parse_exposable_event_types(exposable_raw, source=exposable_var)
            ),
            preserve_proto_field_name=env_bool(env, PRESERVE_PROTO_FIELD_NAME, cls.preserve_proto_field_name),
            publisher_timeout_s=env_float(env, PUBLISHER_TIMEOUT_S, cls.publisher_timeout_s),
            publisher_max_retries=env_int(env, PUBLISHER_MAX_RETRIES, cls.publisher_max_retries),
            publisher_initial_backoff_s=env_float(
                env, PUBLISHER_INITIAL_BACKOFF_S, cls.publisher_initial_backoff_s
            ),
            publisher_max_backoff_s=env_float(env, PUBLISHER_MAX_BACKOFF_S, cls.publisher_max_backoff_s),
            publisher_jitter_ratio=env_float(env, PUBLISHER_JITTER_RATIO, cls.publisher_jitter_ratio),
            publisher_send_interval_s=env_float(
                env, PUBLISHER_SEND_INTERVAL_S, cls.publisher_send_interval_s
            ),
            shutdown_flush_timeout_s=env_float(env, SHUTDOWN_FLUSH_TIMEOUT_S, cls.shutdown_flush_timeout_s),
            encoder_processes=(
                env_int(env, ENCODER_PROCESSES, 0) if env.get(ENCODER_PROCESSES, "").strip() else None
            ),
            queue_dir=env.get(QUEUE_DIR, "").strip(),
            queue_max_bytes=env_int(env, QUEUE_MAX_BYTES, cls.queue_max_bytes),
            dedup_window=env_int(env, DEDUP_WINDOW, cls.dedup_window),
        )
        cfg.validate()
        return cfg

    def with_overrides(self, **overrides: Any) -> AggregatorConfig:
        """Apply command-line values (None means "not given") and validate the result."""
        cfg = dataclasses.replace(self, **{k: v for k, v in overrides.items() if v is not None})
        cfg.validate()
        return cfg

    @property
    def http_enabled(self) -> bool:
        return self.publish_to_http and bool(self.export_addr)

    def validate(self) -> None:
        _require(0 <= self.grpc_port <= 65535, f"grpc port must be 0..65535, got {self.grpc_port}")
        _require(
            self.metrics_port is None or 0 <= self.metrics_port <= 65535,
            f"--metrics-port must be 0..65535, got {self.metrics_port}",
        )
        _require(self.max_buffer_size > 0, f"{MAX_BUFFER_SIZE} must be > 0, got {self.max_buffer_size}")
        _require(self.max_buffer_bytes > 0, f"{MAX_BUFFER_BYTES} must be > 0, got {self.max_buffer_bytes}")
        _require(self.queue_max_bytes > 0, f"{QUEUE_MAX_BYTES} must be > 0, got {self.queue_max_bytes}")
        _require(self.dedup_window >= 0, f"{DEDUP_WINDOW} must be >= 0, got {self.dedup_window}")
        _require(self.max_batch_size > 0, f"{MAX_BATCH_SIZE} must be > 0, got {self.max_batch_size}")
        _require(
            self.publisher_timeout_s > 0, f"{PUBLISHER_TIMEOUT_S} must be > 0, got {self.publisher_timeout_s}"
        )
        _require(
            self.publisher_max_retries >= -1,
            f"{PUBLISHER_MAX_RETRIES} must be -1 (forever) or >= 0, got {self.publisher_max_retries}",
        )
        _require(
            0 <= self.publisher_initial_backoff_s <= self.publisher_max_backoff_s,
            f"{PUBLISHER_INITIAL_BACKOFF_S} must be >= 0 and <= {PUBLISHER_MAX_BACKOFF_S}",
        )
        _require(
            0 <= self.publisher_jitter_ratio <= 1,
            f"{PUBLISHER_JITTER_RATIO} must be in [0, 1], got {self.publisher_jitter_ratio}",
        )
        _require(
            self.publisher_send_interval_s >= 0,
            f"{PUBLISHER_SEND_INTERVAL_S} must be >= 0, got {self.publisher_send_interval_s}",
        )
        _require(
            self.shutdown_flush_timeout_s >= 0,
            f"{SHUTDOWN_FLUSH_TIMEOUT_S} must be >= 0, got {self.shutdown_flush_timeout_s}",
        )
        _require(
            self.encoder_processes is None or 0 <= self.encoder_processes <= 64,
            f"{ENCODER_PROCESSES} must be 0 (encode on the event loop) to 64, got {self.encoder_processes}",
        )
        if self.export_addr:
            _require(
                self.export_addr.startswith(("http://", "https://")),
                f"{EXPORT_ADDR}={self.export_addr!r}: expected an http:// or https:// URL",
            )


# ---------------------------------------------------------------------------------------------
# Tracing: the startup hooks and the span processor that turns task spans into RayEvents.
# (The OTLP hook's exporter settings are the standard OTEL_* variables, read by the OTel SDK.)

SPANS_DIR = "RAY_OTEL_EVENTS_SPANS_DIR"
# Ray Serve's own: its proxy reads only this (and the sampling ratio), so it is read to warn when unset.
SERVE_TRACING_EXPORTER = "RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH"
EVENT_LOGS = "RAY_OTEL_EVENTS_EVENT_LOGS"
SYNC_TASK_EVENTS = "RAY_OTEL_EVENTS_SYNC_TASK_EVENTS"
TASK_OUTPUT = "RAY_OTEL_EVENTS_TASK_OUTPUT"  # 0: a Ray worker's prints are not made log records
RAY_WRAPPERS = "RAY_OTEL_EVENTS_RAY_WRAPPERS"  # 0: Ray's tracing helpers left as shipped
# Standard OTel names; the SDK exporters read the rest (endpoint, headers, timeout, compression).
OTLP_PROTOCOL = "OTEL_EXPORTER_OTLP_PROTOCOL"
OTLP_TRACES_PROTOCOL = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
OTLP_LOGS_PROTOCOL = "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL"
OTLP_HOOK_PROTOCOLS = ("http/protobuf", "grpc")


def otlp_protocol(env: Environ, signal_variable: str) -> str:
    """The OTLP protocol for one signal: its own variable, else the general one, else http/protobuf
    (the spec's default; the Python SDK's autoconfiguration alone defaults to grpc)."""
    source = signal_variable if env.get(signal_variable, "").strip() else OTLP_PROTOCOL
    value = env.get(source, "").strip().lower() or "http/protobuf"
    _require(
        value in OTLP_HOOK_PROTOCOLS, f"{source}={value!r}: expected one of {', '.join(OTLP_HOOK_PROTOCOLS)}"
    )
    return value


def parse_host_port(raw: str, source: str) -> str:
    """`host:port` with a port in 1..65535 (IPv6 hosts in brackets), returned stripped."""
    value = raw.strip()
    host, sep, port = value.rpartition(":")
    _require(bool(sep) and bool(host) and port.isdigit(), f"{source}={raw!r}: expected host:port")
    _require(1 <= int(port) <= 65535, f"{source}={raw!r}: port must be 1..65535")
    return value


@dataclass(frozen=True)
class TracingConfig:
    spans_dir: str = "/tmp/spans"
    aggregator_address: str = ""  # empty: events become log records only, no recorder
    session_name: str = ""
    node_id: bytes = b""  # empty: derived from the host name
    # Every task/actor event also as an OTel log record: None leaves it to the hook (the OTLP hook
    # on, the local hook off: a log record costs more than the span it comes from).
    event_logs: bool | None = None
    # Export a task's events before it returns (a round trip per task); see TaskEventSpanProcessor.
    sync_task_events: bool = False
    # In a Ray worker, each line a task writes to stdout/stderr also as a log record with its ids.
    task_output: bool = True
    # Ray's tracing wrappers call our cheaper, equivalent helpers (tracing/ray_wrappers.py).
    ray_wrappers: bool = True
    # Ray's core workers export their own task events: in a Ray process, no recorder of ours sends
    # the same tasks again under the ids a hook derives.
    ray_exports_task_events: bool = False

    @classmethod
    def from_env(cls, env: Environ | None = None) -> TracingConfig:
        env = os.environ if env is None else env
        aggregator = env.get(AGGREGATOR_ADDRESS, "").strip()
        node_raw = env.get(NODE_ID, "").strip()
        try:
            node = bytes.fromhex(node_raw)
        except ValueError:
            raise ConfigError(f"{NODE_ID}={node_raw!r}: expected hex") from None
        cfg = cls(
            spans_dir=env.get(SPANS_DIR, "").strip() or cls.spans_dir,
            aggregator_address=parse_host_port(aggregator, AGGREGATOR_ADDRESS) if aggregator else "",
            session_name=env_str(env, SESSION_NAME, cls.session_name),
            node_id=node,
            event_logs=env_bool(env, EVENT_LOGS, False) if env.get(EVENT_LOGS, "").strip() else None,
            sync_task_events=env_bool(env, SYNC_TASK_EVENTS, cls.sync_task_events),
            task_output=env_bool(env, TASK_OUTPUT, cls.task_output),
            ray_wrappers=env_bool(env, RAY_WRAPPERS, cls.ray_wrappers),
            ray_exports_task_events=ray_flag(env, ENABLE_RAY_EVENT) and ray_flag(env, CORE_WORKER_RAY_EVENTS),
        )
        cfg.validate()
        return cfg

    def validate(self) -> None:
        _require(
            len(self.node_id) in (0, 28),
            f"{NODE_ID} must be 28 bytes (56 hex digits), got {len(self.node_id)}",
        )


def serve_tracing_exporter(env: Environ | None = None) -> str:
    """The exporter import path Ray Serve's proxy will call ("" when unset)."""
    env = os.environ if env is None else env
    return env.get(SERVE_TRACING_EXPORTER, "")


def otlp_exporter_settings(env: Environ | None = None) -> dict[str, str]:
    """Every OTEL_EXPORTER_OTLP_* variable set, as given: what decides where and how spans go."""
    env = os.environ if env is None else env
    return {name: value for name, value in env.items() if name.startswith("OTEL_EXPORTER_OTLP_")}


@dataclass(frozen=True)
class OtlpProtocols:
    """The wire protocol per signal for the OTLP hook (the only OTEL_* choice the SDK leaves to us)."""

    traces: str = "http/protobuf"
    logs: str = "http/protobuf"

    @classmethod
    def from_env(cls, env: Environ | None = None) -> OtlpProtocols:
        env = os.environ if env is None else env
        return cls(
            traces=otlp_protocol(env, OTLP_TRACES_PROTOCOL), logs=otlp_protocol(env, OTLP_LOGS_PROTOCOL)
        )


# The lineage mode (tracing/lineage.py): no tracing hook, user spans parented by Ray's runtime
# context. A driver given the W3C `traceparent` of its caller links its spans to the caller's
# (the variable name of OpenTelemetry's environment-carrier convention).
TRACEPARENT_ENV = "TRACEPARENT"
_TRACEPARENT_RE = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")


@dataclass(frozen=True)
class LineageConfig:
    """What the lineage mode reads: the caller's span context, the OTLP protocols (the endpoint,
    headers and timeouts are the standard OTEL_EXPORTER_OTLP_* variables the exporters read)."""

    # (trace id, span id, trace flags) of the caller, from TRACEPARENT; None when unset.
    caller: tuple[int, int, int] | None = None
    protocols: OtlpProtocols = OtlpProtocols()
    task_output: bool = True

    @classmethod
    def from_env(cls, env: Environ | None = None) -> LineageConfig:
        env = os.environ if env is None else env
        raw = env.get(TRACEPARENT_ENV, "").strip()
        return cls(
            caller=parse_traceparent(raw, TRACEPARENT_ENV) if raw else None,
            protocols=OtlpProtocols.from_env(env),
            task_output=env_bool(env, TASK_OUTPUT, cls.task_output),
        )


def parse_traceparent(raw: str, source: str) -> tuple[int, int, int]:
    """A W3C `traceparent` (version 00) as (trace id, span id, flags); all-zero ids are invalid."""
    match = _TRACEPARENT_RE.fullmatch(raw.strip().lower())
    _require(match is not None, f"{source}={raw!r}: expected a W3C traceparent 00-<32 hex>-<16 hex>-<2 hex>")
    assert match is not None
    trace_id, span_id, flags = (int(group, 16) for group in match.groups())
    _require(trace_id != 0 and span_id != 0, f"{source}={raw!r}: all-zero trace or span id")
    return trace_id, span_id, flags


# ---------------------------------------------------------------------------------------------
# The bridge: OTLP/HTTP in -> RayEvent JSON out, and RayEvent JSON in -> OTLP out.
# Its OTLP exporter reads the standard OTEL_EXPORTER_OTLP_* variables (HTTP only) and
# OTEL_SERVICE_NAME; `--otlp-endpoint` overrides the endpoint variables.

_BRIDGE = "RAY_OTEL_EVENTS_BRIDGE_"
BRIDGE_MAX_BODY_BYTES = _BRIDGE + "MAX_BODY_BYTES"
BRIDGE_QUEUE_SIZE = _BRIDGE + "QUEUE_SIZE"
BRIDGE_QUEUE_BYTES = _BRIDGE + "QUEUE_BYTES"
BRIDGE_BATCH_SIZE = _BRIDGE + "BATCH_SIZE"
BRIDGE_SEND_INTERVAL_S = _BRIDGE + "SEND_INTERVAL_SECONDS"
BRIDGE_MAX_OPEN_ENTITIES = _BRIDGE + "MAX_OPEN_ENTITIES"
BRIDGE_ENTITY_TTL_S = _BRIDGE + "ENTITY_TTL_SECONDS"
BRIDGE_TERMINAL_GRACE_S = _BRIDGE + "TERMINAL_GRACE_SECONDS"
BRIDGE_DEDUP_WINDOW = _BRIDGE + "DEDUP_WINDOW"
BRIDGE_MAX_OPEN_BYTES = _BRIDGE + "MAX_OPEN_BYTES"
BRIDGE_WORKERS = _BRIDGE + "WORKERS"
# The OTLP hook's spool: span lines written by every traced process, sent by one forwarder per node.
SPOOL_DIR = "RAY_OTEL_EVENTS_SPOOL_DIR"
SPOOL_MAX_BYTES = "RAY_OTEL_EVENTS_SPOOL_MAX_BYTES"
FORWARDER_IDLE_S = "RAY_OTEL_EVENTS_FORWARDER_IDLE_SECONDS"
FORWARDER_RETRY_S = "RAY_OTEL_EVENTS_FORWARDER_RETRY_SECONDS"
FORWARDER_NICE = "RAY_OTEL_EVENTS_FORWARDER_NICE"
FORWARDER_LINGER_S = "RAY_OTEL_EVENTS_FORWARDER_LINGER_SECONDS"


def default_spool_root() -> str:
    """Per user, outside any Ray session folder: what a job could not deliver is sent at the next start."""
    return os.path.join(tempfile.gettempdir(), f"ray_otel_events-{os.getuid()}", "spool")


@dataclass(frozen=True)
class SpoolConfig:
    """Where the OTLP hook's processes hand their spans over, and how the forwarder treats them."""

    root: str = ""  # empty: default_spool_root()
    max_bytes: int = 256 * 1024 * 1024  # past this the oldest finished files are dropped and counted
    idle_s: float = 2.0  # the forwarder exits this long after its last writer ended and all is sent
    retry_s: float = 300.0  # ...or after failing this long with no writer left (the spool waits)
    nice: int = 10  # the forwarder yields the cores to the job it follows
    # A file still being written is sent once this old or `linger_bytes` big: each request costs
    # about as much as the spans of a few hundred tasks, so sending every poll would cost more
    # than the spans themselves.
    linger_s: float = 0.25
    linger_bytes: int = 256 * 1024  # the most one chunk of requests takes

    @classmethod
    def from_env(cls, env: Environ | None = None) -> SpoolConfig:
        env = os.environ if env is None else env
        cfg = cls(
            root=env.get(SPOOL_DIR, "").strip() or default_spool_root(),
            max_bytes=env_int(env, SPOOL_MAX_BYTES, cls.max_bytes),
            idle_s=env_float(env, FORWARDER_IDLE_S, cls.idle_s),
            retry_s=env_float(env, FORWARDER_RETRY_S, cls.retry_s),
            nice=env_int(env, FORWARDER_NICE, cls.nice),
            linger_s=env_float(env, FORWARDER_LINGER_S, cls.linger_s),
        )
        _require(cfg.max_bytes > 0, f"{SPOOL_MAX_BYTES} must be > 0, got {cfg.max_bytes}")
        _require(cfg.idle_s >= 0 and cfg.retry_s >= 0, "forwarder idle and retry seconds must be >= 0")
        _require(0 <= cfg.nice <= 19, f"{FORWARDER_NICE} must be 0..19, got {cfg.nice}")
        _require(cfg.linger_s >= 0, f"{FORWARDER_LINGER_S} must be >= 0, got {cfg.linger_s}")
        return cfg


def otlp_export_config(signal: str, env: Environ | None = None) -> OtlpSignalConfig:
    """The OTLP hook's settings for `signal` in either of its protocols: over http/protobuf those of
    `otlp_signal_config`; over grpc the endpoint is used as given (default http://localhost:4317),
    as the SDK's gRPC exporters use it, with the same headers, compression, timeout and certificate."""
    env = os.environ if env is None else env
    protocol = otlp_protocol(env, _signal_var(OTLP_PROTOCOL, signal))
    if protocol != "grpc":
        return otlp_signal_config(signal, env={**env, _signal_var(OTLP_PROTOCOL, signal): protocol})
    as_http = otlp_signal_config(signal, env={**env, _signal_var(OTLP_PROTOCOL, signal): "http/protobuf"})
    specific = _signal_var(OTEL_ENDPOINT, signal)
    endpoint = (env.get(specific, "") or env.get(OTEL_ENDPOINT, "")).strip() or "http://localhost:4317"
    source = specific if env.get(specific, "").strip() else OTEL_ENDPOINT
    _require(endpoint.startswith(("http://", "https://")), f"{source}={endpoint!r}: expected a URL")
    insecure = otlp_insecure(signal, env)
    return dataclasses.replace(as_http, endpoint=endpoint, protocol="grpc", insecure=insecure)


def otlp_insecure(signal: str, env: Environ | None = None) -> bool | None:
    """OTEL_EXPORTER_OTLP_[SIGNAL_]INSECURE (the per-signal one wins): None when unset. As the spec
    reads a boolean, only `true` (any case) is true; another value than `false` is false too, with
    a warning naming it (the spec's rule: a value the SDK would take as false must not fail here)."""
    env = os.environ if env is None else env
    for name in (_signal_var(OTEL_INSECURE, signal), OTEL_INSECURE):
        raw = env.get(name, "").strip()
        if not raw:
            continue
        if raw.lower() not in ("true", "false"):
            logger.warning("%s=%r: expected true or false; taken as false (TLS)", name, raw)
        return raw.lower() == "true"
    return None


def otlp_timeout_s(signal: str, env: Environ | None = None) -> float | None:
    """The export timeout OTEL_EXPORTER_OTLP_[SIGNAL_]TIMEOUT sets (milliseconds, as the spec
    says), in seconds, whatever the protocol; None when neither is set."""
    env = os.environ if env is None else env
    for name in (_signal_var(OTEL_TIMEOUT_MS, signal), OTEL_TIMEOUT_MS):
        if env.get(name, "").strip():
            timeout_ms = env_float(env, name, 0.0)
            _require(timeout_ms > 0, f"{name} must be > 0, got {timeout_ms:g}")
            return timeout_ms / 1000.0
    return None


BRIDGE_MODES = ("full", "convert", "assemble")

OTEL_ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
OTEL_PROTOCOL = "OTEL_EXPORTER_OTLP_PROTOCOL"
OTEL_HEADERS = "OTEL_EXPORTER_OTLP_HEADERS"
OTEL_COMPRESSION = "OTEL_EXPORTER_OTLP_COMPRESSION"
OTEL_TIMEOUT_MS = "OTEL_EXPORTER_OTLP_TIMEOUT"
OTEL_CERTIFICATE = "OTEL_EXPORTER_OTLP_CERTIFICATE"  # CA file that verifies an https endpoint
OTEL_SERVICE_NAME = "OTEL_SERVICE_NAME"
OTEL_INSECURE = "OTEL_EXPORTER_OTLP_INSECURE"  # gRPC only: true is no TLS; unset: TLS for https only
# The client certificate (PEM, with its chain) and its key presented to a Collector that requires
# client certificates (mutual TLS); the key may be in the certificate's file instead.
OTEL_CLIENT_CERTIFICATE = "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"
OTEL_CLIENT_KEY = "OTEL_EXPORTER_OTLP_CLIENT_KEY"
OTLP_PROTOCOLS = ("http/protobuf", "http/json")


def _signal_var(base: str, signal: str) -> str:
    """OTEL_EXPORTER_OTLP_X -> OTEL_EXPORTER_OTLP_TRACES_X (the per-signal variant)."""
    return base.replace("OTEL_EXPORTER_OTLP_", f"OTEL_EXPORTER_OTLP_{signal.upper()}_", 1)


def parse_otlp_headers(raw: str, source: str) -> dict[str, str]:
    """`k=v,k2=v2` (W3C baggage style, values URL-decoded), as the OTLP exporter spec says."""
    headers: dict[str, str] = {}
    for item in raw.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        _require(bool(sep) and bool(key.strip()), f"{source}={raw!r}: expected key=value pairs")
        headers[unquote(key.strip())] = unquote(value.strip())
    return headers


@dataclass(frozen=True)
class OtlpSignalConfig:
    """Where and how one signal (traces or logs) is exported."""

    endpoint: str
    protocol: str = "http/protobuf"
    headers: tuple[tuple[str, str], ...] = ()
    compression: str = "none"
    timeout_s: float = 10.0
    certificate: str = ""
    insecure: bool | None = None  # grpc: no TLS when true; None: TLS only for an https endpoint
    client_certificate: str = ""  # mutual TLS: presented when set (with `client_key`, if set)
    client_key: str = ""

    def validate(self, source: str) -> None:
        _require(
            self.endpoint.startswith(("http://", "https://")),
            f"{source}={self.endpoint!r}: expected an http:// or https:// URL",
        )
        _require(self.protocol in OTLP_PROTOCOLS, f"OTLP protocol must be one of {OTLP_PROTOCOLS}")
        _require(self.compression in ("none", "gzip"), "OTLP compression must be none or gzip")
        _require(self.timeout_s > 0, f"OTLP export timeout must be > 0, got {self.timeout_s}")


def otlp_signal_config(
    signal: str, endpoint_override: str = "", env: Environ | None = None
) -> OtlpSignalConfig:
    """The exporter settings for `signal` ("traces" or "logs") per the OTLP exporter spec.

    Endpoint: `endpoint_override` (a base URL) wins; else the per-signal variable, used as is; else
    OTEL_EXPORTER_OTLP_ENDPOINT + /v1/<signal>; else http://localhost:4318/v1/<signal>.
    """
    env = os.environ if env is None else env

    def pick(base: str) -> tuple[str, str | None]:
        specific = _signal_var(base, signal)
        if env.get(specific, "").strip():
            return specific, env[specific].strip()
        if env.get(base, "").strip():
            return base, env[base].strip()
        return base, None

    if endpoint_override:
        source, endpoint = "--otlp-endpoint", endpoint_override.rstrip("/") + f"/v1/{signal}"
    elif env.get(_signal_var(OTEL_ENDPOINT, signal), "").strip():
        source = _signal_var(OTEL_ENDPOINT, signal)
        endpoint = env[source].strip()
    else:
        base = env.get(OTEL_ENDPOINT, "").strip() or "http://localhost:4318"
        source, endpoint = OTEL_ENDPOINT, base.rstrip("/") + f"/v1/{signal}"
    protocol_var, protocol = pick(OTEL_PROTOCOL)
    headers_var, headers_raw = pick(OTEL_HEADERS)
    compression_var, compression = pick(OTEL_COMPRESSION)
    timeout_var, timeout_raw = pick(OTEL_TIMEOUT_MS)
    _, certificate = pick(OTEL_CERTIFICATE)
    _, client_certificate = pick(OTEL_CLIENT_CERTIFICATE)
    client_key_var, client_key = pick(OTEL_CLIENT_KEY)
    if client_key and not client_certificate:
        logger.warning(
            "%s is set without a client certificate: no client certificate is presented", client_key_var
        )
    timeout_ms = env_float({timeout_var: timeout_raw} if timeout_raw else {}, timeout_var, 10_000.0)
    cfg = OtlpSignalConfig(
        endpoint=endpoint,
        protocol=(protocol or "http/protobuf").lower(),
        headers=tuple(parse_otlp_headers(headers_raw or "", headers_var).items()),
        compression=(compression or "none").lower(),
        timeout_s=timeout_ms / 1000.0,
        certificate=certificate or "",
        client_certificate=client_certificate or "",
        client_key=client_key or "",
    )
    _require(
        cfg.protocol in OTLP_PROTOCOLS,
        f"{protocol_var}={protocol!r}: the bridge exports OTLP over HTTP only ({', '.join(OTLP_PROTOCOLS)})",
    )
    _require(cfg.compression in ("none", "gzip"), f"{compression_var}={compression!r}: expected gzip or none")
    cfg.validate(source)
    return cfg


@dataclass(frozen=True)
class BridgeConfig:
    host: str = "127.0.0.1"
    port: int = 0
    export_addr: str = ""
    spans_export_addr: str = ""
    otlp_endpoint: str = ""  # a base URL; empty: the OTEL_EXPORTER_OTLP_* variables decide
    service_name: str = "ray"
    max_body_bytes: int = 64 * 1024 * 1024
    queue_size: int = 100_000
    queue_bytes: int = 256 * 1024 * 1024
    batch_size: int = 1000
    send_interval_s: float = 0.1
    max_open_entities: int = 100_000
    max_open_bytes: int = 256 * 1024 * 1024  # what open entities may hold (about 1 KiB each)
    entity_ttl_s: float = 600.0
    terminal_grace_s: float = 2.0
    dedup_window: int = 200_000
    # full: RayEvents -> log records and spans; convert: log records only (spans assembled by an
    # assemble tier routed by trace id); assemble: OTLP log records carrying RayEvents -> spans.
    mode: str = "full"
    grpc_port: int | None = None  # an OTLP/gRPC receiver (what the Collector's loadbalancing speaks)
    workers: int = 1  # processes behind the one port, RayEvents routed between them by trace id
    preserve_proto_field_name: bool = False
    publisher_timeout_s: float = 3.0
    shutdown_flush_timeout_s: float = 10.0
    queue_dir: str = ""  # set: queues and open entities kept on disk (durable)
    queue_max_bytes: int = 1024 * 1024 * 1024  # with queue_dir: the bound of each queue on disk

    @classmethod
    def from_env(cls, env: Environ | None = None) -> BridgeConfig:
        env = os.environ if env is None else env
        cfg = cls(
            service_name=env.get(OTEL_SERVICE_NAME, "").strip() or cls.service_name,
            max_body_bytes=env_int(env, BRIDGE_MAX_BODY_BYTES, cls.max_body_bytes),
            queue_size=env_int(env, BRIDGE_QUEUE_SIZE, cls.queue_size),
            queue_bytes=env_int(env, BRIDGE_QUEUE_BYTES, cls.queue_bytes),
            batch_size=env_int(env, BRIDGE_BATCH_SIZE, cls.batch_size),
            send_interval_s=env_float(env, BRIDGE_SEND_INTERVAL_S, cls.send_interval_s),
            max_open_entities=env_int(env, BRIDGE_MAX_OPEN_ENTITIES, cls.max_open_entities),
            max_open_bytes=env_int(env, BRIDGE_MAX_OPEN_BYTES, cls.max_open_bytes),
            workers=env_int(env, BRIDGE_WORKERS, cls.workers),
            entity_ttl_s=env_float(env, BRIDGE_ENTITY_TTL_S, cls.entity_ttl_s),
            terminal_grace_s=env_float(env, BRIDGE_TERMINAL_GRACE_S, cls.terminal_grace_s),
            dedup_window=env_int(env, BRIDGE_DEDUP_WINDOW, cls.dedup_window),
            preserve_proto_field_name=env_bool(env, PRESERVE_PROTO_FIELD_NAME, cls.preserve_proto_field_name),
            publisher_timeout_s=env_float(env, PUBLISHER_TIMEOUT_S, cls.publisher_timeout_s),
            shutdown_flush_timeout_s=env_float(env, SHUTDOWN_FLUSH_TIMEOUT_S, cls.shutdown_flush_timeout_s),
            queue_dir=env.get(QUEUE_DIR, "").strip(),
            queue_max_bytes=env_int(env, QUEUE_MAX_BYTES, cls.queue_max_bytes),
        )
        cfg.validate()
        return cfg

    def with_overrides(self, **overrides: Any) -> BridgeConfig:
        """Apply command-line values (None means "not given") and validate the result."""
        cfg = dataclasses.replace(self, **{k: v for k, v in overrides.items() if v is not None})
        cfg.validate()
        return cfg

    def otlp(self, signal: str, env: Environ | None = None) -> OtlpSignalConfig:
        return otlp_signal_config(signal, self.otlp_endpoint, env)

    def validate(self) -> None:
        _require(0 <= self.port <= 65535, f"--port must be 0..65535, got {self.port}")
        for name, url in (
            ("--export-addr", self.export_addr),
            ("--spans-export-addr", self.spans_export_addr),
            ("--otlp-endpoint", self.otlp_endpoint),
        ):
            if url:
                _require(
                    url.startswith(("http://", "https://")), f"{name}={url!r}: expected an http(s):// URL"
                )
        positive = {
            BRIDGE_MAX_BODY_BYTES: self.max_body_bytes,
            BRIDGE_QUEUE_SIZE: self.queue_size,
            BRIDGE_QUEUE_BYTES: self.queue_bytes,
            BRIDGE_BATCH_SIZE: self.batch_size,
            BRIDGE_MAX_OPEN_ENTITIES: self.max_open_entities,
            BRIDGE_MAX_OPEN_BYTES: self.max_open_bytes,
            BRIDGE_WORKERS: self.workers,
            BRIDGE_ENTITY_TTL_S: self.entity_ttl_s,
            BRIDGE_DEDUP_WINDOW: self.dedup_window,
            PUBLISHER_TIMEOUT_S: self.publisher_timeout_s,
            QUEUE_MAX_BYTES: self.queue_max_bytes,
        }
        for name, value in positive.items():
            _require(value > 0, f"{name} must be > 0, got {value}")
        _require(
            self.mode in BRIDGE_MODES, f"mode must be one of {', '.join(BRIDGE_MODES)}, got {self.mode!r}"
        )
        if self.grpc_port is not None:
            _require(0 <= self.grpc_port <= 65535, f"--grpc-port must be 0..65535, got {self.grpc_port}")
        _require(
            self.send_interval_s >= 0, f"{BRIDGE_SEND_INTERVAL_S} must be >= 0, got {self.send_interval_s}"
        )
        _require(
            self.terminal_grace_s >= 0, f"{BRIDGE_TERMINAL_GRACE_S} must be >= 0, got {self.terminal_grace_s}"
        )
        _require(
            self.shutdown_flush_timeout_s >= 0,
            f"{SHUTDOWN_FLUSH_TIMEOUT_S} must be >= 0, got {self.shutdown_flush_timeout_s}",
        )


# ---------------------------------------------------------------------------------------------
# Compiled helpers (built by setup.py where a C compiler is present; the package runs without).

PURE_PYTHON = "RAY_OTEL_EVENTS_PURE_PYTHON"  # 1: use the Python code even where a compiled copy is built


def compiled_enabled(env: Environ = os.environ) -> bool:
    """Whether the compiled copies (the log-record walk, the RayEvent JSON reader and writer, OTLP
    values read from wire bytes, spans' JSON records, OTLP records and requests written from their
    parts, lifecycle transitions and task parts from wire bytes, RayEvent heads, the store's fold and
    row writer) may be used: the same results, faster."""
    return not env_bool(env, PURE_PYTHON, False)


# ---------------------------------------------------------------------------------------------
# The store `serve` writes and the state commands read.

STORE = "RAY_OTEL_EVENTS_STORE"  # a SQLite file or postgresql://USER@HOST:PORT/DB, as --store takes
# The POST bodies `serve` holds answered but not yet folded (each is also in the intake spool on
# disk); past this a POST waits for the fold. It is most of what `serve`'s memory grows by when the
# store falls behind the stream: 200,000 events (its other bound) of a real stream are ~220 MB.
STORE_MAX_PENDING_BYTES = "RAY_OTEL_EVENTS_STORE_MAX_PENDING_BYTES"
DEFAULT_STORE_MAX_PENDING_BYTES = 64 * 1024 * 1024
# How long `serve` lets the first answered POST wait for more before folding them in one
# transaction (a read through `serve` ends the wait): an attempt whose pieces land in one batch is
# written once (store/background_fold.py). 0 folds each POST at once.
STORE_FOLD_LINGER = "RAY_OTEL_EVENTS_STORE_FOLD_LINGER_SECONDS"
DEFAULT_STORE_FOLD_LINGER_S = 1.0


ADDRESS = "RAY_OTEL_EVENTS_ADDRESS"  # a running serve the state commands ask, as --address takes
XDG_DATA_HOME = "XDG_DATA_HOME"  # the default store file lies under it (~/.local/share when unset)
TIMEZONE = "TZ"  # the zone `serve`'s dashboard reports, as Ray's head does


def store_location(env: Environ = os.environ) -> str | None:
    """The store named in the environment (None: the default file); `--store` wins over it."""
    return env.get(STORE) or None


def store_max_pending_bytes(env: Environ = os.environ) -> int:
    """`STORE_MAX_PENDING_BYTES`, checked."""
    value = env_int(env, STORE_MAX_PENDING_BYTES, DEFAULT_STORE_MAX_PENDING_BYTES)
    _require(value > 0, f"{STORE_MAX_PENDING_BYTES} must be > 0, got {value}")
    return value


def store_fold_linger_s(env: Environ = os.environ) -> float:
    """`STORE_FOLD_LINGER`, checked."""
    value = env_float(env, STORE_FOLD_LINGER, DEFAULT_STORE_FOLD_LINGER_S)
    _require(0 <= value <= 60, f"{STORE_FOLD_LINGER} must be between 0 and 60 seconds, got {value}")
    return value


def data_home(env: Environ = os.environ) -> str:
    """`$XDG_DATA_HOME`, else ~/.local/share (the XDG base directory default)."""
    return env.get(XDG_DATA_HOME) or os.path.join(os.path.expanduser("~"), ".local", "share")


def parse_serve_address(raw: str, source: str) -> str:
    """`http(s)://HOST:PORT[/PREFIX]`, or `HOST:PORT` (http), returned with its scheme."""
    value = raw.strip()
    url = value if "://" in value else "http://" + value
    parsed = urlparse(url)
    _require(
        parsed.scheme in ("http", "https") and bool(parsed.hostname),
        f"{source}={raw!r}: expected http://HOST:PORT",
    )
    try:
        parsed.port  # noqa: B018 (urlparse checks the port only when asked for it)
    except ValueError:
        raise ConfigError(f"{source}={raw!r}: the port must be a number 0..65535") from None
    return url


def serve_address(env: Environ = os.environ) -> str | None:
    """The `serve` the state commands ask (None: they read the store); `--address` wins over it."""
    raw = env.get(ADDRESS, "")
    return parse_serve_address(raw, ADDRESS) if raw.strip() else None


# How long `serve` waits before it tells a cluster wired wrong: no event at all this long after it
# started, or a session lacking a kind of event for this long after the events that need it.
WIRING_CHECK_DELAY_S = "RAY_OTEL_EVENTS_WIRING_CHECK_DELAY_SECONDS"
DEFAULT_WIRING_CHECK_DELAY_S = 60.0


def wiring_check_delay_s(env: Environ = os.environ) -> float:
    """`serve --wiring-check-delay`'s default (seconds, > 0)."""
    delay = env_float(env, WIRING_CHECK_DELAY_S, DEFAULT_WIRING_CHECK_DELAY_S)
    _require(delay > 0, f"{WIRING_CHECK_DELAY_S}={delay}: expected a number of seconds above 0")
    return delay


def timezone_name(env: Environ = os.environ) -> str:
    """This machine's zone name: `$TZ`, else the zone /etc/localtime links to, else UTC."""
    zone = env.get(TIMEZONE) or "UTC"
    if not env.get(TIMEZONE) and os.path.islink("/etc/localtime"):
        zone = os.readlink("/etc/localtime").split("zoneinfo/", 1)[-1]
    return zone
