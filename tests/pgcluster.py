"""A second PostgreSQL cluster on this machine, for a database on a server of its own (the
architecture puts onboarding's personal data, staff-admin and the staff realm apart).

Debian's postgresql-common makes it: ``pg_createcluster VERSION hiwallet2 -- --auth=trust`` (the
first free port after the others' clusters; local connections trusted, as the main one's), then
``pg_ctlcluster --skip-systemctl-redirect VERSION hiwallet2 start``,
once per machine, under a file lock (two xdist workers may ask at once), and left running for the
next run; a stopped one is started. Without pg_createcluster (not Debian), the caller skips.

``pg_lsclusters`` calls a cluster online while its postmaster lives, which is not the same as
taking connections on 127.0.0.1 (a CI run once found the port refusing right after): the port is
asked until it answers, the cluster restarted once if it does not, and the cluster's log quoted
if it still does not."""

from __future__ import annotations

import fcntl
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

CLUSTER = "hiwallet2"
_LOCK = Path("/tmp/hiwallet-pgcluster.lock")
_TIMEOUT_S = 120
_ACCEPT_WAIT_S = 30.0
_VERSIONS = Path("/usr/lib/postgresql")


@dataclass(frozen=True)
class Cluster:
    version: str
    name: str
    port: int
    online: bool


def _clusters() -> list[Cluster]:
    # pg_lsclusters -h: "version name port status owner data_directory log_file", one a line
    out = subprocess.run(
        ["pg_lsclusters", "-h"], capture_output=True, text=True, check=True, timeout=_TIMEOUT_S
    )
    found = []
    for line in out.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 4:
            found.append(Cluster(fields[0], fields[1], int(fields[2]), fields[3].startswith("online")))
    return found


def _newest_version(clusters: list[Cluster]) -> str:
    versions = [c.version for c in clusters] or [p.name for p in _VERSIONS.iterdir() if p.name[0].isdigit()]
    if not versions:
        raise RuntimeError(f"no PostgreSQL server installed ({_VERSIONS} is empty)")
    return max(versions, key=lambda v: tuple(int(n) for n in v.split(".")))


def _run(*command: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()}")


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


def _log_tail(version: str, name: str, lines: int = 20) -> str:
    log = Path(f"/var/log/postgresql/postgresql-{version}-{name}.log")
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError as e:
        return f"(no log: {e})"


def wait_accepting(version: str, name: str, port: int) -> None:
    """Return once the cluster takes TCP connections on 127.0.0.1:port; restart it once if it
    does not within _ACCEPT_WAIT_S; raise, quoting its log, if it still does not. The caller
    holds the cluster's lock (no other maker starts or restarts it meanwhile)."""
    for attempt in range(2):
        deadline = time.monotonic() + _ACCEPT_WAIT_S
        while time.monotonic() < deadline:
            if _accepts(port):
                return
            time.sleep(0.2)
        if attempt == 0:
            _run("pg_ctlcluster", "--skip-systemctl-redirect", version, name, "restart")
    log = _log_tail(version, name)
    raise RuntimeError(f"the PostgreSQL cluster {name} (port {port}) takes no connection; its log:\n{log}")


def second_cluster_port() -> int:
    """The port of the cluster ``hiwallet2``, made and started if need be (its superuser is
    ``postgres``, trusted on local connections). Skips the test without pg_createcluster."""
    if shutil.which("pg_createcluster") is None or shutil.which("pg_lsclusters") is None:
        pytest.skip("pg_createcluster is absent (Debian's postgresql-common): no second PostgreSQL cluster")
    with _LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        clusters = _clusters()
        mine = next((c for c in clusters if c.name == CLUSTER), None)
        if mine is None:
            version = _newest_version(clusters)
            _run("pg_createcluster", version, CLUSTER, "--", "--auth=trust")
            mine = Cluster(version, CLUSTER, 0, online=False)
        if not mine.online:
            # as .ci/run starts the main one: pg_ctl itself, not systemd (no systemd in a container)
            _run("pg_ctlcluster", "--skip-systemctl-redirect", mine.version, CLUSTER, "start")
        made = next((c for c in _clusters() if c.name == CLUSTER), None)
        if made is None or not made.online:
            raise RuntimeError(f"the PostgreSQL cluster {CLUSTER} is not online: {made}")
        wait_accepting(made.version, CLUSTER, made.port)
        return made.port
