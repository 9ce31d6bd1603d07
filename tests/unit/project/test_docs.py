"""The README and docs/: the README fits on a first screen and links every page, every link
and every repository path they name resolves, and docs/settings.md is what the Settings class
says (worker/settings_page.py writes it)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.conftest import ROOT
from worker import settings_page
from worker.settings import Settings

README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
README_MAX_BYTES = 16_000
FENCED = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"\]\(([^)\s]+)\)")
# A path in the repository, as the docs write them: worker/runtime/pool.py, deploy/k8s/.
REPO_PATH = re.compile(r"(?<![\w./-])((?:worker|contracts|deploy|tests|docs|\.ci)/[\w./-]*[\w/])")
# A dotted name in the package: worker.observability.metrics.known_message_labels.
DOTTED = re.compile(r"(?<![\w./-])((?:worker|contracts)(?:\.\w+)+)(?![\w/])")
DEFINED = r"^(?:def|class) {name}\b|^{name}\b.*=|^\s+\"{name}\","


def prose(path: Path) -> str:
    """A Markdown file without its fenced blocks (where `#` starts a shell comment)."""
    return FENCED.sub("", path.read_text(encoding="utf-8"))


def anchors(path: Path) -> set[str]:
    """The fragment GitHub gives each heading: lower case, punctuation dropped, `-` for spaces."""
    headings = re.findall(r"^#+ (.+)$", prose(path), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


def sh_lines(text: str) -> list[str]:
    """The commands of every ```sh block, comments dropped, as a shell splits them."""
    blocks = re.findall(r"^```sh\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    return [
        shlex.join(shlex.split(line, comments=True))
        for block in blocks
        for line in block.splitlines()
        if line.strip()
    ]


def test_the_settings_page_is_what_the_settings_class_says() -> None:
    """docs/settings.md is render()'s text: run `make docs` after changing a setting."""
    assert (DOCS / "settings.md").read_text(encoding="utf-8") == settings_page.render()


def test_every_setting_has_one_row_with_its_variable_and_description() -> None:
    """Each Settings field is one row of the generated tables, with its description."""
    generated = settings_page.render().split("\n## Other variables", 1)[0]
    for name, field in Settings.model_fields.items():
        variable = settings_page.env_name(name, field)
        (row,) = [line for line in generated.splitlines() if line.startswith(f"| `{variable}` |")]
        assert row.endswith(f" | {settings_page.cell(field.description or '')} |"), name
    assert settings_page.env_name("min_coverage", Settings.model_fields["min_coverage"]) == (
        "MIN_EVIDENCE_COVERAGE"
    )


@pytest.mark.parametrize(
    ("name", "default", "value"),
    [
        ("broker_url", "`redis://localhost:6379/0`", "text"),
        ("store_url", "unset", "text"),
        ("log_schema", "`otel`", "`otel` or `ecs`"),
        ("keep_excerpts", "`false`", "`true` or `false`"),
        ("heartbeat_seconds", "`5.0`", "number > 0"),
        ("max_attempts_per_hash", "`100`", "integer ≥ 2"),
        ("metrics_port", "unset", "integer ≥ 1, ≤ 65535"),
        ("policy_file", "unset", "path"),
        ("tls_ca_file", "unset", "path of an existing file"),
    ],
)
def test_a_row_shows_the_default_and_what_a_value_must_be(
    name: str, default: str, value: str
) -> None:
    """The default and the accepted values come from the field's default, type and bounds."""
    field = Settings.model_fields[name]
    assert (settings_page.shown_default(field), settings_page.accepted(field)) == (default, value)


def test_a_field_in_no_group_stops_the_page(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new setting must be placed in a group: render() names the ones that are not."""
    groups = tuple(
        (title, about, tuple(name for name in names if name != "queue"))
        for title, about, names in settings_page.GROUPS
    )
    monkeypatch.setattr(settings_page, "GROUPS", groups)
    with pytest.raises(ValueError, match=r"not in a group \['queue'\], not a field \[\]"):
        settings_page.render()


def test_check_says_to_run_make_docs_when_the_page_is_stale(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--check exits 1 with one line on a stale page and 0 on the one `make docs` writes."""
    page = tmp_path / "settings.md"
    page.write_text("# Settings\n", encoding="utf-8")

    assert settings_page.main(["--check"], page=page) == 1
    assert capsys.readouterr().err == (
        "settings.md is not what worker/settings.py says: run `make docs`\n"
    )
    assert settings_page.main([], page=page) == 0
    assert page.read_text(encoding="utf-8") == settings_page.render()
    assert settings_page.main(["--check"], page=page) == 0
    assert capsys.readouterr() == ("", "")


def test_the_readme_fits_on_a_first_screen() -> None:
    """At most 16,000 bytes: what it is, make run, make test, the worker, links."""
    readme = README.read_text(encoding="utf-8")
    assert len(readme.encode("utf-8")) <= README_MAX_BYTES
    for words in ("make run", "make test", "pytest", "## Install", "## Settings"):
        assert words in readme, words


def test_the_readme_links_every_docs_page() -> None:
    """Every page in docs/ is reachable from the README."""
    linked = {target.split("#", 1)[0] for target in LINK.findall(prose(README))}
    assert [page.name for page in PAGES if f"docs/{page.name}" not in linked] == []
    assert len(PAGES) >= 10


@pytest.mark.parametrize("path", [README, *PAGES], ids=lambda path: path.name)
def test_every_relative_link_resolves(path: Path) -> None:
    """Each relative link names a file that exists, and a heading there when it has a #."""
    broken = []
    for target in LINK.findall(prose(path)):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, fragment = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        if not linked.is_file() or (fragment and fragment not in anchors(linked)):
            broken.append(target)
    assert broken == []


@pytest.mark.parametrize("path", [README, *PAGES], ids=lambda path: path.name)
def test_every_repository_path_named_exists(path: Path) -> None:
    """worker/..., contracts/..., deploy/..., tests/... paths and dotted package names in the
    text are real: a moved module is renamed in the docs too."""
    text = path.read_text(encoding="utf-8")
    missing = [name for name in REPO_PATH.findall(text) if not (ROOT / name).exists()]
    for dotted in DOTTED.findall(text):
        if dotted.endswith(".md"):  # a page's name (worker.md), not a module
            continue
        parts = dotted.split(".")
        # The longest prefix that is a module file or package; at most one name after it.
        for end in range(len(parts), 0, -1):
            base = ROOT.joinpath(*parts[:end])
            module = base.with_suffix(".py") if base.with_suffix(".py").is_file() else None
            module = module or (base / "__init__.py" if base.is_dir() else None)
            if module is not None:
                break
        rest = parts[end:]
        # Defined there, or listed in its __all__ (contracts loads some names on first use).
        defined = module is not None and (
            not rest
            or (
                len(rest) == 1 and re.search(DEFINED.format(name=rest[0]), module.read_text(), re.M)
            )
        )
        if not defined:
            missing.append(dotted)
    assert missing == []


def test_the_readme_worker_commands_are_the_worker_page_s() -> None:
    """The README's worker in three commands are the commands docs/worker.md runs (and
    tests/integration/test_readme_flow.py runs that page's)."""
    readme = README.read_text(encoding="utf-8")
    section = readme.split("\n## The worker in three commands\n", 1)[1].split("\n## ", 1)[0]
    page = (DOCS / "worker.md").read_text(encoding="utf-8")
    run_section = page.split("\n## Run the worker\n", 1)[1].split("\n## ", 1)[0]
    commands = sh_lines(section)
    assert len(commands) == 3
    assert [command for command in commands if command not in sh_lines(run_section)] == []
