// One model: its versions and states, metadata, instance groups, batching, parameters, and the
// configuration as Triton's JSON and as config.pbtxt text.

import { api, path } from "../api.js";
import { h, replace, section, wideSection, facts, errorBox, table } from "../dom.js";
import { toPbtxt } from "../pbtxt.js";

let schemaPromise = null;

function configSchema(signal) {
  if (!schemaPromise) {
    schemaPromise = api("console/model-config-schema.json", { signal }).catch((error) => {
      schemaPromise = null;
      throw error;
    });
  }
  return schemaPromise;
}

/** Accessible tabs: arrow keys move between them, each controls its panel. */
function tabs(label, entries) {
  const list = h("div", { role: "tablist", "aria-label": label, class: "tabs" });
  const panels = [];
  const buttons = entries.map(([name, content], index) => {
    const id = `tab-${name.replace(/\W/g, "")}`;
    const panel = h(
      "div",
      { role: "tabpanel", id: `${id}-panel`, "aria-labelledby": id, tabindex: "0", hidden: index !== 0 },
      content,
    );
    panels.push(panel);
    return h(
      "button",
      {
        type: "button",
        role: "tab",
        id,
        "aria-controls": `${id}-panel`,
        "aria-selected": index === 0 ? "true" : "false",
        tabindex: index === 0 ? "0" : "-1",
      },
      name,
    );
  });
  const select = (index) => {
    buttons.forEach((button, i) => {
      button.setAttribute("aria-selected", i === index ? "true" : "false");
      button.tabIndex = i === index ? 0 : -1;
      panels[i].hidden = i !== index;
    });
    buttons[index].focus();
  };
  buttons.forEach((button, index) => {
    button.addEventListener("click", () => select(index));
    button.addEventListener("keydown", (event) => {
      const moves = { ArrowRight: 1, ArrowLeft: -1, Home: -index, End: buttons.length - 1 - index };
      if (event.key in moves) {
        event.preventDefault();
        select((index + moves[event.key] + buttons.length) % buttons.length);
      }
    });
    list.append(button);
  });
  return h("div", {}, list, panels);
}

function code(text, slug) {
  const pre = h("pre", { class: "code", "data-format": slug }, h("code", {}, text));
  const copy = h("button", { type: "button", class: "small" }, "Copy");
  copy.addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(text);
      copy.textContent = "Copied";
    } catch {
      copy.textContent = "Copy failed: select the text";
    }
    setTimeout(() => {
      copy.textContent = "Copy";
    }, 2000);
  });
  return h("div", { class: "code-block" }, copy, pre);
}

function tensorsTable(caption, tensors, configTensors) {
  const byName = new Map((configTensors || []).map((t) => [t.name, t]));
  return table(
    caption,
    ["Name", "Datatype", "Shape", "Config dims", "Reshape"],
    tensors.map((t) => {
      const c = byName.get(t.name) || {};
      return h(
        "tr",
        {},
        h("th", { scope: "row" }, t.name),
        h("td", {}, t.datatype),
        h("td", {}, `[${t.shape.join(", ")}]`),
        h("td", {}, c.dims ? `[${c.dims.join(", ")}]` : "–"),
        h("td", {}, c.reshape ? `[${(c.reshape.shape || []).join(", ")}]` : "–"),
      );
    }),
  );
}

function batching(config) {
  const parts = [
    facts([
      ["max_batch_size", String(config.max_batch_size)],
      ["Batch dimension", config.max_batch_size > 0 ? "dim 0 of every tensor" : "none: each request is one execution"],
      ["Scheduler", config.sequence_batching ? "sequence batcher" : config.dynamic_batching ? "dynamic batcher" : "default (each request alone)"],
    ]),
  ];
  const dynamic = config.dynamic_batching;
  if (dynamic) {
    const policy = dynamic.default_queue_policy || {};
    parts.push(
      h("h3", {}, "Dynamic batching"),
      facts([
        ["Preferred batch sizes", (dynamic.preferred_batch_size || []).join(", ") || "–"],
        ["Max queue delay", `${dynamic.max_queue_delay_microseconds || 0} µs`],
        ["Preserve ordering", String(Boolean(dynamic.preserve_ordering))],
        ["Priority levels", String(dynamic.priority_levels || 0)],
        ["Max queue size", policy.max_queue_size ? String(policy.max_queue_size) : "no limit"],
        ["Queue timeout", policy.default_timeout_microseconds ? `${policy.default_timeout_microseconds} µs (${policy.timeout_action || "REJECT"})` : "none"],
      ]),
    );
  }
  const sequence = config.sequence_batching;
  if (sequence) {
    const strategy = sequence.oldest ? "oldest" : "direct";
    parts.push(
      h("h3", {}, "Sequence batching"),
      facts([
        ["Strategy", strategy],
        ["Max sequence idle", `${sequence.max_sequence_idle_microseconds || 0} µs`],
        ["Control inputs", (sequence.control_input || []).map((c) => c.name).join(", ") || "–"],
        ["State", (sequence.state || []).map((s) => s.input_name).join(", ") || "–"],
      ]),
    );
  }
  return parts;
}

export async function modelPage(main, [name, version], { signal }) {
  const label = version ? `${name}, version ${version}` : name;
  main.append(
    h("p", { class: "crumbs" }, h("a", { href: "#/models" }, "Models"), " / ", name),
    h("h1", { tabindex: "-1" }, label),
    h(
      "p",
      { class: "links" },
      h("a", { href: `#/charts/${encodeURIComponent(name)}` }, "Live charts"),
      " · ",
      h("a", { href: `#/try/${encodeURIComponent(name)}` }, "Try it"),
    ),
  );
  const versionsBox = h("div", { "data-part": "versions" }, h("p", { class: "muted" }, "Loading…"));
  const metaBox = h("div", { "data-part": "metadata" });
  const groupsBox = h("div", { "data-part": "instance-groups" });
  const batchBox = h("div", { "data-part": "batching" });
  const configBox = h("div", { "data-part": "config" });
  main.append(
    h(
      "div",
      { class: "grid" },
      section("Versions", "versions", versionsBox),
      wideSection("Inputs and outputs", "io", metaBox),
      section("Instance groups", "instances", groupsBox),
      section("Batching", "batching", batchBox),
    ),
    section("Configuration", "config", configBox),
  );
  const suffix = version ? path`/versions/${version}` : "";
  const [index, metadata, config, schema] = await Promise.allSettled([
    api("v2/repository/index", { body: {}, signal }),
    api(path`v2/models/${name}` + suffix, { signal }),
    api(path`v2/models/${name}` + suffix + "/config", { signal }),
    configSchema(signal),
  ]);
  if (signal.aborted) return;

  if (index.status === "fulfilled") {
    const entries = index.value.filter((e) => e.name === name && (!version || e.version === version));
    replace(
      versionsBox,
      entries.length
        ? table(
            "(versions)",
            ["Version", "State", "Reason"],
            entries.map((e) =>
              h(
                "tr",
                {},
                h("td", {}, e.version || "–"),
                h("td", {}, e.state ? h("span", { class: `badge ${e.state === "READY" ? "ok" : "bad"}` }, e.state) : "not loaded"),
                h("td", { class: "reason" }, e.reason || ""),
              ),
            ),
          )
        : h("p", {}, "The repository index does not list this model."),
    );
  } else {
    replace(versionsBox, errorBox(index.reason));
  }

  if (metadata.status === "fulfilled") {
    const m = metadata.value;
    const c = config.status === "fulfilled" ? config.value : {};
    replace(
      metaBox,
      facts([
        ["Platform", m.platform],
        ["Backend", c.backend || "–"],
        ["Ready versions", m.versions.join(", ") || "none"],
      ]),
      tensorsTable("Inputs", m.inputs, c.input),
      tensorsTable("Outputs", m.outputs, c.output),
    );
  } else {
    replace(metaBox, errorBox(metadata.reason));
  }

  if (config.status === "fulfilled") {
    const c = config.value;
    replace(
      groupsBox,
      table(
        "(instance groups)",
        ["Name", "Kind", "Count", "GPUs"],
        (c.instance_group || []).map((g) =>
          h(
            "tr",
            {},
            h("td", {}, g.name || "–"),
            h("td", {}, g.kind),
            h("td", {}, String(g.count)),
            h("td", {}, (g.gpus || []).join(", ") || "–"),
          ),
        ),
      ),
    );
    replace(batchBox, batching(c));
    const json = JSON.stringify(c, null, 2);
    let pbtxt;
    if (schema.status === "fulfilled") {
      pbtxt = code(toPbtxt(c, schema.value), "pbtxt");
    } else {
      pbtxt = errorBox(schema.reason);
    }
    const parameters = Object.entries(c.parameters || {});
    replace(
      configBox,
      tabs("Configuration format", [
        ["config.pbtxt", pbtxt],
        ["JSON", code(json, "json")],
      ]),
      parameters.length
        ? [
            h("h3", {}, "Parameters"),
            table(
              "(parameters)",
              ["Key", "Value"],
              parameters.map(([key, value]) => h("tr", {}, h("th", { scope: "row" }, key), h("td", {}, value.string_value))),
            ),
          ]
        : null,
    );
  } else {
    for (const box of [groupsBox, batchBox, configBox]) replace(box, errorBox(config.reason));
  }
}
