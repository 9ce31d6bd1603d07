"""`evidence-worker bench`: throughput against Celery's own floor (drain.py), the scoring call
against raw set arithmetic (micro.py), and the worker command line both it and the tests run
(launch.py)."""
