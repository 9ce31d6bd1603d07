"""Names other processes rely on: the task names a publisher sends to."""

SCORE = "evidence_coverage.score"
SCORE_BATCH = "evidence_coverage.score_batch"
NOOP = "evidence_coverage.noop"
CANARY = "evidence_coverage.canary"
RECONCILE = "evidence_coverage.reconcile"
