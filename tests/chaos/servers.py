"""The fault campaign's own PostgreSQL cluster and RabbitMQ node, so that restarting them harms
nobody: the machine's shared servers (5432, 5672) carry the other tests, the helpers' and CI's
xdist workers at the same time, and are never restarted.

- PostgreSQL: Debian's ``pg_createcluster VERSION hiwallet-chaos -- --auth=trust`` (the first
  free port after the other clusters'; local connections trusted, superuser ``postgres``),
  started with ``pg_ctlcluster --skip-systemctl-redirect`` (no systemd in a container), as
  tests/pgcluster.py makes its second cluster.
- RabbitMQ: a node ``hiwallet-chaos@localhost`` of the installed server, started detached with
  its own configuration, plugins (the consistent-hash exchange), data and log directories under
  ``/var/lib/rabbitmq/hiwallet-chaos`` (the server runs as the ``rabbitmq`` user) and its own
  AMQP and distribution ports (below the range tests/servers.py hands out, so that no test's
  server takes them while the node is stopped); the ports are kept in ``ports.json`` there.

Both are made once per machine, under a file lock (a short run in the suite and a `make chaos`
may ask at once), and left running for the next run; a stopped one is started. Without
pg_createcluster or rabbitmq-server (not Debian), :func:`ensure` raises :class:`Unavailable`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from hiwallet.core.settings import get_settings
from tests.pgcluster import wait_accepting

__all__ = ["CLUSTER", "NODE", "PrivateServers", "Unavailable", "ensure", "settings_on"]

CLUSTER = "hiwallet-chaos"
NODE = "hiwallet-chaos@localhost"
_LOCK = Path("/tmp/hiwallet-chaos-servers.lock")
_PGCLUSTER_LOCK = Path("/tmp/hiwallet-pgcluster.lock")  # tests/pgcluster.py's
_RABBIT_HOME = Path("/var/lib/rabbitmq/hiwallet-chaos")
_VERSIONS = Path("/usr/lib/postgresql")
_TIMEOUT_S = 120
# Below tests/servers.py's range (20,000 up) and the kernel's ephemeral one.
_RABBIT_PORTS = range(19_100, 19_900)
_START_WAIT_S = 90.0


class Unavailable(RuntimeError):
    """This machine cannot make the private servers (no postgresql-common or rabbitmq-server)."""


@dataclass(frozen=True)
class PrivateServers:
    pg_version: str
    pg_port: int
    amqp_port: int
    node: str = NODE
    cluster: str = CLUSTER

    @property
    def database_url(self) -> str:
        return f"postgresql://127.0.0.1:{self.pg_port}"

    @property
    def owner_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.pg_port}"

    def pg_restart(self) -> list[str]:
        return ["pg_ctlcluster", "--skip-systemctl-redirect", self.pg_version, self.cluster, "restart"]

    def rabbitmqctl(self, *args: str) -> list[str]:
        return ["rabbitmqctl", "-n", self.node, *args]


def _run(*command: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=_TIMEOUT_S, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return done.stdout


def _cluster() -> tuple[str, int, bool] | None:
    # pg_lsclusters -h: "version name port status owner data_directory log_file", one a line
    for line in _run("pg_lsclusters", "-h").splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[1] == CLUSTER:
            return fields[0], int(fields[2]), fields[3].startswith("online")
    return None


def _postgres() -> tuple[str, int]:
    found = _cluster()
    if found is None:
        versions = [p.name for p in _VERSIONS.iterdir() if p.name[0].isdigit()]
        if not versions:
            raise Unavailable(f"no PostgreSQL server installed ({_VERSIONS} is empty)")
        version = max(versions, key=lambda v: tuple(int(n) for n in v.split(".")))
        # pg_createcluster takes the first port no cluster's configuration names: two made at
        # once (tests/pgcluster.py's, from another xdist worker) could take the same one. Both
        # makers hold its lock while they make theirs (never the reverse order: no deadlock).
        with _PGCLUSTER_LOCK.open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            _run("pg_createcluster", version, CLUSTER, "--", "--auth=trust")
        found = _cluster()
        if found is None:
            raise RuntimeError(f"pg_createcluster made no cluster {CLUSTER}")
    version, port, online = found
    if not online:
        _run("pg_ctlcluster", "--skip-systemctl-redirect", version, CLUSTER, "start")
        found = _cluster()
        if found is None or not found[2]:
            raise RuntimeError(f"the PostgreSQL cluster {CLUSTER} is not online: {found}")
    # online (its postmaster lives) is not yet taking connections on 127.0.0.1
    wait_accepting(version, CLUSTER, port)
    return version, port


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _rabbit_env(amqp_port: int, dist_port: int) -> dict[str, str]:
    home = _RABBIT_HOME
    return {
        **os.environ,
        # Its own env file: the machine's names the shared node (NODENAME=rabbit@localhost).
        "RABBITMQ_CONF_ENV_FILE": str(home / "rabbitmq-env.conf"),
        "RABBITMQ_NODENAME": NODE,
        "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
        "RABBITMQ_NODE_PORT": str(amqp_port),
        "RABBITMQ_DIST_PORT": str(dist_port),
        # Its own config: the machine's binds 5672 (listeners.tcp.local).
        "RABBITMQ_CONFIG_FILE": str(home / "rabbitmq.conf"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(home / "enabled_plugins"),
        "RABBITMQ_MNESIA_BASE": str(home / "mnesia"),
        "RABBITMQ_LOG_BASE": str(home / "log"),
        "RABBITMQ_PID_FILE": str(home / "pid"),
        "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
    }


def _node_running() -> bool:
    done = subprocess.run(
        ["rabbitmqctl", "-n", NODE, "-q", "ping"], capture_output=True, check=False, timeout=_TIMEOUT_S
    )
    return done.returncode == 0


def _rabbitmq() -> int:
    state = _RABBIT_HOME / "ports.json"
    if state.exists():
        ports = json.loads(state.read_text())
        amqp_port, dist_port = int(ports["amqp"]), int(ports["dist"])
        if _node_running():
            return amqp_port
    else:
        free = [p for p in _RABBIT_PORTS if _free(p)]
        if len(free) < 2:
            raise RuntimeError(f"no two free ports in {_RABBIT_PORTS} for the RabbitMQ node {NODE}")
        amqp_port, dist_port = free[0], free[-1]
    home = _RABBIT_HOME
    home.mkdir(parents=True, exist_ok=True)
    (home / "rabbitmq.conf").write_text(
        f"listeners.tcp.local = 127.0.0.1:{amqp_port}\n"
        # guest over 127.0.0.1 only, as the shared node: the listener is loopback-only anyway
        "loopback_users.guest = true\n"
    )
    (home / "rabbitmq-env.conf").write_text(f"NODENAME={NODE}\nERL_EPMD_ADDRESS=127.0.0.1\n")
    (home / "enabled_plugins").write_text("[rabbitmq_consistent_hash_exchange].\n")
    state.write_text(json.dumps({"amqp": amqp_port, "dist": dist_port}) + "\n")
    # The server runs as the rabbitmq user (/usr/sbin/rabbitmq-server su's to it as root).
    shutil.chown(home, "rabbitmq", "rabbitmq")
    for path in home.iterdir():
        shutil.chown(path, "rabbitmq", "rabbitmq")
    _run("rabbitmq-server", "-detached", env=_rabbit_env(amqp_port, dist_port))
    deadline = time.monotonic() + _START_WAIT_S
    while True:
        # await_startup fails at once while the node is not yet registered with epmd
        done = subprocess.run(
            ["rabbitmqctl", "-n", NODE, "-q", "await_startup", "--timeout", "30"],
            capture_output=True,
            text=True,
            check=False,
            timeout=_TIMEOUT_S,
        )
        if done.returncode == 0:
            return amqp_port
        if time.monotonic() > deadline:
            raise RuntimeError(f"the RabbitMQ node {NODE} did not start: {done.stderr.strip()[-500:]}")
        time.sleep(1.0)  # the node's boot: polled, bounded by _START_WAIT_S


def ensure() -> PrivateServers:
    """The campaign's PostgreSQL cluster and RabbitMQ node, made or started if need be."""
    for tool in ("pg_createcluster", "pg_lsclusters", "pg_ctlcluster", "rabbitmq-server", "rabbitmqctl"):
        if shutil.which(tool) is None:
            raise Unavailable(f"{tool} is absent: no private PostgreSQL cluster or RabbitMQ node")
    with _LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one maker at a time (held until made)
        version, pg_port = _postgres()
        amqp_port = _rabbitmq()
    return PrivateServers(version, pg_port, amqp_port)


@contextlib.contextmanager
def settings_on(servers: PrivateServers) -> Iterator[None]:
    """This process's settings (the databases' set-up and the checks, tests/pgtemplate.py) on
    the private cluster while the block runs; restored after (other tests of the same xdist
    worker run after it on the shared one)."""
    values = {
        "HIWALLET_DATABASE_URL": servers.database_url,
        "HIWALLET_MIGRATE_DATABASE_URL": servers.owner_url,
    }
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    get_settings.cache_clear()
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        get_settings.cache_clear()
