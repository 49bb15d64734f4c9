"""Schedulers hand queued requests to instance workers as batches."""

from ptserve.scheduling.base import Scheduler
from ptserve.scheduling.default import DefaultScheduler
from ptserve.scheduling.dynamic import DynamicBatcher
from ptserve.scheduling.factory import make_scheduler
from ptserve.scheduling.params import RequestOptions, request_options
from ptserve.scheduling.sequence import SequenceBatcher
from ptserve.scheduling.work import Batch, WorkItem

__all__ = [
    "Batch",
    "DefaultScheduler",
    "DynamicBatcher",
    "RequestOptions",
    "Scheduler",
    "SequenceBatcher",
    "WorkItem",
    "make_scheduler",
    "request_options",
]
