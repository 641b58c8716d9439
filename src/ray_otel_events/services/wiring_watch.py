"""`serve` tells a cluster wired wrong, once: no event at all a while after it started, or a session
lacking a kind of event it needs (store/session_checks.py), each logged with the command that
fixes it, `eval "$(ray-otel-events ray-env URL)"` with this serve's own URL."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")


def serve_url(host: str, port: int, tls: bool) -> str:
    """The URL a Ray node reaches this serve at: a wildcard bind is named by this machine's name."""
    name = socket.gethostname() if host in WILDCARD_HOSTS else host
    name = f"[{name}]" if ":" in name and not name.startswith("[") else name
    return f"{'https' if tls else 'http'}://{name}:{port}"


def wiring_command(url: str) -> str:
    """What a user runs on every Ray node before `ray start`."""
    return f'eval "$(ray-otel-events ray-env {url})"'


class WiringWatch:
    """Looks `delay_s` after start and every `delay_s` after: `received()` says whether any Ray
    event arrived; `sessions()` lists the sessions with their `missing` kinds (StoreViews). Only
    sessions that received events since this serve started are told about."""

    def __init__(
        self,
        url: str,
        delay_s: float,
        received: Callable[[], bool],
        sessions: Callable[[], list[dict[str, Any]]],
    ) -> None:
        self.fix = wiring_command(url)
        self.delay_s = delay_s
        self._received = received
        self._sessions = sessions
        self.told_nothing_arrived = False
        self.told_sessions: set[str] = set()
        self.started = time.time()  # sessions quiet since before are another run's to judge

    async def run(self) -> None:
        await asyncio.sleep(self.delay_s)
        while True:
            try:
                await asyncio.to_thread(self.check)
            except Exception as exc:  # the store away, say: the next round tries again
                logger.warning("wiring check skipped: %s", exc)
            await asyncio.sleep(self.delay_s)

    def check(self) -> None:
        """Logs what has not been told yet: nothing arrived, or what a session lacks."""
        if not self._received():
            if not self.told_nothing_arrived:
                self.told_nothing_arrived = True
                logger.warning(
                    "no Ray event has arrived %.0f s after serve started: the cluster is not wired to"
                    " it. On every Ray node, before `ray start`, run: %s (Ray sends no events unless"
                    " RAY_enable_ray_event=1 and RAY_enable_core_worker_ray_event_to_aggregator=1,"
                    " and posts only to RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR)",
                    self.delay_s,
                    self.fix,
                )
            return
        for entry in self._sessions():
            missing = entry.get("missing") or []
            if not missing or entry["name"] in self.told_sessions or entry["last_seen"] < self.started:
                continue
            self.told_sessions.add(entry["name"])
            lacks = "; ".join(f"{', '.join(m['events'])} ({m['why']})" for m in missing)
            logger.warning(
                "session %s lacks %s. On every Ray node run %s, then `ray stop` and `ray start` again"
                " (a node takes its variables when it starts)",
                entry["name"],
                lacks,
                self.fix,
            )
