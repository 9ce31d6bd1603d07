"""`evidence-worker report`: record lines aggregated, as text, JSON and one HTML page."""
