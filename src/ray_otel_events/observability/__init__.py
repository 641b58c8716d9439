"""What an operator sees of a running server: Prometheus metrics, health probes, the exit summary."""
