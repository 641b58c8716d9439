"""RayEvents as OpenTelemetry data: names, attributes and the mappings both ways."""
