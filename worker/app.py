"""The module `celery -A worker.app` names: the one place that builds the app from the
environment, and connects the worker's signal handlers (worker/runtime/signals.py).

A bad setting ends the process here with one line on stderr and exit 2; Celery would print the
import's traceback and carry on as if nothing had happened. Every other module builds nothing
when imported: code that wants an app calls `create_app(settings)`.
"""

from __future__ import annotations

from worker.errors import ConfigurationError
from worker.runtime import signals
from worker.runtime.celery_app import EvidenceApp, create_app
from worker.settings import load_settings

__all__ = ["app"]


def _from_environment() -> EvidenceApp:
    try:
        return create_app(load_settings())
    except ConfigurationError as error:
        signals.exit_unusable(str(error))


app = _from_environment()
signals.connect(app)
