"""A real Redis Cluster of the tests' own: 3 masters, 3 replicas, on free ports, in a temporary
directory, built with `redis-cli --cluster create` (redis-server and redis-cli are all it needs).

`python -m tests.integration.redis_cluster` starts one and keeps it up until Ctrl-C, for trying
things by hand; the suite's fixture is `redis_cluster` (tests/integration/conftest.py).
"""

from __future__ import annotations

import contextlib
import random
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

BUS_OFFSET = 10_000  # a cluster node's bus port is its port + 10000
START_TIMEOUT_S = 30.0


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int) -> list[int]:
    """`count` ports p whose bus ports p + 10000 are free too."""
    found: list[int] = []
    while len(found) < count:
        port = random.randrange(20_000, 30_000)
        if port not in found and _free(port) and _free(port + BUS_OFFSET):
            found.append(port)
    return found


@dataclass
class Node:
    port: int
    process: subprocess.Popen[bytes]

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cli(self, *args: str, timeout: float = 10) -> str:
        return subprocess.run(
            ["redis-cli", "-p", str(self.port), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        ).stdout

    def info(self, section: str) -> dict[str, str]:
        lines = self.cli("INFO", section).splitlines()
        return dict(line.split(":", 1) for line in lines if ":" in line)

    def alive(self) -> bool:
        return self.process.poll() is None


@dataclass
class Cluster:
    directory: Path
    nodes: list[Node] = field(default_factory=list)

    @property
    def url(self) -> str:
        """A store URL naming one live node (any node will do)."""
        live = [node for node in self.nodes if node.alive()]
        return f"redis://{live[0].address}/0"

    def masters(self) -> list[Node]:
        return [node for node in self.nodes if node.alive() and _role(node) == "master"]

    def replicas(self) -> list[Node]:
        return [node for node in self.nodes if node.alive() and _role(node) == "slave"]

    def start_node(self, port: int) -> Node:
        folder = self.directory / str(port)
        folder.mkdir(exist_ok=True)
        options = {
            "port": str(port),
            "bind": "127.0.0.1",
            "cluster-enabled": "yes",
            "cluster-config-file": "nodes.conf",
            "cluster-node-timeout": "2000",
            "save": "",
            "appendonly": "no",
            "dir": str(folder),
            "logfile": "redis.log",
        }
        arguments = [part for name, value in options.items() for part in (f"--{name}", value)]
        process = subprocess.Popen(
            ["redis-server", *arguments],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        node = Node(port, process)
        deadline = time.monotonic() + START_TIMEOUT_S
        while node.cli("PING").strip() != "PONG":
            if time.monotonic() > deadline or not node.alive():
                raise RuntimeError(f"redis-server on port {port} did not start")
            time.sleep(0.05)
        return node

    def wait_ok(self, timeout: float = START_TIMEOUT_S) -> None:
        """Until every live node says cluster_state:ok and knows every slot's master."""
        deadline = time.monotonic() + timeout
        while True:
            states = [node.info("cluster") for node in self.nodes if node.alive()]
            cluster = [node.cli("CLUSTER", "INFO") for node in self.nodes if node.alive()]
            if all("cluster_state:ok" in text for text in cluster) and states:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the test cluster did not become ok: {cluster}")
            time.sleep(0.1)

    def wait_replicas_synced(self, timeout: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while any(
            node.info("replication").get("master_link_status") != "up" for node in self.replicas()
        ):
            if time.monotonic() > deadline:
                raise RuntimeError("the test cluster's replicas did not sync")
            time.sleep(0.1)

    def master_of(self, key: str) -> Node:
        """The live master serving `key`'s slot (its own CLUSTER NODES line lists its slots)."""
        slot = int(self.nodes[0].cli("CLUSTER", "KEYSLOT", key))
        for node in self.masters():
            if any(_in_range(slot, part) for part in _myself(node).split()[8:]):
                return node
        raise LookupError(f"no live master serves slot {slot}")

    def replica_of(self, master: Node) -> Node:
        """A live replica of `master`."""
        for node in self.replicas():
            if node.info("replication").get("master_port") == str(master.port):
                return node
        raise LookupError(f"master {master.address} has no live replica")

    def flush(self) -> None:
        for node in self.masters():
            node.cli("FLUSHALL")

    def kill(self, node: Node) -> None:
        node.process.send_signal(signal.SIGKILL)
        node.process.wait(timeout=10)

    def stop(self) -> None:
        for node in self.nodes:
            if node.alive():
                node.process.terminate()
        for node in self.nodes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.process.wait(timeout=10)
            if node.alive():
                node.process.kill()


def _in_range(slot: int, part: str) -> bool:
    if part.startswith("["):  # a slot being migrated or imported
        return False
    low, _, high = part.partition("-")
    return int(low) <= slot <= int(high or low)


def _myself(node: Node) -> str:
    return next(line for line in node.cli("CLUSTER", "NODES").splitlines() if "myself" in line)


def _role(node: Node) -> str:
    return node.info("replication").get("role", "")


@contextlib.contextmanager
def running_cluster(masters: int = 3, replicas_per_master: int = 1) -> Iterator[Cluster]:
    with tempfile.TemporaryDirectory(prefix="evidence-cluster-") as directory:
        cluster = Cluster(Path(directory))
        try:
            for port in free_ports(masters * (1 + replicas_per_master)):
                cluster.nodes.append(cluster.start_node(port))
            created = subprocess.run(
                [
                    "redis-cli",
                    "--cluster",
                    "create",
                    *(node.address for node in cluster.nodes),
                    "--cluster-replicas",
                    str(replicas_per_master),
                    "--cluster-yes",
                ],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            if created.returncode != 0:
                raise RuntimeError(f"redis-cli --cluster create failed: {created.stdout}")
            cluster.wait_ok()
            cluster.wait_replicas_synced()
            yield cluster
        finally:
            cluster.stop()


if __name__ == "__main__":
    with running_cluster() as cluster:
        print(cluster.url, " ".join(node.address for node in cluster.nodes), flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)
