"""Schedulers hand queued requests to instance workers as batches."""
