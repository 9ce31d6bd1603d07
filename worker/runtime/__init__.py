"""The Celery runtime: the app factory (celery_app), the tasks, the worker's signal handlers,
the consumer, bootsteps, pool and request. Importing any of it builds no app."""
