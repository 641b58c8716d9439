"""The compiled helpers: C twins of Python code in encoding/, otel/ and store/ (docs/native.md).

Each module is optional; its Python twin imports it when built and runs the same logic otherwise."""
