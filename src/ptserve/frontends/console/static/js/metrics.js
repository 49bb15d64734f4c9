// Prometheus text format (0.0.4) → samples. Pure: no DOM.

function parseLabels(text, start) {
  // text[start] is "{"; returns [labels, index after "}"]
  const labels = {};
  let i = start + 1;
  while (i < text.length) {
    while (text[i] === " " || text[i] === ",") i += 1;
    if (text[i] === "}") return [labels, i + 1];
    const eq = text.indexOf("=", i);
    if (eq < 0) throw new Error(`bad label set: ${text}`);
    const name = text.slice(i, eq).trim();
    i = eq + 1;
    if (text[i] !== '"') throw new Error(`bad label value: ${text}`);
    i += 1;
    let value = "";
    while (i < text.length && text[i] !== '"') {
      if (text[i] === "\\") {
        const next = text[i + 1];
        value += next === "n" ? "\n" : next;
        i += 2;
      } else {
        value += text[i];
        i += 1;
      }
    }
    labels[name] = value;
    i += 1;
  }
  throw new Error(`unterminated label set: ${text}`);
}

/** Every sample of a Prometheus text: [{name, labels: {…}, value: Number}]. */
export function parseMetrics(text) {
  const samples = [];
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (!line || line.startsWith("#")) continue;
    const brace = line.indexOf("{");
    const space = line.indexOf(" ");
    let name;
    let labels = {};
    let rest;
    if (brace >= 0 && (space < 0 || brace < space)) {
      name = line.slice(0, brace);
      const [parsed, end] = parseLabels(line, brace);
      labels = parsed;
      rest = line.slice(end).trim();
    } else {
      name = line.slice(0, space);
      rest = line.slice(space + 1).trim();
    }
    const valueText = rest.split(/\s+/)[0];
    const value = valueText === "+Inf" ? Infinity : valueText === "-Inf" ? -Infinity : Number(valueText);
    samples.push({ name, labels, value });
  }
  return samples;
}

/** The samples called ``name`` whose labels include every pair of ``match``. */
export function select(samples, name, match = {}) {
  return samples.filter(
    (sample) => sample.name === name && Object.entries(match).every(([k, v]) => sample.labels[k] === v),
  );
}

/** The sum of the samples called ``name`` matching ``match`` (null when there are none). */
export function total(samples, name, match = {}) {
  const found = select(samples, name, match);
  return found.length ? found.reduce((sum, sample) => sum + sample.value, 0) : null;
}
