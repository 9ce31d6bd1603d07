"""Readers of deploy/ shared by the deployment tests: the Dockerfile's stages, compose, the
Kubernetes objects, and the installed parsers of the command lines they hold."""

from __future__ import annotations

import argparse
import importlib
import json
import shlex
import warnings
from pathlib import Path
from typing import Any

import yaml
from celery import Celery
from celery.bin.base import CLIContext
from celery.bin.celery import celery as celery_cli

from tests.conftest import ROOT
from worker.cli import build_parser
from worker.cli import health as health_cli

DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
COMPOSE = DEPLOY / "compose.yaml"


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


def worker_container() -> dict[str, Any]:
    containers: list[dict[str, Any]] = k8s_objects()["Deployment"]["spec"]["template"]["spec"][
        "containers"
    ]
    (container,) = containers
    return container


def compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    return document


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


def image_environment() -> dict[str, str]:
    """The runtime stage's ENV variables."""
    env = " ".join(args for kw, args in dockerfile_stages()[1] if kw == "ENV")
    return dict(pair.split("=", 1) for pair in shlex.split(env))


def image_heartbeat_file() -> Path:
    """EVIDENCE_HEARTBEAT_FILE as the image sets it."""
    return Path(image_environment()["EVIDENCE_HEARTBEAT_FILE"])


def dockerfile_healthcheck() -> tuple[str, list[str]]:
    """The HEALTHCHECK's options and its command (exec form)."""
    options, _, command = only(dockerfile_stages()[1], "HEALTHCHECK").partition(" CMD ")
    argv: list[str] = json.loads(command)
    return options, argv
