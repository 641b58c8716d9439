"""A real PostgreSQL server for the tests: the machine's packages, initdb into a temporary folder,
a free port on 127.0.0.1, its socket in that folder; stopped and removed by `stop`.

initdb and postgres refuse to run as root (CI runs the tests as root): there they run as the
`postgres` OS user (created when missing), and the folder is handed to that user.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

DATABASE = "history"
_SERVER_USER = "postgres"


class PostgresUnavailable(Exception):
    """No PostgreSQL server can run here (the message says why and what to install)."""


def server_bin() -> Path:
    """The newest installed PostgreSQL's bin folder (Debian: /usr/lib/postgresql/N/bin)."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parent.parent.name)
    )
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).parent
    raise PostgresUnavailable(
        "no PostgreSQL server installed: `make test` installs it (scripts/ensure_postgres.sh)"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server_user() -> str | None:
    """The OS user the server runs as: None (this one) unless we are root."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(_SERVER_USER)
    except KeyError:
        made = subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", _SERVER_USER],
            capture_output=True,
            text=True,
            check=False,
        )
        if made.returncode != 0:
            raise PostgresUnavailable(
                f"running as root and no {_SERVER_USER!r} user to run PostgreSQL as, and useradd failed:"
                f" {made.stderr.strip()}"
            ) from None
    return _SERVER_USER


class PostgresServer:
    """One running server; `url` names its database (owned by `user`)."""

    def __init__(self, root: Path | None = None) -> None:
        self.bin = server_bin()
        self.root = Path(tempfile.mkdtemp(prefix="pg-", dir=root))
        self.data = self.root / "data"
        self.socket_dir = self.root / "sock"
        self.socket_dir.mkdir()
        self.os_user = _server_user()
        self.user = self.os_user or pwd.getpwuid(os.geteuid()).pw_name
        self.port = _free_port()
        if self.os_user is not None:
            entry = pwd.getpwnam(self.os_user)
            for path in (self.root, self.socket_dir):
                os.chown(path, entry.pw_uid, entry.pw_gid)
            self.root.chmod(0o755)
        self._run(
            str(self.bin / "initdb"),
            "-D",
            str(self.data),
            "-U",
            self.user,
            "--auth=trust",
            "--locale=C",
            "--encoding=UTF8",
            "--no-sync",
        )
        self.start()
        with psycopg.connect(self.admin_url("postgres"), autocommit=True) as db:
            db.execute(f'CREATE DATABASE "{DATABASE}"')
        self.url = self.admin_url(DATABASE)

    def admin_url(self, database: str) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}"

    def _run(self, *command: str) -> None:
        if self.os_user is not None:
            command = ("runuser", "-u", self.os_user, "--", *command)
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise PostgresUnavailable(f"{' '.join(command)} failed: {done.stdout}{done.stderr}")

    def start(self) -> None:
        """Starts (or starts again) the server on the same port and folder."""
        options = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} -c unix_socket_directories={self.socket_dir}"
            " -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=60"
        )
        self._run(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.root / "server.log"),
            "-w",
            "-t",
            "60",
            "start",
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                psycopg.connect(self.admin_url("postgres"), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def stop_server(self, mode: str = "fast") -> None:
        """Stops the server (`fast`: disconnects every client), keeping its files."""
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def new_database(self, name: str) -> str:
        """A fresh empty database on this server; its URL."""
        with psycopg.connect(self.admin_url("postgres"), autocommit=True) as db:
            db.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            db.execute(f'CREATE DATABASE "{name}"')
        return self.admin_url(name)

    def stop(self) -> None:
        """Stops the server and removes its folder."""
        with contextlib.suppress(PostgresUnavailable):
            self.stop_server("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


def serve_store_args(location: str | Path, folder: Path) -> list[str]:
    """`serve`'s arguments for a store on either backend: a database's spool goes in `folder`."""
    spool = ["--spool", str(folder / "spool")] if isinstance(location, str) else []
    return ["--store", str(location), *spool]
