"""Prometheus metrics with the reference server's names (``frontends.metrics`` serves them).

The counters are read from the same ``ModelStats`` that ``/stats`` reports, so the two agree;
the latency summaries and the histogram are observed per version into a ``LatencyRecorder``
that the version's statistics hold, so they go with the version when it unloads. The text format
(0.0.4) is written here: it is small, and a client library would be one more dependency for a
dozen lines.
"""

from __future__ import annotations

import bisect
import collections
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ptserve.common.stats import FAILURE_REASONS
from ptserve.core.model import ModelVersion
from ptserve.core.server import InferenceServer

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DEFAULT_QUANTILES = ((0.5, 0.05), (0.9, 0.01), (0.95, 0.001), (0.99, 0.001))
DEFAULT_BUCKETS_MS = (100.0, 500.0, 2000.0, 5000.0)
SUMMARY_MAX_AGE_S = 60.0  # summaries describe the last minute, like the reference's
SUMMARY_MAX_SAMPLES = 10_000

_COUNTERS = (
    (
        "nv_inference_request_duration_us",
        "success",
        "Cumulative inference request duration in microseconds (includes cached requests)",
    ),
    (
        "nv_inference_queue_duration_us",
        "queue",
        "Cumulative inference queuing duration in microseconds (includes cached requests)",
    ),
    (
        "nv_inference_compute_input_duration_us",
        "compute_input",
        "Cumulative compute input duration in microseconds (does not include cached requests)",
    ),
    (
        "nv_inference_compute_infer_duration_us",
        "compute_infer",
        "Cumulative compute inference duration in microseconds (does not include cached requests)",
    ),
    (
        "nv_inference_compute_output_duration_us",
        "compute_output",
        "Cumulative inference compute "
        "output duration in microseconds (does not include cached requests)",
    ),
)
_SUMMARIES = (
    (
        "nv_inference_request_summary_us",
        "Summary of inference request duration in microseconds (includes cached requests)",
    ),
    (
        "nv_inference_queue_summary_us",
        "Summary of inference queuing duration in microseconds (includes cached requests)",
    ),
    (
        "nv_inference_compute_input_summary_us",
        "Summary of compute input duration in microseconds (does not include cached requests)",
    ),
    (
        "nv_inference_compute_infer_summary_us",
        "Summary of compute inference duration in microseconds (does not include cached requests)",
    ),
    (
        "nv_inference_compute_output_summary_us",
        "Summary of compute output duration in microseconds (does not include cached requests)",
    ),
)
HISTOGRAM = "nv_inference_first_response_histogram_ms"


def _bool(key: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1", "on", "yes"):
        return True
    if lowered in ("false", "0", "off", "no"):
        return False
    raise ValueError(f"metrics setting '{key}' must be true or false, got '{value}'")


@dataclass(slots=True)
class MetricsConfig:
    """What ``--metrics-config key=value`` turns on or off."""

    counter_latencies: bool = True
    summary_latencies: bool = False
    summary_quantiles: tuple[tuple[float, float], ...] = DEFAULT_QUANTILES
    histogram_latencies: bool = False
    histogram_buckets_ms: tuple[float, ...] = DEFAULT_BUCKETS_MS
    cpu_metrics: bool = True
    gpu_metrics: bool = True

    @classmethod
    def parse(cls, items: Iterable[str]) -> MetricsConfig:
        """``counter_latencies``, ``summary_latencies``, ``summary_quantiles=q:e,...``,
        ``histogram_latencies``, ``histogram_buckets_ms=b,...``; ValueError when wrong."""
        config = cls()
        for item in items:
            key, sep, value = item.partition("=")
            key = key.strip()
            if not sep:
                raise ValueError(f"metrics setting '{item}' must look like <key>=<value>")
            if key in ("counter_latencies", "summary_latencies", "histogram_latencies"):
                setattr(config, key, _bool(key, value))
            elif key == "summary_quantiles":
                pairs = []
                for part in value.split(","):
                    quantile, _, error = part.partition(":")
                    q, e = float(quantile), float(error or "0")
                    if not 0.0 <= q <= 1.0:
                        raise ValueError(f"summary quantile {q} is not between 0 and 1")
                    pairs.append((q, e))
                config.summary_quantiles = tuple(pairs)
            elif key == "histogram_buckets_ms":
                config.histogram_buckets_ms = tuple(sorted(float(b) for b in value.split(",")))
            else:
                raise ValueError(
                    f"unknown metrics setting '{key}'; known: counter_latencies, "
                    "summary_latencies, summary_quantiles, histogram_latencies, "
                    "histogram_buckets_ms"
                )
        return config


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in pairs)
    return "{" + inner + "}" if inner else ""


def _number(value: float) -> str:
    if isinstance(value, int) or float(value).is_integer():
        return str(int(value))
    return repr(float(value))


class LatencyRecorder:
    """Recent observations of one version, for summaries, and the first-response histogram.

    It is the version's ``ModelStats.observer``: called with the times of each success."""

    def __init__(self, buckets_ms: tuple[float, ...]) -> None:
        self.bounds = buckets_ms
        self.samples: collections.deque[tuple[float, tuple[int, ...]]] = collections.deque(
            maxlen=SUMMARY_MAX_SAMPLES
        )
        self.sums = [0.0] * 5
        self.count = 0
        self.buckets = [0] * (len(buckets_ms) + 1)
        self.histogram_sum = 0.0
        self.lock = threading.Lock()

    def __call__(self, total: int, queue: int, c_in: int, c_infer: int, c_out: int) -> None:
        values = (total, queue, c_in, c_infer, c_out)
        with self.lock:
            self.samples.append((time.monotonic(), values))
            for index, ns in enumerate(values):
                self.sums[index] += ns / 1000.0
            self.count += 1
            ms = total / 1e6
            self.buckets[bisect.bisect_left(self.bounds, ms)] += 1
            self.histogram_sum += ms


def _recorder(version: ModelVersion) -> LatencyRecorder | None:
    observer = version.stats.observer
    return observer if isinstance(observer, LatencyRecorder) else None


class Metrics:
    """Renders every metric of the server as Prometheus text."""

    def __init__(self, server: InferenceServer, config: MetricsConfig) -> None:
        self.server = server
        self.config = config
        # The /proc/stat counters at each reader's previous render (see ``render``).
        self._cpu_last: dict[str, tuple[int, int]] = {}
        if config.summary_latencies or config.histogram_latencies:
            server.manager.on_version = self.watch
            for model in list(server.manager.models.values()):
                for version in list(model.versions.values()):
                    self.watch(version)

    def watch(self, version: ModelVersion) -> None:
        """Observe each success of ``version`` (only when summaries or the histogram are on)."""
        version.stats.observer = LatencyRecorder(self.config.histogram_buckets_ms)

    # --- rendering ---------------------------------------------------------------------------

    def render(self, reader: str = "") -> str:
        """Every metric as Prometheus text. ``nv_cpu_utilization`` is the busy share since the
        previous render for the same ``reader``, so that one reader (the console, polling
        every second) does not shorten the window another (a scraper) sees."""
        versions = [
            v
            for _, model in sorted(self.server.manager.models.items())
            for _, v in sorted(model.versions.items())
            if v.ready
        ]
        lines: list[str] = []
        self._model_metrics(lines, versions)
        if self.config.summary_latencies:
            self._summaries(lines, versions)
        if self.config.histogram_latencies:
            self._histogram(lines, versions)
        if self.config.cpu_metrics:
            self._cpu(lines, reader)
        if self.config.gpu_metrics:
            self._gpu(lines)
        return "\n".join(lines) + "\n"

    @staticmethod
    def _family(lines: list[str], name: str, kind: str, help_text: str) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")

    def _model_metrics(self, lines: list[str], versions: list[ModelVersion]) -> None:
        snaps = [
            (v, v.stats.snapshot(v.name, str(v.version)), v.stats.failure_counts())
            for v in versions
        ]

        def key(v: ModelVersion) -> list[tuple[str, str]]:
            return [("model", v.name), ("version", str(v.version))]

        self._family(
            lines,
            "nv_inference_request_success",
            "counter",
            "Number of successful inference requests, all batch sizes",
        )
        for v, snap, _ in snaps:
            count = snap["inference_stats"]["success"]["count"]
            lines.append(f"nv_inference_request_success{_labels(key(v))} {count}")
        self._family(
            lines,
            "nv_inference_request_failure",
            "counter",
            "Number of failed inference requests, all batch sizes",
        )
        for v, _, failures in snaps:
            for reason in FAILURE_REASONS:
                labels = _labels([*key(v), ("reason", reason)])
                lines.append(f"nv_inference_request_failure{labels} {failures[reason]}")
        self._family(
            lines,
            "nv_inference_count",
            "counter",
            "Number of inferences performed (does not include cached requests)",
        )
        for v, snap, _ in snaps:
            lines.append(f"nv_inference_count{_labels(key(v))} {snap['inference_count']}")
        self._family(
            lines,
            "nv_inference_exec_count",
            "counter",
            "Number of model executions performed (does not include cached requests)",
        )
        for v, snap, _ in snaps:
            lines.append(f"nv_inference_exec_count{_labels(key(v))} {snap['execution_count']}")
        if self.config.counter_latencies:
            for name, field_name, help_text in _COUNTERS:
                self._family(lines, name, "counter", help_text)
                for v, snap, _ in snaps:
                    micros = snap["inference_stats"][field_name]["ns"] // 1000
                    lines.append(f"{name}{_labels(key(v))} {micros}")
        self._family(
            lines,
            "nv_inference_pending_request_count",
            "gauge",
            "Instantaneous number of pending requests awaiting execution per-model.",
        )
        for v, _, _ in snaps:
            lines.append(f"nv_inference_pending_request_count{_labels(key(v))} {v.pending()}")
        self._family(lines, "nv_model_load_duration_secs", "gauge", "Model load time in seconds")
        for v, _, _ in snaps:
            seconds = _number(round(v.load_seconds, 6))
            lines.append(f"nv_model_load_duration_secs{_labels(key(v))} {seconds}")

    def _summaries(self, lines: list[str], versions: list[ModelVersion]) -> None:
        horizon = time.monotonic() - SUMMARY_MAX_AGE_S
        per_version: list[tuple[ModelVersion, LatencyRecorder, list[tuple[int, ...]]]] = []
        for v in versions:
            latencies = _recorder(v)
            if latencies is None:
                continue
            with latencies.lock:
                recent = [values for stamp, values in latencies.samples if stamp >= horizon]
            per_version.append((v, latencies, recent))
        for index, (name, help_text) in enumerate(_SUMMARIES):
            self._family(lines, name, "summary", help_text)
            for v, latencies, recent in per_version:
                base = [("model", v.name), ("version", str(v.version))]
                ordered = sorted(values[index] / 1000.0 for values in recent)
                for quantile, _ in self.config.summary_quantiles:
                    value = _quantile(ordered, quantile)
                    labels = _labels([*base, ("quantile", _number(quantile))])
                    lines.append(f"{name}{labels} {_number(value)}")
                with latencies.lock:
                    total, count = latencies.sums[index], latencies.count
                lines.append(f"{name}_sum{_labels(base)} {_number(round(total, 3))}")
                lines.append(f"{name}_count{_labels(base)} {count}")

    def _histogram(self, lines: list[str], versions: list[ModelVersion]) -> None:
        self._family(
            lines, HISTOGRAM, "histogram", "Duration from request to first response in milliseconds"
        )
        for v in versions:
            latencies = _recorder(v)
            if latencies is None:
                continue
            base = [("model", v.name), ("version", str(v.version))]
            with latencies.lock:
                buckets, total, count = (
                    list(latencies.buckets),
                    latencies.histogram_sum,
                    latencies.count,
                )
            running = 0
            for bound, hits in zip(self.config.histogram_buckets_ms, buckets, strict=False):
                running += hits
                labels = _labels([*base, ("le", _number(bound))])
                lines.append(f"{HISTOGRAM}_bucket{labels} {running}")
            lines.append(f"{HISTOGRAM}_bucket{_labels([*base, ('le', '+Inf')])} {count}")
            lines.append(f"{HISTOGRAM}_sum{_labels(base)} {_number(round(total, 3))}")
            lines.append(f"{HISTOGRAM}_count{_labels(base)} {count}")

    def _cpu(self, lines: list[str], reader: str) -> None:
        utilization = self._cpu_utilization(reader)
        total, used = _memory()
        if utilization is not None:
            self._family(lines, "nv_cpu_utilization", "gauge", "CPU utilization rate [0.0 - 1.0]")
            lines.append(f"nv_cpu_utilization {_number(round(utilization, 6))}")
        if total:
            self._family(
                lines, "nv_cpu_memory_total_bytes", "gauge", "CPU total memory (RAM), in bytes"
            )
            lines.append(f"nv_cpu_memory_total_bytes {total}")
            self._family(
                lines, "nv_cpu_memory_used_bytes", "gauge", "CPU used memory (RAM), in bytes"
            )
            lines.append(f"nv_cpu_memory_used_bytes {used}")

    def _cpu_utilization(self, reader: str) -> float | None:
        """Busy share of all CPUs since ``reader``'s previous scrape (since boot on its
        first)."""
        try:
            fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
        except OSError:
            return None
        values = [int(f) for f in fields]
        idle = values[3] + (values[4] if len(values) > 4 else 0)
        total = sum(values[:8])
        last = self._cpu_last.get(reader)
        self._cpu_last[reader] = (idle, total)
        if last is not None and total > last[1]:
            idle, total = idle - last[0], total - last[1]
        return 1.0 - idle / total if total else 0.0

    def _gpu(self, lines: list[str]) -> None:
        """GPU memory of the devices torch already uses (never initialises CUDA itself)."""
        torch = sys.modules.get("torch")
        if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return
        rows: list[tuple[str, int, int]] = []
        for index in range(torch.cuda.device_count()):
            free, total = torch.cuda.mem_get_info(index)
            uuid = getattr(torch.cuda.get_device_properties(index), "uuid", index)
            rows.append((f"GPU-{uuid}", int(total), int(total - free)))
        self._family(lines, "nv_gpu_memory_total_bytes", "gauge", "GPU total memory, in bytes")
        for uuid, total, _ in rows:
            lines.append(f"nv_gpu_memory_total_bytes{_labels([('gpu_uuid', uuid)])} {total}")
        self._family(lines, "nv_gpu_memory_used_bytes", "gauge", "GPU used memory, in bytes")
        for uuid, _, used in rows:
            lines.append(f"nv_gpu_memory_used_bytes{_labels([('gpu_uuid', uuid)])} {used}")


def _quantile(ordered: list[float], quantile: float) -> float:
    if not ordered:
        return 0.0
    index = min(int(quantile * len(ordered)), len(ordered) - 1)
    return ordered[index]


def _memory() -> tuple[int, int]:
    """(total, used) bytes of RAM from /proc/meminfo; (0, 0) where it cannot be read."""
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return 0, 0
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            values[key] = int(parts[0]) * 1024
    total = values.get("MemTotal", 0)
    available = values.get("MemAvailable", values.get("MemFree", 0))
    return total, max(total - available, 0)
