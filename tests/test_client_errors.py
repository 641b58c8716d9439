"""Log text from outside is one line and bounded; a client's errors are one counted line an interval."""

from __future__ import annotations

import logging

import pytest

from ray_otel_events.security.client_errors import MALFORMED_HTTP, SLOW_BODY, ClientErrors, log_text


def test_log_text_escapes_every_control_character_and_cuts() -> None:
    assert log_text("a\r\nb\x00c\x1b[31md\x7f\u2028e") == "a\\x0d\\x0ab\\x00c\\x1b[31md\\x7f\\u2028e"
    assert log_text("plain text, ünïcode") == "plain text, ünïcode"
    cut = log_text("x" * 500, limit=10)
    assert cut == "x" * 10 + "... (490 more characters)"


def test_one_line_per_reason_per_interval_with_the_count(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    errors = ClientErrors(logging.getLogger("test.client_errors"), interval_s=60.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, "test.client_errors"):
        for _ in range(100):
            errors.report(MALFORMED_HTTP, "bad\r\nFORGED line")
        errors.report(SLOW_BODY, "slow")
        now[0] = 61.0
        errors.report(MALFORMED_HTTP, "again")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "client error malformed_http_request: bad\\x0d\\x0aFORGED line",
        "client error slow_body: slow",
        "client error malformed_http_request: again (and 99 more since the last such line)",
    ]
    assert errors.counters.get("client_errors", reason=MALFORMED_HTTP) == 101
    assert errors.counters.get("client_errors", reason=SLOW_BODY) == 1
