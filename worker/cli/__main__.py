"""`python -m worker.cli`: the same as `evidence-worker`."""

from worker.cli import run

run()
