"""The transport-agnostic core: models, requests, scheduling hand-off, statistics."""
