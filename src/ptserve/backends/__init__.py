"""Backends turn a model folder into instances that execute batches of prepared requests."""
