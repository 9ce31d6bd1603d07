"""The module `celery -A worker.app` names: the one place that builds the app from the
environment."""

from worker.runtime.celery_app import app

__all__ = ["app"]
