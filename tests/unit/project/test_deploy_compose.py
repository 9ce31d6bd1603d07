"""deploy/compose.yaml and compose.flower.yaml: Redis keeps every message, the worker and beat
run the Procfile's lines on one broker and store, Flower only with basic auth."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from tests.conftest import ROOT
from tests.factories import procfile
from tests.unit.project.deploy_files import COMPOSE, DEPLOY, compose

COMPOSE_FLOWER = DEPLOY / "compose.flower.yaml"


def test_compose_redis_keeps_every_message() -> None:
    """Redis runs with noeviction and AOF, on a named volume."""
    redis = compose()["services"]["redis"]
    command = redis["command"]
    pairs = dict(zip(command[1::2], command[2::2], strict=False))
    assert command[0] == "redis-server"
    assert (pairs["--maxmemory-policy"], pairs["--appendonly"]) == ("noeviction", "yes")
    assert any(volume.endswith(":/data") for volume in redis["volumes"])


def test_compose_worker_builds_deploy_dockerfile_and_uses_redis() -> None:
    """The worker builds deploy/Dockerfile from the repository root and talks to `redis`."""
    services = compose()["services"]
    worker = services["worker"]
    context = (COMPOSE.parent / worker["build"]["context"]).resolve()
    assert context == ROOT
    assert (context / worker["build"]["dockerfile"]) == DEPLOY / "Dockerfile"
    for name in ("EVIDENCE_BROKER_URL", "EVIDENCE_STORE_URL"):
        assert urlsplit(worker["environment"][name]).hostname == "redis"
    assert worker["depends_on"]["redis"]["condition"] == "service_healthy"


def test_compose_beat_is_the_procfile_beat_line_on_the_worker_s_broker_and_store() -> None:
    services = compose()["services"]
    beat, worker = services["beat"], services["worker"]
    assert beat["command"] == procfile("beat")
    assert beat["image"] == worker["image"]
    for name in ("EVIDENCE_BROKER_URL", "EVIDENCE_STORE_URL"):
        assert beat["environment"][name] == worker["environment"][name]
    # beat writes its schedule file, and the root filesystem is read-only
    assert procfile("beat")[-2:] == ["--schedule", "/tmp/celerybeat-schedule"]
    assert beat["tmpfs"] == ["/tmp"]


def test_procfile_beat_command_is_valid_for_installed_celery() -> None:
    """Celery's own parser accepts the beat line, and it schedules the reconcile task."""
    from worker.app import app

    command = procfile("beat")
    assert command[:4] == ["celery", "-A", "worker.app", "beat"]
    assert app.conf.beat_schedule["evidence-reconcile"]["task"] == "evidence_coverage.reconcile"
    run = subprocess.run(
        [sys.executable, "-m", "celery", *command[1:], "--help"],
        capture_output=True,
        check=False,
        timeout=120,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr.decode()


def compose_flower() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(COMPOSE_FLOWER.read_text(encoding="utf-8"))
    return document


def required_variable(value: object) -> tuple[str, str]:
    """Compose's ${NAME:?message}, which fails the whole file when NAME is unset or empty:
    (NAME, message)."""
    match = re.fullmatch(r"\$\{([A-Z_]+):\?([^}]+)\}", str(value))
    assert match, f"{value!r} is not a required variable"
    return match[1], match[2]


def test_compose_flower_is_a_separate_file_on_the_same_broker() -> None:
    """Flower runs only when its file is named, and watches the worker's broker."""
    assert "flower" not in compose()["services"]
    (name,) = compose_flower()["services"]
    flower = compose_flower()["services"][name]
    broker = compose()["services"]["worker"]["environment"]["EVIDENCE_BROKER_URL"]
    assert flower["environment"]["CELERY_BROKER_URL"] == broker
    assert flower["depends_on"] == {"redis": {"condition": "service_healthy"}}
    assert flower["ports"] == ["127.0.0.1:5555:5555"]


def test_compose_flower_requires_basic_auth_from_the_environment() -> None:
    """FLOWER_BASIC_AUTH is a required variable: compose refuses the file without it."""
    environment = compose_flower()["services"]["flower"]["environment"]
    name, message = required_variable(environment["FLOWER_BASIC_AUTH"])
    assert name == "FLOWER_BASIC_AUTH"
    assert message == "set FLOWER_BASIC_AUTH=user:password to run Flower"


def test_compose_flower_variables_are_flower_s_options(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flower itself reads FLOWER_BASIC_AUTH as --basic-auth and FLOWER_PORT as --port."""
    from flower.command import apply_env_options
    from flower.options import default_options

    environment = compose_flower()["services"]["flower"]["environment"]
    for name in list(os.environ):
        if name.startswith("FLOWER_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("FLOWER_BASIC_AUTH", "alice:s3cret,bob:pa55")
    monkeypatch.setenv("FLOWER_PORT", environment["FLOWER_PORT"])
    before = {name: getattr(default_options, name) for name in ("basic_auth", "port")}
    try:
        apply_env_options()
        assert default_options.basic_auth == ["alice:s3cret", "bob:pa55"]
        assert default_options.port == 5555
    finally:
        for name, value in before.items():
            setattr(default_options, name, value)


def docker_compose_available() -> bool:
    if shutil.which("docker") is None:
        return False
    version = subprocess.run(
        ["docker", "compose", "version"], capture_output=True, check=False, timeout=60
    )
    return version.returncode == 0


def docker_compose_config(*files: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    arguments = [argument for path in files for argument in ("-f", str(path))]
    return subprocess.run(
        ["docker", "compose", *arguments, "config", "--quiet"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env=env,
    )


needs_docker_compose = pytest.mark.skipif(
    not docker_compose_available(),
    reason="`docker compose version` fails here: no docker client with the compose plugin",
)


@needs_docker_compose
def test_docker_compose_config_accepts_the_files() -> None:
    """`docker compose config` (no engine needed) validates compose.yaml without
    FLOWER_BASIC_AUTH, and with the Flower file once it is set."""
    env = {k: v for k, v in os.environ.items() if k != "FLOWER_BASIC_AUTH"}
    alone = docker_compose_config(COMPOSE, env=env)
    with_flower = docker_compose_config(
        COMPOSE, COMPOSE_FLOWER, env={**env, "FLOWER_BASIC_AUTH": "alice:s3cret"}
    )
    assert (alone.returncode, with_flower.returncode) == (0, 0), alone.stderr + with_flower.stderr


@needs_docker_compose
def test_docker_compose_refuses_flower_without_basic_auth() -> None:
    """Without FLOWER_BASIC_AUTH, compose stops at the Flower file and says what to set."""
    env = {k: v for k, v in os.environ.items() if k != "FLOWER_BASIC_AUTH"}
    result = docker_compose_config(COMPOSE, COMPOSE_FLOWER, env=env)
    assert result.returncode != 0
    assert "set FLOWER_BASIC_AUTH=user:password to run Flower" in result.stderr
