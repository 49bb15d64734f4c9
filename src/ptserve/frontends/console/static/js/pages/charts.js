// Live charts per model, polled every second from GET /v2/models/stats (and GET /v2/metrics for
// failures by reason and the latency summaries). Every number is computed here from successive
// answers: the server keeps nothing per viewer.

import { api, ApiError } from "../api.js";
import { h, replace, errorBox, table, formatNumber } from "../dom.js";
import { parseMetrics } from "../metrics.js";
import {
  modelTotals,
  modelsOf,
  interval,
  batchCounts,
  failuresByReason,
  failureRates,
  summaryQuantiles,
  FAILURE_REASONS,
} from "../series.js";
import { LineChart, BarChart } from "../svgchart.js";

const POLL_MS = 1000;
const WINDOW_S = 60;

export async function chartsPage(main, [initial], { signal, every }) {
  const modelSelect = h("select", { id: "chart-model" });
  const versionSelect = h("select", { id: "chart-version" }, h("option", { value: "" }, "all versions"));
  const pause = h("button", { type: "button", "aria-pressed": "false", id: "chart-pause" }, "Pause");
  const status = h("p", { class: "muted", "data-part": "chart-status" }, "Collecting…");
  const overview = h("div", { "data-part": "overview" });
  const problems = h("div", { "data-part": "chart-errors" });
  const charts = {
    requests: new LineChart("Requests", "requests", "req/s", WINDOW_S),
    latency: new LineChart("Latency", "latency", "ms", WINDOW_S),
    phases: new LineChart("Queue and compute time per request", "phases", "ms", WINDOW_S),
    batches: new BarChart(`Executions per batch size, last ${WINDOW_S} s`, "batches", ""),
    failures: new LineChart("Failures by reason", "failures", "failures/s", WINDOW_S),
  };
  main.append(
    h("h1", { tabindex: "-1" }, "Live charts"),
    h(
      "div",
      { class: "toolbar" },
      h("label", { for: "chart-model" }, "Model"),
      modelSelect,
      h("label", { for: "chart-version" }, "Version"),
      versionSelect,
      pause,
    ),
    status,
    problems,
    h("div", { class: "charts" }, Object.values(charts).map((c) => c.figure)),
    h("h2", {}, "Every model, last second"),
    overview,
    h(
      "p",
      { class: "note" },
      "How these are computed: the statistics are cumulative counts and durations, polled every second by this page; ",
      "rates and mean times are differences between successive polls. They give the mean latency of each second, not ",
      "percentiles. p50 and p99 are the server's latency summaries (nv_inference_request_summary_us, the requests of the ",
      `last ${WINDOW_S} s, one model version), shown when the server runs with --metrics-config summary_latencies=true.`,
    ),
  );

  let model = initial;
  let version = "";
  let paused = false;
  let metricsState = "unknown"; // "on" | "off" | "refused"
  let metricsError = null;
  const samples = []; // {t, stats, metrics}

  pause.addEventListener("click", () => {
    paused = !paused;
    pause.setAttribute("aria-pressed", String(paused));
    pause.textContent = paused ? "Resume" : "Pause";
    if (!paused) draw();
  });
  modelSelect.addEventListener("change", () => {
    model = modelSelect.value;
    version = "";
    window.history.replaceState(null, "", `#/charts/${encodeURIComponent(model)}`);
    fillVersions();
    draw();
  });
  versionSelect.addEventListener("change", () => {
    version = versionSelect.value;
    draw();
  });

  function fillVersions() {
    const latest = samples.length ? samples[samples.length - 1].stats : { model_stats: [] };
    const versions = modelsOf(latest).get(model) || [];
    const options = ["", ...versions];
    const current = [...versionSelect.options].map((o) => o.value);
    if (JSON.stringify(current) !== JSON.stringify(options)) {
      replace(versionSelect, options.map((v) => h("option", { value: v }, v ? `version ${v}` : "all versions")));
    }
    versionSelect.value = options.includes(version) ? version : "";
    version = versionSelect.value;
  }

  function fillModels(stats) {
    const names = [...modelsOf(stats).keys()];
    if (model && !names.includes(model)) names.unshift(model);
    if (!model && names.length) model = names[0];
    const current = [...modelSelect.options].map((o) => o.value);
    if (JSON.stringify(current) !== JSON.stringify(names)) {
      replace(modelSelect, names.map((n) => h("option", { value: n }, n)));
    }
    modelSelect.value = model || "";
  }

  function draw() {
    if (paused || !samples.length) return;
    const now = samples[samples.length - 1].t;
    const selected = version || null;
    const totals = samples.map((s) => modelTotals(s.stats, model, selected));
    const latestTotals = totals[totals.length - 1];
    const versions = latestTotals ? latestTotals.versions : [];
    const points = { succeeded: [], failed: [], mean: [], queue: [], compute: [], p50: [], p99: [] };
    const reasons = Object.fromEntries(FAILURE_REASONS.map((r) => [r, []]));
    const failures = samples.map((s) => (s.metrics ? failuresByReason(s.metrics, model, selected) : null));
    const quantileVersion = version || (versions.length === 1 ? versions[0] : null);
    let summariesSeen = false;
    for (let i = 0; i < samples.length; i += 1) {
      const age = (now - samples[i].t) / 1000;
      if (samples[i].metrics && quantileVersion) {
        const quantiles = summaryQuantiles(samples[i].metrics, model, quantileVersion);
        if (quantiles) {
          summariesSeen = true;
          const at = (q) => quantiles.find((x) => Math.abs(x.quantile - q) < 1e-9);
          points.p50.push({ age, value: at(0.5) ? at(0.5).ms : null });
          points.p99.push({ age, value: at(0.99) ? at(0.99).ms : null });
        }
      }
      if (i === 0) continue;
      const seconds = (samples[i].t - samples[i - 1].t) / 1000;
      const iv = interval(totals[i - 1], totals[i], seconds);
      const v = (x) => (iv ? x : null);
      points.succeeded.push({ age, value: v(iv && iv.successPerSecond) });
      points.failed.push({ age, value: v(iv && iv.failedPerSecond) });
      points.mean.push({ age, value: iv ? iv.meanMs : null });
      points.queue.push({ age, value: iv ? iv.queueMs : null });
      points.compute.push({ age, value: iv ? iv.computeMs : null });
      const rates = failureRates(failures[i - 1], failures[i], seconds);
      for (const reason of FAILURE_REASONS) reasons[reason].push({ age, value: rates[reason] });
    }
    charts.requests.update([
      { name: "succeeded", points: points.succeeded },
      { name: "failed", points: points.failed },
    ]);
    const latencySeries = [{ name: "mean, each second", points: points.mean }];
    let latencyNote;
    if (summariesSeen) {
      latencySeries.push({ name: `p50, last ${WINDOW_S} s`, points: points.p50 });
      latencySeries.push({ name: `p99, last ${WINDOW_S} s`, points: points.p99 });
      latencyNote = `p50 and p99: the server's summary of version ${quantileVersion} over the requests of the last ${WINDOW_S} s.`;
    } else if (metricsState === "on" && !quantileVersion) {
      latencyNote = "Percentiles are per version: pick one version to see p50 and p99.";
    } else if (metricsState === "on") {
      latencyNote = "No percentiles: the server's latency summaries are off. Start it with --metrics-config summary_latencies=true to see p50 and p99. The statistics alone give the mean of each second.";
    } else {
      latencyNote = `No percentiles: ${metricsError || "GET /v2/metrics is not available"}. The statistics alone give the mean of each second.`;
    }
    charts.latency.update(latencySeries, latencyNote);
    charts.phases.update(
      [
        { name: "queue", points: points.queue },
        { name: "compute", points: points.compute },
      ],
      "Mean per request of each second: time waiting in the queue, and compute (input, inference and output) of the batch it ran in.",
    );
    const first = totals.find((t) => t) || null;
    charts.batches.update(
      batchCounts(first, latestTotals).map((b) => ({ label: String(b.size), value: b.count })),
      latestTotals ? `Batch sizes the model ran in the last ${Math.round((now - samples[0].t) / 1000)} s (since start: ${latestTotals.execution_count} executions).` : "",
    );
    if (metricsState === "on") {
      charts.failures.update(
        FAILURE_REASONS.map((reason) => ({ name: reason, points: reasons[reason] })),
        "REJECTED: full queue or timeout; CANCELED: the client went away; BACKEND: the model failed; OTHER: invalid requests.",
      );
    } else {
      charts.failures.update(
        [{ name: "all reasons", points: points.failed }],
        `By reason needs GET /v2/metrics (${metricsError || "not available"}); this is every failure from the statistics.`,
      );
    }
    status.textContent = latestTotals
      ? `${model}${version ? ` version ${version}` : ""}: updated every second.`
      : model
        ? `${model} has no statistics: it is not ready (see Models).`
        : "No model is ready.";

    // Every model, last second.
    const last = samples[samples.length - 1];
    const previous = samples.length > 1 ? samples[samples.length - 2] : null;
    const rows = [...modelsOf(last.stats).keys()].map((name) => {
      const iv = previous
        ? interval(modelTotals(previous.stats, name), modelTotals(last.stats, name), (last.t - previous.t) / 1000)
        : null;
      return h(
        "tr",
        { "data-model": name },
        h("th", { scope: "row" }, h("a", { href: `#/charts/${encodeURIComponent(name)}` }, name)),
        h("td", {}, iv ? formatNumber(iv.requestsPerSecond) : "–"),
        h("td", {}, iv && iv.meanMs !== null ? formatNumber(iv.meanMs) : "–"),
        h("td", {}, iv ? formatNumber(iv.failedPerSecond) : "–"),
      );
    });
    replace(overview, table("(every model)", ["Model", "Requests/s", "Mean latency (ms)", "Failures/s"], rows));
  }

  async function poll() {
    const wantMetrics = metricsState !== "off";
    const [stats, metrics] = await Promise.allSettled([
      api("v2/models/stats", { signal }),
      wantMetrics ? api("v2/metrics", { signal }) : Promise.resolve(null),
    ]);
    if (signal.aborted) return;
    if (stats.status === "rejected") {
      replace(problems, errorBox(stats.reason));
      return;
    }
    const parts = [];
    let parsed = null;
    if (metrics.status === "fulfilled" && metrics.value !== null) {
      metricsState = "on";
      parsed = parseMetrics(metrics.value);
    } else if (metrics.status === "rejected") {
      const error = metrics.reason;
      metricsState = error instanceof ApiError && error.status === 404 ? "off" : "refused";
      metricsError = `GET /v2/metrics: ${error.status || ""} ${error.message}`;
      if (metricsState === "refused") parts.push(errorBox(error));
    }
    replace(problems, parts);
    samples.push({ t: performance.now(), stats: stats.value, metrics: parsed });
    while (samples.length > WINDOW_S + 1) samples.shift();
    fillModels(stats.value);
    fillVersions();
    draw();
  }

  every(POLL_MS, poll, signal);
}
