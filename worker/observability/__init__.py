"""What the worker tells the outside: log lines (structlog, and the fast path for a batch's
record lines in structlog_lines), Prometheus metrics, OpenTelemetry export."""
