"""Schedulers hand queued requests to instance workers as batches."""

from ptserve.scheduling.base import Scheduler
from ptserve.scheduling.default import DefaultScheduler
from ptserve.scheduling.work import WorkItem

__all__ = ["DefaultScheduler", "Scheduler", "WorkItem"]
