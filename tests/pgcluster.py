"""A second PostgreSQL cluster on this machine, for a database on a server of its own (the
architecture puts onboarding's personal data, staff-admin and the staff realm apart).

Debian's postgresql-common makes it: ``pg_createcluster VERSION hiwallet2 -- --auth=trust`` (the
first free port after the others' clusters; local connections trusted, as the main one's), then
``pg_ctlcluster --skip-systemctl-redirect VERSION hiwallet2 start``,
once per machine, under a file lock (two xdist workers may ask at once), and left running for the
next run; a stopped one is started. Without pg_createcluster (not Debian), the caller skips."""

from __future__ import annotations

import fcntl
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

CLUSTER = "hiwallet2"
_LOCK = Path("/tmp/hiwallet-pgcluster.lock")
_TIMEOUT_S = 120
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
        return made.port
