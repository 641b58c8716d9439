"""What a client sends never floods or forges the log.

Text from outside (a path, a gRPC method name, an id) is escaped and cut before it is written:
`log_text` turns CR, LF and every other control character into a visible `\\xNN`, so one record is
one line whatever it quotes, and keeps a bounded prefix. The servers' log formatters apply it to
every message (services/lifecycle.py), so no caller can forget it.

A client's mistake (a malformed HTTP request, an undecodable gRPC message, a body over a bound) is
the client's to fix: `ClientErrors` counts each (a metric labelled by a reason from a fixed list)
and logs one line per reason per interval, saying how many came since the last line, never a
traceback.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable

from ray_otel_events.metrics import Counters

MAX_LOG_TEXT = 200  # of one value quoted from outside
MAX_LOG_MESSAGE = 8192  # of one whole message
CLIENT_ERRORS = "client_errors"  # counter, labelled reason=<one of the reasons below>
DEFAULT_INTERVAL_S = 60.0

# The reasons: a fixed vocabulary, so the metric has a fixed number of series.
MALFORMED_HTTP = "malformed_http_request"
UNDECODABLE_GRPC = "undecodable_grpc_message"
UNIMPLEMENTED_GRPC = "unimplemented_grpc_method"
BODIES_BUDGET = "bodies_budget_exceeded"
SLOW_BODY = "slow_body"
BODY_CUT_SHORT = "body_cut_short"
TOO_MANY_CONNECTIONS = "too_many_connections"

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def log_text(value: object, limit: int = MAX_LOG_TEXT) -> str:
    """`value` as one printable line of at most about `limit` characters."""
    text = str(value)
    if len(text) > limit:
        text = f"{text[:limit]}... ({len(text) - limit} more characters)"
    return _CONTROL.sub(_escape, text)


class ClientErrors:
    """Counts clients' errors by reason and logs each reason at most once per `interval_s`."""

    def __init__(
        self,
        logger: logging.Logger,
        counters: Counters | None = None,
        interval_s: float = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.counters = counters if counters is not None else Counters("server")
        self.interval_s = interval_s
        self._clock = clock
        self._last: dict[str, float] = {}
        self._since: dict[str, int] = {}

    def report(self, reason: str, detail: str) -> None:
        """One client error; `reason` one of this module's constants, `detail` any text."""
        self.counters.add(CLIENT_ERRORS, reason=reason)
        now = self._clock()
        last = self._last.get(reason)
        if last is not None and now - last < self.interval_s:
            self._since[reason] = self._since.get(reason, 0) + 1
            return
        more = self._since.pop(reason, 0)
        self._last[reason] = now
        note = f" (and {more} more since the last such line)" if more else ""
        self.logger.warning("client error %s: %s%s", reason, log_text(detail), note)
