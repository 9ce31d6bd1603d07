"""The Celery runtime: the app factory (celery_app), the tasks, the worker's signal handlers,
the consumer, bootsteps, pool and request, the garbage collector's settings (gc_tuning), and
the fast paths for kombu's JSON and Redis QoS (kombu_json, kombu_qos). Importing any of it
builds no app."""
