"""requirements.lock, requirements-otel.lock and requirements-dev.lock agree with pyproject.toml:
every dependency pinned with hashes, development tools only in the dev lock, the shared pins the
same in all three."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name

from tests.conftest import ROOT

LOCK = ROOT / "requirements.lock"
DEV_LOCK = ROOT / "requirements-dev.lock"
OTEL_LOCK = ROOT / "requirements-otel.lock"
LOCKS = [
    pytest.param(LOCK, id="runtime"),
    pytest.param(OTEL_LOCK, id="otel"),
    pytest.param(DEV_LOCK, id="dev"),
]
WRITER = ".ci/lock"
DEVELOPMENT = ROOT / "docs" / "development.md"  # how to run the tests and write the locks
# Dev extras that a runtime dependency needs too, so they are in the runtime lock by right
# (langsmith, datasets and huggingface-hub require PyYAML).
NEEDED_AT_RUNTIME = {"pyyaml"}
# The same for the otel extra: its OTLP exporter sends with opentelemetry-proto, which the tests'
# receiver decodes with.
NEEDED_BY_OTEL = {"opentelemetry-proto"}


@dataclass(frozen=True)
class Pin:
    """One requirement of a lock file and the hashes pip will accept for it."""

    requirement: Requirement
    hashes: tuple[str, ...]

    @property
    def version(self) -> str:
        (specifier,) = self.requirement.specifier
        return specifier.version


def read_lock(path: Path) -> dict[NormalizedName, Pin]:
    """The lock's requirements by normalized name, read as pip reads them: backslashes join
    lines, `#` starts a comment, `--hash` options follow the requirement."""
    text = re.sub(r"\\\n", " ", path.read_text(encoding="utf-8"))
    pins: dict[NormalizedName, Pin] = {}
    for line in text.splitlines():
        content = re.sub(r"(^|\s)#.*", "", line).strip()
        if not content:
            continue
        requirement, *hashes = content.split(" --hash=")
        parsed = Requirement(requirement)
        name = canonicalize_name(parsed.name)
        assert name not in pins, f"{path.name} pins {name} twice"
        pins[name] = Pin(parsed, tuple(h.strip() for h in hashes))
    return pins


def project() -> dict[str, list[str]]:
    metadata = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return {"runtime": metadata["dependencies"], **metadata["optional-dependencies"]}


def requirements(group: str) -> list[Requirement]:
    return [Requirement(line) for line in project()[group]]


def assert_pinned_within_range(pins: dict[NormalizedName, Pin], wanted: list[Requirement]) -> None:
    for requirement in wanted:
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement} is not pinned"
        version = pins[name].version
        assert requirement.specifier.contains(version, prereleases=True), (requirement, version)


@pytest.mark.parametrize("path", LOCKS)
def test_every_line_is_an_exact_pin_with_hashes(path: Path) -> None:
    """Each requirement is `name==version` (a marker at most), with at least one sha256 hash,
    so pip installs the lock in hash-checking mode."""
    pins = read_lock(path)
    assert pins
    for name, pin in pins.items():
        (specifier,) = pin.requirement.specifier
        assert (specifier.operator, "*" in specifier.version) == ("==", False), name
        assert (pin.requirement.url, pin.requirement.extras) == (None, set()), name
        assert pin.hashes, f"{name} has no --hash"
        assert all(h.startswith("sha256:") for h in pin.hashes), name


@pytest.mark.parametrize("path", LOCKS)
def test_every_project_dependency_is_pinned_within_its_range(path: Path) -> None:
    """Each of pyproject's [project.dependencies] is pinned at a version its range allows."""
    assert_pinned_within_range(read_lock(path), requirements("runtime"))


def extras() -> list[str]:
    return [group for group in project() if group != "runtime"]


def test_every_extra_is_pinned_in_the_dev_lock_within_its_range() -> None:
    """Each requirement of every extra (`dev` and any optional feature) is pinned in
    requirements-dev.lock, so the tests run with all of them."""
    assert "dev" in extras()
    for group in extras():
        assert_pinned_within_range(read_lock(DEV_LOCK), requirements(group))


def test_the_otel_lock_pins_the_otel_extra_and_nothing_of_the_runtime_lock_has_it() -> None:
    """requirements-otel.lock is the runtime plus OpenTelemetry's export; requirements.lock
    stays without it (a worker without the extra loads none of it)."""
    assert_pinned_within_range(read_lock(OTEL_LOCK), requirements("otel"))
    otel = {canonicalize_name(r.name) for r in requirements("otel")}
    assert not otel & read_lock(LOCK).keys()


@pytest.mark.parametrize(
    "path", [pytest.param(LOCK, id="runtime"), pytest.param(OTEL_LOCK, id="otel")]
)
def test_development_tools_are_not_in_a_lock_that_runs(path: Path) -> None:
    """No dev extra that the runtime does not need (pytest, mypy, ruff, hypothesis,
    fakeredis...) is in requirements.lock or requirements-otel.lock, which images and a
    user's install get."""
    tools = {canonicalize_name(r.name) for r in requirements("dev")} - NEEDED_AT_RUNTIME
    assert {"pytest", "mypy", "ruff", "hypothesis", "fakeredis"} <= tools
    if path == OTEL_LOCK:
        tools -= NEEDED_BY_OTEL
    assert not tools & read_lock(path).keys()


@pytest.mark.parametrize(
    "path", [pytest.param(OTEL_LOCK, id="otel"), pytest.param(DEV_LOCK, id="dev")]
)
def test_every_runtime_pin_is_unchanged_in_the_other_locks(path: Path) -> None:
    """Every package of the runtime lock is in the others with the same version, marker and
    hashes, so the tests run on what the image runs."""
    other = read_lock(path)
    for name, pin in read_lock(LOCK).items():
        assert name in other, name
        assert (str(other[name].requirement), other[name].hashes) == (
            str(pin.requirement),
            pin.hashes,
        )


def test_both_locks_name_the_command_that_writes_them() -> None:
    """Every header names .ci/lock, which exists, is executable and is the command the
    development page gives."""
    for path in (LOCK, OTEL_LOCK, DEV_LOCK):
        assert f"#    {WRITER}\n" in path.read_text(encoding="utf-8"), path.name
    assert os.access(ROOT / WRITER, os.X_OK)
    assert f"\n{WRITER}  " in DEVELOPMENT.read_text(encoding="utf-8")


def section(path: Path, title: str) -> str:
    text = path.read_text(encoding="utf-8")
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def make_installs(target: str) -> list[str]:
    """The pip installs `make TARGET` runs on a clean clone (`make -n -B`: printed, not run),
    as a person would type them: `pip install ...`, without --quiet or redirections."""
    # An outer make (`make test` running pytest) must not pass its own flags down.
    env = {k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL"}}
    printed = subprocess.run(
        ["make", "--no-print-directory", "-n", "-B", target],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    installs = []
    for line in printed.splitlines():
        if "pip install" not in line:  # other recipe lines may be partial shell (a `\`)
            continue
        words = shlex.split(line)
        if Path(words[0]).name == "pip" and words[1:2] == ["install"]:
            kept = [word for word in words[1:] if word != "--quiet" and not word.startswith(">")]
            installs.append(" ".join(["pip", *kept]))
    return installs


def test_users_get_the_runtime_lock_and_ci_the_documented_test_install() -> None:
    """README's Install and `make run` use requirements.lock; the development page's test
    instructions and CI (`.ci/run` is `make test`) use requirements-dev.lock. Both as they
    are (--no-deps): each lock is complete."""
    install = "pip install --no-deps -r requirements.lock"
    dev_install = "pip install --no-deps -r requirements-dev.lock"
    assert f"{install} " in section(ROOT / "README.md", "Install")
    assert dev_install in section(DEVELOPMENT, "Run the tests")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert ci[-1] == "make test"
    assert make_installs("test") == [dev_install, "pip install --no-deps -e ."]
    assert make_installs("run") == [install, "pip install --no-deps -e ."]
