// Small SVG charts drawn here: a line chart over the last WINDOW seconds and a bar chart.
// Colours come from CSS (series-0 …) so that both themes apply; each chart carries an
// aria-label with its latest values, and its legend shows them as text.

import { h, svg, formatNumber } from "./dom.js";

const WIDTH = 380;
const HEIGHT = 170;
const PAD = { left: 56, right: 10, top: 12, bottom: 24 };

function niceMax(value) {
  if (!(value > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 2.5, 5, 10]) {
    if (value <= step * power) return step * power;
  }
  return 10 * power;
}

function frame(title, slug, unit) {
  const id = `chart-${slug}`;
  const plot = svg("svg", {
    viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
    role: "img",
    "aria-labelledby": `${id}-title`,
    class: "plot",
  });
  const legend = h("ul", { class: "legend" });
  const note = h("p", { class: "chart-note" });
  const figure = h(
    "figure",
    { class: "chart", id, "data-chart": slug },
    h("figcaption", { id: `${id}-title` }, title, unit ? h("span", { class: "muted" }, ` (${unit})`) : null),
    plot,
    legend,
    note,
  );
  return { figure, plot, legend, note };
}

function tick(value) {
  if (value >= 1e6) return `${formatNumber(value / 1e6)}M`;
  if (value >= 1e4) return `${formatNumber(value / 1e3)}k`;
  return formatNumber(value);
}

function axes(plot, max, xLabels) {
  const inner = HEIGHT - PAD.top - PAD.bottom;
  const group = svg("g", { class: "axes" });
  for (const fraction of [0, 0.5, 1]) {
    const y = PAD.top + inner * (1 - fraction);
    group.append(
      svg("line", { x1: PAD.left, x2: WIDTH - PAD.right, y1: y, y2: y, class: "grid" }),
      svg("text", { x: PAD.left - 6, y: y + 4, "text-anchor": "end", class: "tick" }, tick(max * fraction)),
    );
  }
  xLabels.forEach(([x, text, anchor]) => {
    group.append(svg("text", { x, y: HEIGHT - 6, "text-anchor": anchor, class: "tick" }, text));
  });
  plot.append(group);
}

/**
 * A line chart of series over the last ``window`` seconds.
 * update([{name, points: [{age, value}]}]): age in seconds before now (0 = now), value null
 * for a gap. Each series is drawn in the colour of its index.
 */
export class LineChart {
  constructor(title, slug, unit, window = 60) {
    Object.assign(this, frame(title, slug, unit));
    this.title = title;
    this.unit = unit;
    this.window = window;
  }

  update(series, note = "") {
    const { plot, legend, unit, window } = this;
    plot.replaceChildren();
    let max = 0;
    for (const s of series) for (const p of s.points) if (p.value !== null && p.value > max) max = p.value;
    max = niceMax(max);
    const inner = { w: WIDTH - PAD.left - PAD.right, h: HEIGHT - PAD.top - PAD.bottom };
    axes(plot, max, [
      [PAD.left, `−${window} s`, "start"],
      [WIDTH - PAD.right, "now", "end"],
    ]);
    const summary = [];
    legend.replaceChildren();
    series.forEach((s, index) => {
      let d = "";
      let pen = false;
      for (const p of s.points) {
        if (p.value === null || p.age > window) {
          pen = false;
          continue;
        }
        const x = PAD.left + inner.w * (1 - p.age / window);
        const y = PAD.top + inner.h * (1 - p.value / max);
        d += `${pen ? "L" : "M"}${x.toFixed(1)} ${y.toFixed(1)}`;
        pen = true;
      }
      plot.append(svg("path", { d, class: `line series-${index}`, "data-series": s.name }));
      const latest = [...s.points].reverse().find((p) => p.value !== null && p.age <= window);
      const value = latest ? latest.value : null;
      summary.push(`${s.name} ${value === null ? "no data" : `${formatNumber(value)} ${unit}`}`);
      legend.append(
        h(
          "li",
          { class: `series-${index}`, "data-series": s.name, "data-value": value === null ? "" : String(value) },
          h("span", { class: "swatch", "aria-hidden": "true" }),
          `${s.name}: `,
          h("strong", {}, value === null ? "–" : `${formatNumber(value)} ${unit}`),
        ),
      );
    });
    plot.setAttribute("aria-label", `${this.title}, latest: ${summary.join("; ")}`);
    this.note.textContent = note;
    this.note.hidden = !note;
  }
}

/** Bars: update([{label, value}]). */
export class BarChart {
  constructor(title, slug, unit) {
    Object.assign(this, frame(title, slug, unit));
    this.title = title;
    this.unit = unit;
  }

  update(bars, note = "") {
    const { plot, legend, unit } = this;
    plot.replaceChildren();
    legend.replaceChildren();
    const max = niceMax(Math.max(0, ...bars.map((b) => b.value)));
    const inner = { w: WIDTH - PAD.left - PAD.right, h: HEIGHT - PAD.top - PAD.bottom };
    axes(plot, max, []);
    const slot = bars.length ? inner.w / bars.length : inner.w;
    const width = Math.max(2, Math.min(48, slot * 0.7));
    bars.forEach((bar, index) => {
      const x = PAD.left + slot * index + (slot - width) / 2;
      const height = inner.h * (bar.value / max);
      plot.append(
        svg("rect", {
          x: x.toFixed(1),
          y: (PAD.top + inner.h - height).toFixed(1),
          width: width.toFixed(1),
          height: height.toFixed(1),
          class: "bar",
          "data-label": bar.label,
          "data-value": bar.value,
        }),
        svg("text", { x: (x + width / 2).toFixed(1), y: HEIGHT - 6, "text-anchor": "middle", class: "tick" }, bar.label),
      );
    });
    const summary = bars.map((b) => `${b.label}: ${formatNumber(b.value)}`).join("; ");
    plot.setAttribute("aria-label", `${this.title}: ${summary || "no data"}`);
    legend.append(h("li", {}, summary || "no data yet"));
    this.note.textContent = note;
    this.note.hidden = !note;
  }
}
