"""Protocols that move bytes (HTTP/1.1, HTTP/2 for gRPC, TLS); they import nothing of the core."""
