"""When a failed send is tried again, and after how long: the Collector's rules, Ray's timing.

Only failures that can heal are retried: a connection error or timeout, and the statuses the OTLP
spec calls retryable (429, 502, 503, 504). Any other answer (400, 401, 413, 500...) is permanent:
sending the same bytes again cannot help, so the batch is counted as rejected with its status
instead of blocking the queue forever (Ray retries everything, forever). A server's `Retry-After`
is honoured, capped, and never shortened by our own backoff.
"""

from __future__ import annotations

import email.utils
import random
import time
from dataclasses import dataclass

RETRYABLE_STATUSES = frozenset({429, 502, 503, 504})
MAX_RETRY_AFTER_S = 60.0  # a server asking for longer gets this: the queue keeps its bound


class SendError(Exception):
    """A send that failed with a known cause; `status` is the HTTP status or "connection"."""

    def __init__(
        self, message: str, status: str, retryable: bool, retry_after_s: float | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable
        self.retry_after_s = retry_after_s


def status_error(what: str, status: int, body: bytes, retry_after: str | None) -> SendError:
    """The SendError for a non-2xx answer, retryable or not by its status."""
    text = body[:200].decode("utf-8", "replace")
    return SendError(
        f"{what} answered HTTP {status}: {text}",
        str(status),
        status in RETRYABLE_STATUSES,
        parse_retry_after(retry_after) if status in RETRYABLE_STATUSES else None,
    )


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delay-seconds or an HTTP-date), or None."""
    if not value:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


@dataclass(frozen=True)
class RetryPolicy:
    """Ray's defaults: 0.01 s doubled per failure (first wait 0.02 s), capped at 5 s, +-10 %."""

    max_retries: int = -1  # -1: retry forever
    initial_backoff_s: float = 0.01
    max_backoff_s: float = 5.0
    jitter_ratio: float = 0.1

    def gives_up(self, failures_so_far: int) -> bool:
        """True when a batch that has already failed `failures_so_far` times must not be retried."""
        return 0 <= self.max_retries <= failures_so_far

    def backoff_s(self, failures: int, rng: random.Random) -> float:
        """The wait after the `failures`-th consecutive failure (1-based)."""
        delay = min(self.max_backoff_s, self.initial_backoff_s * 2.0**failures)
        delay *= 1 + rng.uniform(-self.jitter_ratio, self.jitter_ratio)
        return max(0.0, delay)

    def delay_s(self, failures: int, error: BaseException, rng: random.Random) -> float:
        """The backoff, or the server's Retry-After (capped) when that is longer."""
        delay = self.backoff_s(failures, rng)
        if isinstance(error, SendError) and error.retry_after_s is not None:
            delay = max(delay, min(error.retry_after_s, MAX_RETRY_AFTER_S))
        return delay


def is_retryable(error: BaseException) -> bool:
    """Connection errors and unknown failures are retried; a SendError says for itself."""
    return error.retryable if isinstance(error, SendError) else True


def failure_status(error: BaseException) -> str:
    return error.status if isinstance(error, SendError) else "connection"
