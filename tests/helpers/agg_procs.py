"""Start `ray-otel-events` CLI servers as real subprocesses and read their stdout protocol.

A server prints `listening grpc=HOST:PORT` or `listening http=HOST:PORT` when ready and, after
SIGTERM, `stats {json}`. stderr goes to a file (kept for failure messages), never a pipe. However a
test ends, each server it started is checked as it is closed (`ended_badly`): a server that exited on
its own with a failure, or logged a traceback, fails the test.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import requests

from ray_otel_events import cli, config

T = TypeVar("T")

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0

# Variables that would change the aggregator's behaviour if inherited from the developer's shell.
_SCRUB_PREFIXES = ("RAY_DASHBOARD_AGGREGATOR_AGENT_", "RAY_OTEL_EVENTS_", "RAY_events_export_addr")
# Kept: the run's choice of compiled helpers or their Python twins (`make test-pure` sets it), so the
# servers a test starts run the same half of each twin as the test process.
_KEPT = frozenset({config.PURE_PYTHON})


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in _KEPT or not k.startswith(_SCRUB_PREFIXES)}
    env.update(extra or {})
    return env


_TRACEBACK = "Traceback (most recent call last)"


def ended_badly(
    argv: list[str], returncode: int | None, stderr: str, expected: tuple[str, ...] = ()
) -> str | None:
    """What went wrong with a server process a test started, or None: an exit status other than 0
    it was not asked for (`returncode` None: the test ended it, by a signal it chose or a kill at
    the end), or a traceback in what it logged, but in a log line naming one of `expected` (a
    failure the test makes, which the server logs with its traceback by design). Every helper that
    starts one of our servers asks."""
    problems = []
    if returncode not in (None, 0):
        problems.append(f"exited {returncode} of itself")
    unexpected = [
        line for line in stderr.splitlines() if _TRACEBACK in line and not any(e in line for e in expected)
    ]
    if unexpected:  # (a JSON log line holds its whole traceback)
        start = stderr.index(unexpected[0])
        problems.append(f"logged a traceback: {stderr[max(0, start - 500) : start + 3000]}")
    return f"{argv}: {'; '.join(problems)}" if problems else None


def check_ended_well(
    proc: subprocess.Popen[Any], stderr: str, *, ended_by_test: bool, expected: tuple[str, ...] = ()
) -> None:
    """Fails naming what went wrong when `ended_badly` finds something; `proc` has exited."""
    argv = [str(arg) for arg in proc.args] if isinstance(proc.args, list) else [str(proc.args)]
    problem = ended_badly(argv, None if ended_by_test else proc.returncode, stderr, expected)
    assert problem is None, problem


class CliServer:
    """One `python -m ray_otel_events <command> ...` process."""

    def __init__(self, command: str, *args: str, env: dict[str, str] | None = None) -> None:
        # JSON logs and a `stats {json}` exit line: the machine-readable form this helper parses.
        self.argv = [sys.executable, "-m", "ray_otel_events", command, "--log-format", "json", *args]
        self._stderr = tempfile.NamedTemporaryFile(  # noqa: SIM115 (lives as long as the process)
            prefix=f"{command}-", suffix=".stderr", delete=False
        )
        self.proc = subprocess.Popen(
            self.argv, stdout=subprocess.PIPE, stderr=self._stderr, env=clean_env(env), bufsize=0
        )
        self._pending = b""
        self.ended_by_test = False  # stop(), send_signal() or a failed start: the exit is the test's
        self.expected_tracebacks: tuple[str, ...] = ()  # see expect_tracebacks
        self.returncode: int | None = None
        self.stats: dict[str, Any] | None = None
        line = self.read_line(READY_TIMEOUT_S)
        if not line.startswith("listening "):
            self.ended_by_test = True
            self.kill()
            raise AssertionError(f"{self.argv} printed {line!r} instead of a ready line; {self.stderr()}")
        # `listening http=HOST:PORT` (or grpc=), maybe followed by more `kind=HOST:PORT` pairs.
        self.addresses = dict(pair.split("=", 1) for pair in line.split()[1:])
        self.address = next(iter(self.addresses.values()))
        self.host, port = self.address.rsplit(":", 1)
        self.port = int(port)

    def read_line(self, timeout_s: float) -> str:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"{self.argv}: no line within {timeout_s}s; {self.stderr()}")
            ready, _, _ = select.select([fd], [], [], remaining)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    rc = self.proc.wait(10)
                    raise AssertionError(f"{self.argv} exited ({rc}) before a line; {self.stderr()}")
                self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return line.decode()

    def stderr(self) -> str:
        return "stderr: " + self.logged()[-4000:]

    def logged(self) -> str:
        """Everything the server wrote to stderr so far (its JSON log lines)."""
        return Path(self._stderr.name).read_text(errors="replace")

    def expect_tracebacks(self, *messages: str) -> None:
        """Tracebacks logged with one of these messages are the test's doing (a database it takes
        away, say), logged so by design: close() lets them pass, and fails on any other."""
        self.expected_tracebacks = messages

    def send_signal(self, sig: int) -> None:
        """Sends `sig` as the test's doing (a crash it makes, say): the exit that follows is expected."""
        self.ended_by_test = True
        self.proc.send_signal(sig)

    def log_lines(self) -> list[str]:
        """Every line the process wrote to stderr so far."""
        return Path(self._stderr.name).read_text(errors="replace").splitlines()

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = STOP_TIMEOUT_S) -> dict[str, Any]:
        """Signal, wait for exit 0 and return the parsed `stats` line."""
        self.send_signal(sig)
        line = self.read_line(timeout_s)
        self.returncode = self.proc.wait(timeout_s)
        assert self.returncode == 0, f"{self.argv} exited {self.returncode}; {self.stderr()}"
        assert line.startswith("stats "), f"unexpected last line {line!r}"
        self.stats = json.loads(line[len("stats ") :])
        return self.stats

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def close(self) -> None:
        """Ends the process (a kill, if the test left it running: it did not crash) and checks how
        it ended (`check_ended_well`), after cleaning up whatever the check finds."""
        exited_alone = self.proc.poll() is not None
        self.kill()
        logged = self.logged()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._stderr.close()
        os.unlink(self._stderr.name)
        check_ended_well(
            self.proc,
            logged,
            ended_by_test=self.ended_by_test or not exited_alone,
            expected=self.expected_tracebacks,
        )


def close_all(servers: list[CliServer]) -> None:
    """Closes every server, the last started first, then fails naming each that ended badly."""
    problems = []
    for server in reversed(servers):
        try:
            server.close()
        except AssertionError as error:
            problems.append(str(error))
    servers.clear()
    assert not problems, "\n".join(problems)


def free_port() -> int:
    """A port free on 127.0.0.1 now, for commands (like `ray start`) that cannot take port 0."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The whole lines of a sink's file: a line still being written (no newline yet) is left out,
    as a reader polling a file another process appends to must."""
    if not path.exists():
        return []
    whole = path.read_text().rpartition("\n")[0]
    return [json.loads(line) for line in whole.splitlines() if line.strip()]


def wait_for_lines(path: Path, n: int, timeout_s: float = 60.0) -> list[dict[str, Any]]:
    """Poll a sink's JSON Lines file until it holds at least n events; fails the test, saying how
    many came, when they do not within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        events = read_jsonl(path)
        if len(events) >= n:
            return events
        assert time.monotonic() < deadline, f"{path}: {len(events)} of {n} lines within {timeout_s} s"
        time.sleep(0.05)


def refused_by_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Runs `ray-otel-events ARGS` (environment: `clean_env(env)`), which must refuse them as our
    commands refuse bad input: exit 2 with a message, no traceback. Returns the finished process."""
    out = subprocess.run(
        [sys.executable, "-m", "ray_otel_events", *args],
        env=clean_env(env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    return out


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """os.environ is `values` inside, what it was after."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(values)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def cli_in_process(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`ray-otel-events ARGS` answered in this process, with the environment a `clean_env(env)`
    process would have, as a CompletedProcess. For the store readers' answers (list, get, summary,
    timeline, logs, sessions: they only read a store or ask a server): an interpreter start costs
    half a second, and the state tests ask a dozen questions per backend. How a command refuses bad
    input (exit status, message, no traceback) is checked with real processes (`refused_by_cli`)."""
    out, err = io.StringIO(), io.StringIO()
    with (
        _environment(clean_env(env)),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            code = cli.main(list(args))
        except SystemExit as exc:  # argparse's refusals
            code = exc.code if isinstance(exc.code, int) else 1
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def run_json_script(args: list[str], env: dict[str, str] | None, timeout_s: float) -> tuple[Any, str, str]:
    """Runs a script that prints its result as its last JSON line; returns (that result, its
    stdout, its stderr). Fails the test with the ends of both streams when the script fails. The
    last JSON line, not the last line: a Ray driver's stdout also gets its workers' lines, echoed
    by Ray's log monitor whenever they arrive, after the result too."""
    out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout_s)
    assert out.returncode == 0, (
        f"{args[1]} failed ({out.returncode}): {out.stdout[-3000:]}{out.stderr[-5000:]}"
    )
    results = [line for line in out.stdout.splitlines() if line.startswith(("{", "["))]
    assert results, f"{args[1]} printed no JSON line: {out.stdout[-3000:]}"
    return json.loads(results[-1]), out.stdout, out.stderr


def run_producer(target: str, *args: str, timeout_s: float = 120.0) -> dict[str, Any]:
    """Run tests/helpers/send_add_events.py as its own process; returns its JSON summary."""
    script = Path(__file__).with_name("send_add_events.py")
    summary: dict[str, Any] = run_json_script(
        [sys.executable, str(script), target, *args], clean_env(), timeout_s
    )[0]
    return summary


# Captured Ray 2.60 events the aggregator tests replay (run_producer --fixture); the types they send.
FIXTURE = str(Path(__file__).parent.parent / "fixtures" / "aggregator-ray-2.60" / "events.json")
TASK_TYPES = "TASK_DEFINITION_EVENT,TASK_LIFECYCLE_EVENT"


def start(servers: list[CliServer], command: str, *args: str, env: dict[str, str] | None = None) -> CliServer:
    """Start a server and register it with the `servers` fixture (conftest.py), which closes it."""
    server = CliServer(command, *args, env=env)
    servers.append(server)
    return server


def start_aggregator(servers: list[CliServer], sink: CliServer, *args: str) -> tuple[CliServer, str]:
    """An aggregator (`start`) POSTing to `sink`, serving its metrics and probes on a port of their
    own; returns it and that port's base URL."""
    metrics_port = free_port()
    aggregator = start(
        servers,
        "aggregator",
        "--export-addr",
        f"http://{sink.address}/v1/events",
        "--metrics-port",
        str(metrics_port),
        *args,
    )
    return aggregator, f"http://127.0.0.1:{metrics_port}"


def metric_total(port: int, name: str) -> float:
    """Counter `name` summed over all its series, as the /metrics endpoint on `port` reads now."""
    text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    """Polls `condition` until it holds; fails the test naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"no {what} within {timeout_s} s"
        time.sleep(0.05)


def returns(call: Callable[[], T], what: str, timeout_s: float = 60.0) -> T:
    """`call()`'s result, for a call that must return (a bounded stop or flush, say): run on a
    thread, so the test fails naming `what` if it has not returned after `timeout_s`, rather than
    hanging. The deadline only fails a call that never returns: no bound on how long it took."""
    result: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            result.append(call())
        except BaseException as error:  # handed to the test's thread, raised there
            errors.append(error)

    thread = threading.Thread(target=run, name=what, daemon=True)
    thread.start()
    thread.join(timeout_s)
    if errors:
        raise errors[0]
    assert result, f"{what} did not return within {timeout_s} s"
    return result[0]
