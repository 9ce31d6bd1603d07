"""The per-message pipeline: a body in, its record out (intake, scoring, the service, alerts,
redaction)."""
