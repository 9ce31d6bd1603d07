"""What the worker tells the outside: log lines, Prometheus metrics, OpenTelemetry export."""
