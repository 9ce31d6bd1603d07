"""worker.observability.metrics.prepare and cleanup: the multiprocess directory a worker starts
with, whether
the operator set it or the worker made one."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from worker.observability import metrics
from worker.observability.metrics import MULTIPROC_ENV

PORT = 9464


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No variable and no directory made by an earlier test."""
    monkeypatch.delenv(MULTIPROC_ENV, raising=False)
    monkeypatch.setattr(metrics, "_created", [])
    yield
    metrics.cleanup()


def test_no_port_leaves_the_environment_alone() -> None:
    """Without EVIDENCE_METRICS_PORT nothing is made or set."""
    metrics.prepare(None)

    assert MULTIPROC_ENV not in os.environ


def test_without_the_variable_a_temporary_dir_is_made_and_set() -> None:
    """The worker makes an empty temporary directory and sets it for its pool children."""
    metrics.prepare(PORT)

    directory = Path(os.environ[MULTIPROC_ENV])
    assert directory.parent == Path(tempfile.gettempdir())
    assert directory.name.startswith("evidence-metrics-")
    assert list(directory.iterdir()) == []


def test_cleanup_removes_the_dir_the_worker_made() -> None:
    """At shutdown the directory prepare() made is removed."""
    metrics.prepare(PORT)
    directory = Path(os.environ[MULTIPROC_ENV])

    metrics.cleanup()

    assert not directory.exists()


def test_a_preset_dir_that_does_not_exist_is_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An emptyDir or tmpfs on /tmp hides what the image made: the worker creates the dir."""
    directory = tmp_path / "tmp" / "evidence-coverage-metrics"
    monkeypatch.setenv(MULTIPROC_ENV, str(directory))

    metrics.prepare(PORT)

    assert directory.is_dir()
    assert os.environ[MULTIPROC_ENV] == str(directory)


def test_a_preset_dir_is_emptied_of_an_earlier_run_s_value_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every *.db file (the collector sums them all) goes; nothing else in the dir is touched."""
    for name in ("counter_41.db", "gauge_livemax_41.db", "histogram_42.db", "notes.txt"):
        (tmp_path / name).write_bytes(b"stale")
    (tmp_path / "kept.db").mkdir()
    monkeypatch.setenv(MULTIPROC_ENV, str(tmp_path))

    metrics.prepare(PORT)

    assert sorted(path.name for path in tmp_path.iterdir()) == ["kept.db", "notes.txt"]


def test_cleanup_never_removes_a_dir_the_operator_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """Even one named like the worker's own temporary dirs, in the temporary directory."""
    directory = Path(tempfile.mkdtemp(prefix="evidence-metrics-"))
    try:
        monkeypatch.setenv(MULTIPROC_ENV, str(directory))
        metrics.prepare(PORT)

        metrics.cleanup()

        assert directory.is_dir()
    finally:
        directory.rmdir()


def test_a_preset_dir_that_cannot_be_made_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A path under a file cannot be a directory: prepare() raises instead of serving nothing."""
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv(MULTIPROC_ENV, str(tmp_path / "a-file" / "metrics"))

    with pytest.raises(NotADirectoryError):
        metrics.prepare(PORT)


def test_a_worker_that_cannot_make_the_dir_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """At worker_init, a directory that cannot be made stops the worker with one line."""
    from celery.concurrency.prefork import TaskPool

    from worker.runtime.celery_app import create_app
    from worker.runtime.signals import serve_metrics
    from worker.settings import Settings

    (tmp_path / "a-file").write_text("")
    directory = tmp_path / "a-file" / "metrics"
    monkeypatch.setenv(MULTIPROC_ENV, str(directory))
    monkeypatch.setattr(metrics, "single_process_storage", lambda: False)
    sender = SimpleNamespace(app=create_app(Settings(metrics_port=PORT)), pool_cls=TaskPool)

    with pytest.raises(SystemExit) as exit_:
        serve_metrics(sender)

    assert exit_.value.code == 2
    assert capsys.readouterr().err == (
        f"evidence-worker: configuration error: {MULTIPROC_ENV} cannot be used for metrics: "
        f"[Errno 20] Not a directory: '{directory}'\n"
    )
