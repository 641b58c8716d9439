"""Ray's CLI answered from one interpreter for the docs' `ray` shim (tests/helpers/doc_blocks.py):
importing it takes seconds on a loaded machine, and the docs' blocks call it a dozen times.

    python ray_cli_server.py serve SOCKET     # imports Ray's CLI once, then forks a child per call
    python ray_cli_server.py call ARGS...     # what the shim runs for `ray ARGS...`

Each call is run in a child forked from the server, with the caller's arguments, environment,
working directory and standard streams (passed over the socket), as `ray ARGS` would run. Ray reads
some variables when it is imported (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER, ...), so a server answers
only callers whose RAY_* and OTEL_* variables are the ones it was started with: a caller with
others gets (and starts, on first use) a server of its own, under DOCS_RAY_CLI_DIR.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

START_TIMEOUT_S = 180.0


def _key(env: dict[str, str]) -> str:
    relevant = sorted((k, v) for k, v in env.items() if k.startswith(("RAY_", "OTEL_")))
    return hashlib.sha256(json.dumps(relevant).encode()).hexdigest()[:16]


def serve(path: str) -> None:
    from ray.scripts.scripts import cli

    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(16)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children reaped by the kernel
    while True:
        conn, _ = server.accept()
        message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        request = json.loads(message)
        sys.stdout.flush()
        sys.stderr.flush()
        if os.fork() == 0:
            server.close()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            sys.argv = ["ray", *request["args"]]
            code = 1
            try:
                cli.main(args=request["args"], prog_name="ray")
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                conn.sendall(str(code).encode())
                os._exit(0)
        conn.close()
        for fd in fds:
            os.close(fd)


def call(args: list[str]) -> int:
    env = dict(os.environ)
    folder = Path(env["DOCS_RAY_CLI_DIR"])
    path = folder / f"{_key(env)}.sock"
    if not path.exists():
        log = (folder / f"{path.stem}.log").open("ab")
        subprocess.Popen(
            [sys.executable, __file__, "serve", str(path)],
            env=env,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not path.exists():
            if time.monotonic() > deadline:
                print(f"ray_cli_server: no server at {path}", file=sys.stderr)
                return 1
            time.sleep(0.05)
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            client.connect(str(path))
            break
        except (ConnectionRefusedError, FileNotFoundError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    request = {"args": args, "env": env, "cwd": os.getcwd()}
    socket.send_fds(client, [json.dumps(request).encode()], [0, 1, 2])
    answer = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := client.recv(64):
            answer += chunk
    return int(answer) if answer.strip().lstrip(b"-").isdigit() else 1


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2])
    else:
        sys.exit(call(sys.argv[2:]))
