"""`evidence-worker report`: record lines aggregated, as text, JSON and one HTML page; where
each alert line belongs (alert_places), the Graders and Calibration sections (graders,
calibration_section)."""
