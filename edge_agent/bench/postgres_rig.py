"""A throwaway PostgreSQL for `edge-agent bench sync` and the tests: Debian's server binaries
(package postgresql), a cluster made with initdb in a temporary directory, listening on
127.0.0.1 at a free port with password (SCRAM) authentication, a database "venue" and its
owner "kiosk". As root the cluster belongs to the `postgres` user the package makes
(PostgreSQL refuses to run as root)."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from edge_agent.errors import SyncError

BIN_DIRS = Path("/usr/lib/postgresql")
USER, PASSWORD, DATABASE = "kiosk", "kiosk-test-password", "venue"
ADMIN, ADMIN_PASSWORD = "venue_admin", "admin-test-password"


def server_bin() -> Path:
    """Debian's newest installed server's bin directory."""
    found = sorted((p for p in BIN_DIRS.glob("*/bin") if (p / "initdb").exists()),
                   key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    if not found:
        raise SyncError("this machine", f"no PostgreSQL server in {BIN_DIRS} to start",
                        "install Debian's postgresql package (apt-get install postgresql)")
    return found[-1]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class LocalPostgres:
    def __init__(self, directory: Path, *, durable: bool = True) -> None:
        self.directory = directory
        self.data = directory / "data"
        self.port = free_port()
        self.durable = durable
        """fsync on (as a venue runs it); the tests turn it off for speed."""
        self._bin = server_bin()
        self._owner = pwd.getpwnam("postgres") if os.geteuid() == 0 else None

    @property
    def url(self) -> str:
        """The kiosk's address (its password is `PASSWORD`)."""
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{DATABASE}"

    @property
    def admin_url(self) -> str:
        return (f"postgresql://{ADMIN}:{ADMIN_PASSWORD}@127.0.0.1:{self.port}/{DATABASE}"
                "?connect_timeout=10")

    def _run(self, *command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        prefix = ["runuser", "-u", "postgres", "--"] if self._owner else []
        return subprocess.run([*prefix, *command], check=check, capture_output=True, text=True,
                              timeout=120, cwd="/")

    def create(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        passwords = self.directory / "pw"
        passwords.write_text(ADMIN_PASSWORD + "\n", encoding="utf-8")
        if self._owner:
            os.chown(self.directory, self._owner.pw_uid, self._owner.pw_gid)
            os.chown(passwords, self._owner.pw_uid, self._owner.pw_gid)
        self._run(str(self._bin / "initdb"), "-D", str(self.data), "-U", ADMIN,
                  f"--pwfile={passwords}", "--auth=scram-sha-256", "-E", "UTF8",
                  "--locale=C.UTF-8", "--no-instructions")
        passwords.unlink()
        settings = [f"port = {self.port}", "listen_addresses = '127.0.0.1'",
                    f"unix_socket_directories = '{self.directory}'", "max_connections = 200",
                    "log_min_messages = warning"]
        if not self.durable:
            settings += ["fsync = off", "synchronous_commit = off", "full_page_writes = off"]
        with (self.data / "postgresql.conf").open("a", encoding="utf-8") as conf:
            conf.write("\n".join(settings) + "\n")
        self.start()
        import psycopg
        postgres_db = self.admin_url.replace(f"/{DATABASE}?", "/postgres?")
        with psycopg.connect(postgres_db, autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {DATABASE}")
        with psycopg.connect(self.admin_url, autocommit=True) as admin:
            admin.execute(f"CREATE ROLE {USER} LOGIN PASSWORD '{PASSWORD}'")
            admin.execute(f"GRANT CREATE ON DATABASE {DATABASE} TO {USER}")

    def start(self) -> None:
        self._run(str(self._bin / "pg_ctl"), "-D", str(self.data), "-l",
                  str(self.directory / "server.log"), "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run(str(self._bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop",
                  check=False)

    def restart(self) -> None:
        self._run(str(self._bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "-t",
                  "60", "restart", "-l", str(self.directory / "server.log"))

    def cpu_seconds(self) -> float:
        """CPU time (user + system) of every server process now running."""
        ticks = os.sysconf("SC_CLK_TCK")
        total = 0.0
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                command = (proc / "cmdline").read_bytes().split(b"\0")
                if str(self.data).encode() not in command and not self._child_of_ours(proc):
                    continue
                fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / ticks
        return total

    def _child_of_ours(self, proc: Path) -> bool:
        try:
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return False
        return parent == postmaster


@contextmanager
def local_postgres(durable: bool = True) -> Iterator[LocalPostgres]:
    """A started cluster, stopped and deleted afterwards."""
    directory = Path(tempfile.mkdtemp(prefix="edge-agent-pg-"))
    server = LocalPostgres(directory, durable=durable)
    try:
        server.create()
        yield server
    finally:
        server.stop("immediate")
        shutil.rmtree(directory, ignore_errors=True)
