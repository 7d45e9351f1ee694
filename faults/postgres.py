"""PostgreSQL for fault injection: a throw-away cluster on 127.0.0.1 that can fail over."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from faults.servers import LOOPBACK, free_port


class PostgresServer:
    """A throw-away PostgreSQL 15 cluster on 127.0.0.1 (``initdb``, ``pg_ctl``; run as the
    ``postgres`` user when this process is root, since both refuse root) with a database
    ``linc``. ``restart`` stops it (fast: open connections are cut) and starts it again on the
    same port and data, as a managed database's failover does."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="linc-postgres-"))  # /tmp: postgres reaches it
        self.port = free_port()
        self.data = self.folder / "data"

    @property
    def url(self) -> str:
        """The SQLAlchemy URL of its ``linc`` database."""
        return f"postgresql+psycopg2://postgres@{LOOPBACK}:{self.port}/linc"

    def start(self) -> PostgresServer:
        if os.geteuid() == 0:
            import pwd

            user = pwd.getpwnam("postgres")
            os.chown(self.folder, user.pw_uid, user.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-sync")
        self._start()
        self._run("createdb", "-h", LOOPBACK, "-p", str(self.port), "-U", "postgres", "linc")
        return self

    def restart(self, down_s: float = 0.0) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
        time.sleep(down_s)
        self._start()

    def stop(self) -> None:
        subprocess.run(
            _postgres_command("pg_ctl", "-D", str(self.data), "-m", "fast", "stop"),
            capture_output=True,
        )
        shutil.rmtree(self.folder, ignore_errors=True)

    def _start(self) -> None:
        options = f"-h {LOOPBACK} -p {self.port} -k {self.folder}"
        log = str(self.folder / "log")
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", log, "-w", "start")

    @staticmethod
    def _run(*args: str) -> None:
        done = subprocess.run(_postgres_command(*args), capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"PostgreSQL: {' '.join(args[:2])}: {done.stderr.strip()[-300:]}")


def _postgres_command(*args: str) -> list[str]:
    folder = Path("/usr/lib/postgresql/15/bin")
    program = shutil.which(args[0]) or str(folder / args[0])
    command = [program, *args[1:]]
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


__all__ = ["PostgresServer"]
