"""The release this code is, as the server metadata reports it."""

__version__ = "0.1.0"
