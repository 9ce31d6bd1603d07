"""Names other processes rely on: the task names a publisher sends to, the events of a task
failing on a bug that deploy/alerts/loki-rules.yaml alerts on, the service and logger names
that collectors and dashboards select on (logging and telemetry both write them), and the
heartbeat file's words that the probe (worker/runtime/health.py) and Settings share. Standard
library only: the probe imports this and nothing heavier. Also the header that carries a
message's publish time from publisher to worker, and the broker name under which workers
announce their store per queue."""

SCORE = "evidence_coverage.score"
SCORE_BATCH = "evidence_coverage.score_batch"
NOOP = "evidence_coverage.noop"
CANARY = "evidence_coverage.canary"
RECONCILE = "evidence_coverage.reconcile"

TASK_FAILED = "evidence_coverage.task_failed"
UNRECORDABLE = "evidence_coverage.unrecordable"

# A task message header: when the publisher handed it to the broker, in seconds since the
# epoch; the worker's publish-to-record histogram reads it (a message without it is not timed).
PUBLISHED_AT_HEADER = "evidence_published_at"

# On the broker a worker consumes from, per queue it consumes: a Redis key, or a RabbitMQ queue
# holding one message (and the exclusive queue named + ".lock" that guards reading it).
STORE_ANNOUNCEMENT = "evidence.store.{queue}"

SERVICE_NAME = "evidence-coverage-worker"
LOGGER_NAME = "evidence_coverage"

HEARTBEAT_FILE_ENV = "EVIDENCE_HEARTBEAT_FILE"
EMPTY_FILE_PROBLEM = "empty: name the file the worker touches while it consumes, or unset it"
