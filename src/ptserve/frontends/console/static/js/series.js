// What the charts plot, computed from successive answers of GET /v2/models/stats (cumulative
// counts and durations) and GET /v2/metrics. Pure: no DOM.
//
// Honesty: the statistics are cumulative, so between two polls one second apart they give the
// number of requests and their total time: the mean latency of that second, not percentiles.
// Percentiles come only from the server's latency summaries (--metrics-config
// summary_latencies=true), which describe the requests of the last 60 s; see summaryQuantiles.

import { select } from "./metrics.js";

const FIELDS = ["success", "fail", "queue", "compute_input", "compute_infer", "compute_output"];
export const FAILURE_REASONS = ["REJECTED", "CANCELED", "BACKEND", "OTHER"];

/**
 * The statistics of ``model`` summed over its versions (``version``: only that one), or null
 * when the answer has none of them (the model is not ready).
 */
export function modelTotals(stats, model, version = null) {
  const entries = (stats.model_stats || []).filter(
    (entry) => entry.name === model && (version === null || entry.version === version),
  );
  if (!entries.length) return null;
  const totals = { versions: entries.map((e) => e.version), inference_count: 0, execution_count: 0, batches: {} };
  for (const field of FIELDS) totals[field] = { count: 0, ns: 0 };
  for (const entry of entries) {
    totals.inference_count += entry.inference_count;
    totals.execution_count += entry.execution_count;
    for (const field of FIELDS) {
      const value = entry.inference_stats[field] || { count: 0, ns: 0 };
      totals[field].count += value.count;
      totals[field].ns += value.ns;
    }
    for (const batch of entry.batch_stats || []) {
      totals.batches[batch.batch_size] = (totals.batches[batch.batch_size] || 0) + batch.compute_infer.count;
    }
  }
  return totals;
}

/** Every model (and its versions) that the statistics answer lists. */
export function modelsOf(stats) {
  const models = new Map();
  for (const entry of stats.model_stats || []) {
    if (!models.has(entry.name)) models.set(entry.name, []);
    models.get(entry.name).push(entry.version);
  }
  return models;
}

/**
 * Rates and means between two totals ``seconds`` apart: requests/s (succeeded, failed), the
 * mean latency, queue and compute time per request in ms (null when no request finished).
 * Null when a counter went down: the model was reloaded and its statistics started afresh.
 */
export function interval(previous, current, seconds) {
  if (!previous || !current || !(seconds > 0)) return null;
  const d = {};
  for (const field of FIELDS) {
    d[field] = {
      count: current[field].count - previous[field].count,
      ns: current[field].ns - previous[field].ns,
    };
    if (d[field].count < 0 || d[field].ns < 0) return null;
  }
  const executions = current.execution_count - previous.execution_count;
  if (executions < 0) return null;
  const per = (ns, count) => (count > 0 ? ns / count / 1e6 : null);
  return {
    successPerSecond: d.success.count / seconds,
    failedPerSecond: d.fail.count / seconds,
    requestsPerSecond: (d.success.count + d.fail.count) / seconds,
    executionsPerSecond: executions / seconds,
    meanMs: per(d.success.ns, d.success.count),
    queueMs: per(d.queue.ns, d.queue.count),
    computeMs: per(
      d.compute_input.ns + d.compute_infer.ns + d.compute_output.ns,
      d.compute_infer.count,
    ),
  };
}

/**
 * Executions per batch size between two totals: [{size, count}] sorted by size. After a reset
 * (a counter went down) the current totals are the counts since the reset.
 */
export function batchCounts(first, last) {
  if (!last) return [];
  const reset = first && Object.entries(first.batches).some(([size, n]) => (last.batches[size] || 0) < n);
  return Object.keys(last.batches)
    .map(Number)
    .sort((a, b) => a - b)
    .map((size) => ({
      size,
      count: last.batches[size] - (first && !reset ? first.batches[size] || 0 : 0),
    }));
}

/** Failed requests by reason from the metrics (nv_inference_request_failure), summed over
 * the versions given (all when null). */
export function failuresByReason(samples, model, version = null) {
  const match = version === null ? { model } : { model, version };
  const counts = {};
  for (const reason of FAILURE_REASONS) {
    const found = select(samples, "nv_inference_request_failure", { ...match, reason });
    counts[reason] = found.length ? found.reduce((sum, s) => sum + s.value, 0) : null;
  }
  return counts;
}

/** Failures per second by reason between two such counts (null for a reason after a reset). */
export function failureRates(previous, current, seconds) {
  const rates = {};
  for (const reason of FAILURE_REASONS) {
    const a = previous ? previous[reason] : null;
    const b = current ? current[reason] : null;
    rates[reason] = a === null || b === null || b < a || !(seconds > 0) ? null : (b - a) / seconds;
  }
  return rates;
}

/**
 * The server's latency summary of one model version (nv_inference_request_summary_us): the
 * quantiles of the requests of the last 60 s, in ms, e.g. [{quantile: 0.5, ms: 1.2}, …].
 * Null when summaries are off. A quantile over no request reads 0 on the server: null here.
 * Quantiles of several versions cannot be combined, so this takes exactly one version.
 */
export function summaryQuantiles(samples, model, version) {
  const found = select(samples, "nv_inference_request_summary_us", { model, version });
  if (!found.length) return null;
  return found
    .map((s) => ({ quantile: Number(s.labels.quantile), ms: s.value > 0 ? s.value / 1000 : null }))
    .sort((a, b) => a.quantile - b.quantile);
}
