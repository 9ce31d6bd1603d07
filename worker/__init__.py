"""The evidence-coverage worker: how a score is computed at scale (contracts/ is what it means).

Importing this package, or any module in it but `worker.app`, builds nothing and reads nothing
from the environment; `worker.app` is the module `celery -A worker.app` names.
"""
