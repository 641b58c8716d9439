"""Generated protobuf modules for Ray 2.60's event schema (`make proto` regenerates them)."""
