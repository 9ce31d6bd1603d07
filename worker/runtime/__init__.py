"""The Celery runtime: the app factory, tasks, consumer, bootsteps, pool and request."""
