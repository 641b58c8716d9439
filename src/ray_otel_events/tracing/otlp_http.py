"""Posting OTLP/HTTP protobuf bodies with the settings the SDK exporters read, retried as they are.

Shared by the OTLP hook's forwarder (tracing/forwarder.py, one attempt at a time: what fails stays
in its spool) and its in-process writers (event records, `otlp_event_logs`; spans, `otlp_spans`):
the endpoint, headers, compression, timeout, CA certificate and client certificate (mutual TLS) of
`config.otlp_signal_config`.
Retryable failures (connection, 429/502/503/504) are retried with backoff until the export timeout
(or the caller's deadline); after that, or on a permanent status, the items are counted as dropped
and reported once. The HTTP session is made in the process that posts, so a forked child never
uses its parent's connection.
"""

from __future__ import annotations

import gzip
import http.client
import logging
import os
import random
import ssl
import time
import urllib.parse

import requests

from ray_otel_events.config import OtlpSignalConfig
from ray_otel_events.exporters.retry import RetryPolicy, SendError, is_retryable, status_error
from ray_otel_events.metrics import Counters

logger = logging.getLogger("ray_otel_events.tracing")

DROPPED = "dropped_records"  # labelled reason=queue_full|rejected|retries_exhausted
RETRY = RetryPolicy(initial_backoff_s=0.1, max_backoff_s=2.0)


class _KeptAlive:
    """One kept-alive connection to the endpoint (http.client): about 0.3M instructions a request,
    where requests' Session takes about 2M (its adapters, hooks, cookies and settings merges, for
    features an OTLP post without a proxy or netrc does not use)."""

    def __init__(
        self, endpoint: str, verify: bool | str, timeout_s: float, cert: tuple[str, str | None] | None = None
    ) -> None:
        url = urllib.parse.urlsplit(endpoint)
        self.https = url.scheme == "https"
        self.host = url.hostname or ""
        self.port = url.port
        self.path = (url.path or "/") + (f"?{url.query}" if url.query else "")
        self.timeout_s = timeout_s
        self.context: ssl.SSLContext | None = None
        if self.https:
            self.context = ssl.create_default_context(cafile=verify if isinstance(verify, str) else None)
            if verify is False:
                self.context.check_hostname = False
                self.context.verify_mode = ssl.CERT_NONE
            if cert is not None:
                self.context.load_cert_chain(*cert)
        self._conn: http.client.HTTPConnection | None = None

    def post(self, body: bytes, headers: dict[str, str]) -> tuple[int, bytes, str | None]:
        """(status, body, Retry-After) of one POST; OSError or HTTPException when it failed."""
        for _ in range(2):
            reused = self._conn is not None
            if self._conn is None:
                if self.https:
                    self._conn = http.client.HTTPSConnection(
                        self.host, self.port, timeout=self.timeout_s, context=self.context
                    )
                else:
                    self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
            try:
                self._conn.request("POST", self.path, body, headers)
                response = self._conn.getresponse()
                content = response.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.close()
                if reused:
                    continue  # the endpoint closed the idle connection: once more, on a new one
                raise
            except BaseException:
                self.close()
                raise
            if response.will_close:
                self.close()
            return response.status, content, response.getheader("Retry-After")
        raise AssertionError("unreachable: the second attempt is on a new connection")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class OtlpHttpPoster:
    """Posts serialized export requests to one OTLP/HTTP endpoint; `exported` names the counter of
    items delivered."""

    def __init__(
        self, config: OtlpSignalConfig, counters: Counters, *, exported: str, retry: RetryPolicy = RETRY
    ) -> None:
        if config.protocol != "http/protobuf":
            raise ValueError(f"OTLP posts are http/protobuf, not {config.protocol}")
        self.config = config
        self.counters = counters
        self.exported = exported
        self.retry = retry
        self._headers = {"Content-Type": "application/x-protobuf", **dict(config.headers)}
        if config.compression == "gzip":
            self._headers["Content-Encoding"] = "gzip"
        self._verify: bool | str = config.certificate or True
        # the client certificate and its key (mutual TLS), as the SDK's exporter presents them
        self._cert = (
            (config.client_certificate, config.client_key or None) if config.client_certificate else None
        )
        self._rng = random.Random()
        self._warned = False
        self._session: requests.Session | _KeptAlive | None = None
        self._session_pid = -1

    def post(self, body: bytes, items: int, deadline: float | None = None, *, what: str = "records") -> bool:
        """Deliver one request holding `items` items; True once a 2xx answered it."""
        if self.config.compression == "gzip":
            body = gzip.compress(body, compresslevel=6)
        give_up = time.monotonic() + self.config.timeout_s if deadline is None else deadline
        failures = 0
        while True:
            try:
                self._send(body)
                self.counters.add(self.exported, items)
                return True
            except Exception as exc:  # any failure: a hook must never take the process down
                failures += 1
                delay = self.retry.delay_s(failures, exc, self._rng)
                if not is_retryable(exc) or time.monotonic() + delay > give_up:
                    reason = "retries_exhausted" if is_retryable(exc) else "rejected"
                    self.counters.add(DROPPED, items, reason=reason)
                    self._warn(f"{items} {what} not exported ({reason}): {exc}")
                    return False
                time.sleep(delay)

    def send_once(self, body: bytes) -> None:
        """One attempt at delivering a request, compressed as configured; a failure raises
        `SendError` (retryable or not) and is neither counted nor reported: the caller keeps it."""
        if self.config.compression == "gzip":
            body = gzip.compress(body, compresslevel=6)
        try:
            self._send(body)
        except SendError:
            raise
        except Exception as exc:  # anything else the client raises: as a connection failure
            raise SendError(f"{self.config.endpoint}: {exc!r}", "connection", True) from exc

    def _new_session(self) -> requests.Session | _KeptAlive:
        """What posts: what requests takes from the environment (proxies, a CA bundle, ~/.netrc)
        read once, here, not at every request (read per request it was most of the client's cost
        of a request, and a forwarder sends dozens a second); a kept-alive http.client connection
        where none of it applies, a requests Session with it otherwise."""
        session = requests.Session()
        endpoint = self.config.endpoint
        settings = session.merge_environment_settings(endpoint, {}, None, self._verify, None)
        auth = requests.utils.get_netrc_auth(endpoint)
        if not auth and requests.utils.select_proxy(endpoint, settings["proxies"]) is None:
            session.close()
            verify = settings["verify"]
            return _KeptAlive(endpoint, True if verify is None else verify, self.config.timeout_s, self._cert)
        session.trust_env = False
        session.proxies.update(settings["proxies"])
        session.verify = settings["verify"]
        if self._cert is not None:
            cert_file, key_file = self._cert
            session.cert = (cert_file, key_file) if key_file else cert_file
        if auth:
            session.auth = auth
        return session

    def _send(self, body: bytes) -> None:
        if self._session is None or self._session_pid != os.getpid():
            self._session = self._new_session()
            self._session_pid = os.getpid()
        session = self._session
        if isinstance(session, _KeptAlive):
            try:
                status, content, retry_after = session.post(body, self._headers)
            except (OSError, http.client.HTTPException) as exc:
                raise SendError(f"{self.config.endpoint}: {exc!r}", "connection", True) from exc
        else:
            try:
                response = session.post(
                    self.config.endpoint,
                    data=body,
                    headers=self._headers,
                    timeout=self.config.timeout_s,
                )
            except requests.RequestException as exc:
                raise SendError(f"{self.config.endpoint}: {exc}", "connection", True) from exc
            status, content, retry_after = (
                response.status_code,
                response.content,
                response.headers.get("Retry-After"),
            )
        if status // 100 != 2:
            raise status_error(self.config.endpoint, status, content, retry_after)

    def _warn(self, message: str) -> None:
        if not self._warned:
            self._warned = True
            logger.warning("ray_otel_events: %s (reported once per process)", message)
