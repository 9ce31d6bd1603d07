"""The app factory and the worker's signal handlers: built and connected only when asked."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from celery import signals as celery_signals

from tests.conftest import ROOT
from worker.constants import CANARY, NOOP, RECONCILE, SCORE, SCORE_BATCH
from worker.runtime import signals
from worker.runtime.celery_app import create_app
from worker.settings import Settings

OURS = signals.DISPATCH_PREFIX


def test_an_app_registers_the_tasks_on_itself_when_finalized() -> None:
    """Each app has its own five tasks, with the scoring tasks' Request; no other app gets them."""
    from celery import Celery

    app, other = create_app(Settings()), create_app(Settings())

    names = sorted(name for name in app.tasks if name.startswith("evidence_coverage."))

    assert names == sorted([CANARY, NOOP, RECONCILE, SCORE, SCORE_BATCH])
    assert app.tasks[SCORE] is not other.tasks[SCORE]
    assert (app.tasks[SCORE].app, app.tasks[SCORE_BATCH].Request) == (
        app,
        "worker.runtime.request:NamedByCase",
    )
    assert [name for name in Celery("plain").tasks if name.startswith("evidence")] == []


def test_an_app_that_only_sends_never_loads_the_scoring_path() -> None:
    """A publisher's app (the client, `publish`) is built without importing tasks or service."""
    code = (
        "import sys\n"
        "from worker.runtime.celery_app import create_app\n"
        "from worker.settings import Settings\n"
        "app = create_app(Settings())\n"
        "print(sorted(m for m in ('worker.runtime.tasks', 'worker.pipeline.service') "
        "if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )

    assert result.stdout == "[]\n"


def receivers() -> dict[str, list[str]]:
    """Our handlers connected to each Celery signal, by dispatch_uid."""
    connected: dict[str, list[str]] = {}
    for name in dir(celery_signals):
        signal = getattr(celery_signals, name)
        for (uid, _sender), _receiver in getattr(signal, "receivers", None) or []:
            if isinstance(uid, str) and uid.startswith(OURS):
                connected.setdefault(name, []).append(uid.removeprefix(OURS))
    return connected


@pytest.fixture
def unconnected() -> Iterator[None]:
    """Celery's signals as they were, with none of ours, restored afterwards."""
    kept: dict[Any, list[Any]] = {}
    for name in dir(celery_signals):
        signal = getattr(celery_signals, name)
        if isinstance(getattr(signal, "receivers", None), list):
            kept[signal] = list(signal.receivers)
            signal.receivers[:] = [
                entry
                for entry in signal.receivers
                if not (isinstance(entry[0][0], str) and entry[0][0].startswith(OURS))
            ]
            signal.sender_receivers_cache.clear()
    yield
    for signal, entries in kept.items():
        signal.receivers[:] = entries
        signal.sender_receivers_cache.clear()


@pytest.mark.usefixtures("unconnected")
def test_connect_puts_each_handler_on_its_signal_once_however_often_it_is_called() -> None:
    """Connecting twice (or for a second app) adds nothing: each handler has a dispatch_uid."""
    signals.connect(create_app(Settings()))
    signals.connect(create_app(Settings()))

    assert receivers() == {
        "celeryd_after_setup": ["banner_as_json_line", "warn_of_an_ended_window"],
        "celeryd_init": ["notices_as_json_lines"],
        "setup_logging": ["configure_logging"],
        "worker_init": [
            "refuse_unusable_configuration",
            "decode_json_with_orjson",
            "serve_metrics",
            "start_telemetry_without_pool_processes",
        ],
        "worker_process_init": [
            "export_metrics_in_pool_process",
            "start_telemetry_in_pool_process",
            "hold_sigterm_in_pool_process",
            "space_out_collections_in_pool_process",
        ],
        "worker_process_shutdown": ["close_service"],
        "worker_shutdown": ["remove_metrics_dir"],
    }


@pytest.mark.usefixtures("unconnected")
def test_a_pool_process_shutting_down_closes_the_connected_app_s_service_once() -> None:
    """The handlers without a sender serve the app they were connected for."""
    app = create_app(Settings())
    closed: list[int] = []
    app.close_service = lambda: closed.append(1)  # type: ignore[method-assign]
    signals.connect(app)
    signals.connect(app)

    celery_signals.worker_process_shutdown.send(sender=None, pid=None, exitcode=0)

    assert closed == [1]


def test_nothing_is_connected_by_importing_the_runtime() -> None:
    """Importing every runtime module connects none of our handlers; worker.app connects them."""
    code = (
        "import celery.signals as s, importlib\n"
        "for m in ('celery_app', 'tasks', 'signals', 'consumer', 'pool', 'request'):\n"
        "    importlib.import_module('worker.runtime.' + m)\n"
        "def ours():\n"
        "    return sum(isinstance(k[0], str) and k[0].startswith('evidence_coverage.')\n"
        "               for n in dir(s)\n"
        "               for k, _ in getattr(getattr(s, n), 'receivers', None) or [])\n"
        "before = ours()\n"
        "import worker.app\n"
        "print(before, ours())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )

    assert result.stdout == "0 14\n"
