"""Names other processes rely on: the task names a publisher sends to, and the events of a
task failing on a bug that deploy/alerts/loki-rules.yaml alerts on."""

SCORE = "evidence_coverage.score"
SCORE_BATCH = "evidence_coverage.score_batch"
NOOP = "evidence_coverage.noop"
CANARY = "evidence_coverage.canary"
RECONCILE = "evidence_coverage.reconcile"

TASK_FAILED = "evidence_coverage.task_failed"
UNRECORDABLE = "evidence_coverage.unrecordable"
