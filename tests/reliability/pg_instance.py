"""A private PostgreSQL server for one test: its own data dir, port and socket dir.

The machine's cluster on :5432 is shared with other tests and is never restarted; this one
belongs to the test that made it. Debian's binaries (/usr/lib/postgresql/<ver>/bin) refuse to run
as root, so the server runs as the `postgres` user (`runuser`) in a temporary directory that user
owns (under /tmp: pytest's own tmp dirs are not reachable by other users). `crash()` is
`pg_ctl stop -m immediate`: every server process quits without a checkpoint, as in a crash, and
the next start runs crash recovery.
"""

from __future__ import annotations

import os
import pathlib
import pwd
import shutil
import subprocess
import tempfile
import time

import psycopg

from tests.ports import free_port


def _bin_dir() -> pathlib.Path:
    versions = sorted(pathlib.Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parts[-3]))
    if not versions:
        raise RuntimeError("PostgreSQL server binaries are missing (/usr/lib/postgresql/<ver>/bin)")
    return versions[-1].parent


class PgInstance:
    def __init__(self) -> None:
        self.bin = _bin_dir()
        self.user = "postgres" if os.geteuid() == 0 else ""
        self.root = pathlib.Path(tempfile.mkdtemp(prefix="sf-pg-", dir="/tmp"))
        self.data = self.root / "data"
        self.port = free_port()
        if self.user:
            pw = pwd.getpwnam(self.user)
            os.chown(self.root, pw.pw_uid, pw.pw_gid)

    def _run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        cmd = [*(["runuser", "-u", self.user, "--"] if self.user else []), *args]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, cwd=self.root)
        if r.returncode != 0:
            raise RuntimeError(
                f"{' '.join(args[:2])} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}\n{self.log_tail()}"
            )
        return r

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join((self.root / "server.log").read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    @property
    def admin_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def init(self) -> None:
        self._run(
            str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"
        )

    def start(self) -> None:
        opts = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c max_connections=100"
        self._run(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.root / "server.log"),
            "-o",
            opts,
            "-w",
            "start",
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                with psycopg.connect(self.admin_url, connect_timeout=2):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def create_database(self, name: str) -> str:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def postmaster_pid(self) -> int:
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def crash(self) -> None:
        """Stop as a crash does: immediate shutdown, no checkpoint; recovery runs at the next start."""
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
