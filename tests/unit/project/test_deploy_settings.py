"""Every file under deploy/ parses, and every setting it names is a real one, with a value
the worker loads: the deployment cannot drift from the Settings class unnoticed."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT
from tests.factories import procfile_worker
from tests.unit.project.deploy_files import (
    DEPLOY,
    celery_command,
    compose,
    image_environment,
    k8s_objects,
    worker_container,
)
from worker.settings import Settings, load_settings


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


# Settings named anywhere are real settings ---------------------------------------------------


def deploy_variable_sources() -> Iterator[tuple[str, dict[str, str]]]:
    yield "configmap", ours(k8s_objects()["ConfigMap"]["data"])
    yield "compose", ours(compose()["services"]["worker"]["environment"])
    container = worker_container()
    yield "deployment", ours({entry["name"]: entry.get("value") for entry in container["env"]})
    yield "dockerfile", ours(image_environment())


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
