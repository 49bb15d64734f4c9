// Building the page: a small element factory, and helpers every page shares.

/**
 * h("p", {class: "note"}, "text", child) → <p class="note">text…</p>
 * Attributes: "class", "for", "data-*", "aria-*", boolean values (true: present, false/null:
 * absent), "on<event>": a listener. Children: strings, numbers, nodes, arrays, null (skipped).
 */
export function h(tag, attrs = {}, ...children) {
  const node = tag.includes(":")
    ? document.createElementNS("http://www.w3.org/2000/svg", tag.split(":")[1])
    : document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") {
      node.addEventListener(key.slice(2), value);
    } else if (value === true) {
      node.setAttribute(key, "");
    } else {
      node.setAttribute(key, String(value));
    }
  }
  append(node, children);
  return node;
}

/** SVG elements: svg("path", {d: "M0 0"}). */
export function svg(tag, attrs = {}, ...children) {
  return h(`svg:${tag}`, attrs, ...children);
}

export function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** Replace every child of ``node``. */
export function replace(node, ...children) {
  node.replaceChildren();
  return append(node, children);
}

let announcer = null;

/** Say ``text`` to screen readers (a polite live region), e.g. "mlp loaded". */
export function announce(text) {
  announcer = announcer || document.getElementById("announce");
  if (!announcer) return;
  announcer.textContent = "";
  // A new text node after a tick, so that repeating the same message is announced again.
  setTimeout(() => {
    announcer.textContent = text;
  }, 30);
}

/** An error where it happened: a role=alert paragraph naming the call and the server's words. */
export function errorBox(error, hint = null) {
  const what = error && error.call ? `${error.call}: ` : "";
  const status = error && error.status ? `${error.status} ` : "";
  const message = error && error.message ? error.message : String(error);
  return h(
    "div",
    { class: "error", role: "alert" },
    h("p", {}, h("strong", {}, `${what}${status}`), message),
    hint || (error && error.hint ? h("p", { class: "hint" }, error.hint) : null),
  );
}

/** A section with a heading of its own, its id derived from ``slug``; ``wide``: it spans two
 * columns of a grid where there is room. */
export function section(title, slug, ...children) {
  return card(title, slug, false, children);
}

export function wideSection(title, slug, ...children) {
  return card(title, slug, true, children);
}

function card(title, slug, wide, children) {
  const id = `section-${slug}`;
  return h(
    "section",
    { class: wide ? "card wide" : "card", "aria-labelledby": id, "data-section": slug },
    h("h2", { id }, title),
    ...children,
  );
}

/** <dl> of [term, value] pairs. */
export function facts(pairs) {
  return h(
    "dl",
    { class: "facts" },
    pairs.map(([term, value]) => [h("dt", {}, term), h("dd", {}, value)]),
  );
}

/** A table that scrolls sideways on narrow screens instead of overflowing the page. */
export function table(caption, headers, rows, attrs = {}) {
  return h(
    "div",
    { class: "table-wrap", tabindex: "0", role: "region", "aria-label": caption },
    h(
      "table",
      attrs,
      h("caption", { class: caption.startsWith("(") ? "visually-hidden" : null }, caption),
      h("thead", {}, h("tr", {}, headers.map((name) => h("th", { scope: "col" }, name)))),
      h("tbody", {}, rows),
    ),
  );
}

export function formatDuration(seconds) {
  let rest = Math.max(0, Math.floor(seconds));
  const parts = [];
  for (const [unit, size] of [["d", 86400], ["h", 3600], ["min", 60]]) {
    if (rest >= size || parts.length) {
      parts.push(`${Math.floor(rest / size)} ${unit}`);
      rest %= size;
    }
  }
  parts.push(`${rest} s`);
  return parts.join(" ");
}

export function formatBytes(bytes) {
  if (!Number.isFinite(bytes)) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value.toFixed(unit ? 1 : 0)} ${units[unit]}`;
}

/** A number for people: up to 3 significant digits past the integer part. */
export function formatNumber(value, digits = 3) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  if (Math.abs(value) >= 1000) return Math.round(value).toLocaleString("en-US");
  return Number(value.toPrecision(digits)).toString();
}
