"""Frontends translate wire formats to and from the core's requests and responses."""
