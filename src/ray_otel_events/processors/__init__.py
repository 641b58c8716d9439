"""In-pipeline stages between receivers and exporters (buffering, filtering)."""
