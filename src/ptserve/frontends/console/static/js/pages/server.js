// The server: metadata, uptime, liveness and readiness, the models' states, and CPU/GPU memory
// from the metrics (GET /v2/metrics, the metrics port's text on this port).

import { api, status } from "../api.js";
import { h, replace, section, facts, errorBox, formatDuration, formatBytes } from "../dom.js";
import { parseMetrics, select, total } from "../metrics.js";

const REFRESH_MS = 5000; // the index scans the repositories: not every second

function memoryRow(label, used, all) {
  const share = all > 0 ? used / all : 0;
  return h(
    "div",
    { class: "memory" },
    h("span", { class: "memory-label" }, label),
    h("meter", { min: 0, max: 1, value: share.toFixed(4), "aria-label": `${label} in use` }),
    h("span", {}, `${formatBytes(used)} of ${formatBytes(all)} (${(share * 100).toFixed(1)} %)`),
  );
}

export async function serverPage(main, params, { signal, every }) {
  const heading = h("h1", { tabindex: "-1" }, "Server");
  const about = h("div", { "data-part": "about" }, h("p", { class: "muted" }, "Loading…"));
  const health = h("div", { "data-part": "health" });
  const extensions = h("div", { "data-part": "extensions" });
  const modelsBox = h("div", { "data-part": "models" });
  const memory = h("div", { "data-part": "memory" });
  main.append(
    heading,
    h(
      "div",
      { class: "grid" },
      section("About", "about", about),
      section("Health", "health", health),
      section("Models", "model-summary", modelsBox),
      section("Memory", "memory", memory),
      section("Extensions", "extensions", extensions),
    ),
  );

  let uptime = null; // {seconds, at: performance.now()}
  const uptimeText = h("span", { "data-field": "uptime" }, "–");
  const modeText = h("span", { "data-field": "control-mode" }, "–");
  const tick = () => {
    if (uptime) uptimeText.textContent = formatDuration(uptime.seconds + (performance.now() - uptime.at) / 1000);
  };
  const ticker = setInterval(tick, 1000);
  signal.addEventListener("abort", () => clearInterval(ticker));

  try {
    const metadata = await api("v2", { signal });
    replace(
      about,
      facts([
        ["Name", h("span", { "data-field": "name" }, metadata.name)],
        ["Version", h("span", { "data-field": "version" }, metadata.version)],
        ["Uptime", uptimeText],
        ["Model control", modeText],
        ["API", h("a", { href: "../v2/openapi.json" }, "OpenAPI document")],
      ]),
    );
    replace(
      extensions,
      h("ul", { class: "tags", "data-field": "extensions" }, metadata.extensions.map((e) => h("li", {}, e))),
    );
  } catch (error) {
    if (error.name === "AbortError") return;
    replace(about, errorBox(error));
    replace(extensions, errorBox(error));
  }

  every(
    REFRESH_MS,
    async () => {
      // Each part fails on its own: a restricted group shows its error where its data goes.
      const [info, live, ready, index, metrics] = await Promise.allSettled([
        api("v2/server/info", { signal }),
        status("v2/health/live", signal),
        status("v2/health/ready", signal),
        api("v2/repository/index", { body: {}, signal }),
        api("v2/metrics", { signal }),
      ]);
      if (signal.aborted) return;
      if (info.status === "fulfilled") {
        uptime = { seconds: info.value.uptime_seconds, at: performance.now() };
        modeText.textContent = info.value.model_control_mode;
        tick();
      } else {
        uptimeText.textContent = `unknown (${info.reason.status || ""} ${info.reason.message})`;
      }
      if (live.status === "fulfilled" && ready.status === "fulfilled") {
        const word = (code, yes, no) =>
          h("span", { class: `badge ${code === 200 ? "ok" : "bad"}` }, code === 200 ? yes : no);
        replace(
          health,
          facts([
            ["Live", h("span", { "data-field": "live" }, word(live.value, "live", "not live"))],
            ["Ready", h("span", { "data-field": "ready" }, word(ready.value, "ready", "not ready"))],
          ]),
        );
      } else {
        replace(health, errorBox(live.status === "rejected" ? live.reason : ready.reason));
      }
      if (index.status === "fulfilled") {
        const counts = {};
        for (const entry of index.value) {
          const state = entry.state || "NOT LOADED";
          counts[state] = (counts[state] || 0) + 1;
        }
        const models = new Set(index.value.map((e) => e.name));
        replace(
          modelsBox,
          h("p", {}, `${models.size} model${models.size === 1 ? "" : "s"}, ${index.value.length} entr${index.value.length === 1 ? "y" : "ies"} in the repository index.`),
          h(
            "ul",
            { class: "tags" },
            Object.entries(counts).map(([state, n]) => h("li", { class: `state-${state.replace(" ", "-").toLowerCase()}` }, `${state}: ${n}`)),
          ),
          h("p", {}, h("a", { href: "#/models" }, "All models")),
        );
      } else {
        replace(modelsBox, errorBox(index.reason));
      }
      if (metrics.status === "fulfilled") {
        const samples = parseMetrics(metrics.value);
        const rows = [];
        const cpuTotal = total(samples, "nv_cpu_memory_total_bytes");
        const cpuUsed = total(samples, "nv_cpu_memory_used_bytes");
        if (cpuTotal !== null && cpuUsed !== null) rows.push(memoryRow("CPU (host RAM)", cpuUsed, cpuTotal));
        for (const gpu of select(samples, "nv_gpu_memory_total_bytes")) {
          const used = total(samples, "nv_gpu_memory_used_bytes", { gpu_uuid: gpu.labels.gpu_uuid });
          rows.push(memoryRow(`GPU ${gpu.labels.gpu_uuid}`, used || 0, gpu.value));
        }
        if (!select(samples, "nv_gpu_memory_total_bytes").length) {
          rows.push(h("p", { class: "muted" }, "No GPU memory: the server uses no GPU (or --allow-gpu-metrics=false)."));
        }
        if (cpuTotal === null) rows.push(h("p", { class: "muted" }, "No CPU memory: --allow-cpu-metrics=false."));
        replace(memory, rows);
      } else {
        const error = metrics.reason;
        replace(
          memory,
          errorBox(
            error,
            error.status === 404
              ? h("p", { class: "hint" }, "The same numbers are on the metrics port (GET /metrics, --metrics-port) when --allow-metrics is on.")
              : null,
          ),
        );
      }
    },
    signal,
  );
}
