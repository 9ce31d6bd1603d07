"""The per-message pipeline: a body in, its record out (intake, scoring, the service, the
alerts' ERROR lines and webhook in alert_delivery, redaction)."""
