"""`.ci/services` (make services): the ports from REDIS_PORT and AMQP_PORT, and a line for
each service saying whether it was up or started. Run with stand-ins for the servers."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

from tests.conftest import ROOT

STUBS = {
    # Answers PONG once redis-server has "started" (a marker file); records its arguments.
    "redis-cli": 'echo "$@" >> "$LOG"; [ -e "$STUBS/redis-up" ]',
    "redis-server": 'echo "redis-server $*" >> "$LOG"; touch "$STUBS/redis-up"',
    "rabbitmq-server": 'echo "rabbitmq-server $* port=$RABBITMQ_NODE_PORT" >> "$LOG"',
    "promtool": "true",
    "prometheus": "true",
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_services_start_on_the_ports_given_and_say_so(tmp_path: Path) -> None:
    """REDIS_PORT: Redis is started there and pinged there; AMQP_PORT already listening:
    RabbitMQ is found up, not started; one line each says which."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for name, body in STUBS.items():
        (stubs / name).write_text(f"#!/bin/sh\n{body}\n")
        (stubs / name).chmod(0o755)
    redis_port = free_port()
    with socket.socket() as amqp:
        amqp.bind(("127.0.0.1", 0))
        amqp.listen()
        amqp_port = amqp.getsockname()[1]
        run = subprocess.run(
            ["bash", str(ROOT / ".ci" / "services"), str(tmp_path)],
            env={
                **os.environ,
                "PATH": f"{stubs}:{os.environ['PATH']}",
                "STUBS": str(stubs),
                "LOG": str(tmp_path / "calls.log"),
                "REDIS_PORT": str(redis_port),
                "AMQP_PORT": str(amqp_port),
            },
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    assert run.returncode == 0, run.stderr
    assert run.stderr.splitlines() == [
        f"services: started Redis on 127.0.0.1:{redis_port}",
        f"services: RabbitMQ already up on 127.0.0.1:{amqp_port}",
    ]
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert calls[0] == f"-h 127.0.0.1 -p {redis_port} ping"
    assert calls[1].startswith(
        f"redis-server --daemonize yes --bind 127.0.0.1 -::1 --port {redis_port} "
    )
    assert calls[2] == f"-p {redis_port} ping"
    assert not any(call.startswith("rabbitmq-server") for call in calls)
