// Try a model: a form made from its metadata (each input's datatype and shape, -1 dimensions
// chosen here), with random, typed or file input; or a request body of your own (typed JSON or a
// file). The answer is shown as tables, with the round trip timed in this browser.

import { api, path } from "../api.js";
import { h, replace, errorBox, section, announce, formatNumber } from "../dom.js";
import {
  TYPES,
  InputError,
  elementCount,
  parseValues,
  randomValues,
  generator,
  buildRequest,
  rawByteSize,
  outputTable,
  jsonCapable,
} from "../tensors.js";

let formCount = 0;

function inputFieldset(tensor, index) {
  const id = `in-${formCount}-${index}`;
  const dims = tensor.shape.map((dim, d) => {
    if (dim >= 0) return h("span", { class: "dim fixed", "data-dim": d }, String(dim));
    return h("input", {
      type: "number",
      min: "0",
      value: "1",
      class: "dim",
      "data-dim": d,
      "aria-label": `${tensor.name} dimension ${d} (variable)`,
      required: true,
    });
  });
  const sources = ["random", "values", "file"].map((value) =>
    h(
      "label",
      { class: "choice" },
      h("input", { type: "radio", name: `${id}-source`, value, checked: value === "random" }),
      { random: "Random", values: "Values", file: "File" }[value],
    ),
  );
  const typeInfo = TYPES[tensor.datatype];
  const hint =
    typeInfo.kind === "bytes"
      ? "One string per line, or a JSON array of strings."
      : "Numbers separated by commas, spaces or lines, or a JSON array (nested or flat), in row-major order.";
  const values = h("textarea", {
    id: `${id}-values`,
    rows: "3",
    spellcheck: "false",
    "aria-describedby": `${id}-values-hint`,
    "data-role": "values",
  });
  const file = h("input", { id: `${id}-file`, type: "file", "aria-describedby": `${id}-file-hint`, "data-role": "file" });
  const fieldset = h(
    "fieldset",
    { class: "tensor", "data-input": tensor.name, "data-datatype": tensor.datatype },
    h("legend", {}, h("code", {}, tensor.name), ` ${tensor.datatype} [${tensor.shape.join(", ")}]`),
    h("div", { class: "shape", role: "group", "aria-label": `${tensor.name} shape` }, "Shape [", dims.flatMap((d, i) => (i ? [", ", d] : [d])), "]"),
    h("div", { class: "choices", role: "radiogroup", "aria-label": `${tensor.name} data` }, sources),
    h(
      "div",
      { class: "source", "data-source": "values", hidden: true },
      h("label", { for: `${id}-values` }, "Values"),
      values,
      h("p", { id: `${id}-values-hint`, class: "hint" }, hint),
    ),
    h(
      "div",
      { class: "source", "data-source": "file", hidden: true },
      h("label", { for: `${id}-file` }, "File"),
      file,
      h(
        "p",
        { id: `${id}-file-hint`, class: "hint" },
        typeInfo.kind === "bytes"
          ? "A .json file holding an array of strings."
          : `A .json file holding the values, or any other file: the tensor's raw little-endian bytes (${typeInfo.size} bytes per element).`,
      ),
    ),
    jsonCapable(tensor.datatype) ? null : h("p", { class: "hint" }, `${tensor.datatype} travels as binary data (the server takes it only so).`),
    h("p", { class: "field-error", role: "alert", hidden: true }),
  );
  fieldset.addEventListener("change", (event) => {
    if (event.target.type === "radio") {
      for (const box of fieldset.querySelectorAll(".source")) box.hidden = box.dataset.source !== event.target.value;
    }
  });
  return fieldset;
}

async function readInput(fieldset, seed) {
  const name = fieldset.dataset.input;
  const datatype = fieldset.dataset.datatype;
  const shape = [...fieldset.querySelectorAll(".dim")].map((d) => {
    const value = d.tagName === "INPUT" ? d.value.trim() : d.textContent;
    if (!/^\d+$/.test(value)) throw new InputError(`input '${name}': dimension ${d.dataset.dim} must be a whole number ≥ 0`);
    return Number(value);
  });
  const count = elementCount(shape);
  const source = fieldset.querySelector("input[type=radio]:checked").value;
  if (source === "random") {
    return { name, datatype, shape, values: randomValues(datatype, count, generator(seed)) };
  }
  if (source === "values") {
    const text = fieldset.querySelector("[data-role=values]").value;
    return { name, datatype, shape, values: parseValues(text, datatype, name, count) };
  }
  const file = fieldset.querySelector("[data-role=file]").files[0];
  if (!file) throw new InputError(`input '${name}': choose a file`);
  if (file.name.toLowerCase().endsWith(".json")) {
    return { name, datatype, shape, values: parseValues(await file.text(), datatype, name, count) };
  }
  const expected = rawByteSize(datatype, count);
  if (expected === null) throw new InputError(`input '${name}': BYTES data comes as a .json file`);
  const bytes = new Uint8Array(await file.arrayBuffer());
  if (bytes.length !== expected) {
    throw new InputError(`input '${name}': the file has ${bytes.length} bytes; shape [${shape.join(", ")}] of ${datatype} needs ${expected}`);
  }
  return { name, datatype, shape, bytes };
}

function showResult(box, result, millis, sentBytes) {
  const outputs = result.outputs || [];
  replace(
    box,
    h(
      "p",
      { class: "timing", "data-field": "timing" },
      `Answered in ${formatNumber(millis)} ms`,
      h("span", { class: "muted" }, ` (round trip measured in this browser; ${sentBytes} bytes sent). `),
      `Model ${result.model_name}, version ${result.model_version || "–"}.`,
    ),
    outputs.map((output) => {
      const layout = outputTable(output);
      const headers = ["Index", ...Array.from({ length: layout.columns }, (_, i) => String(i))];
      return h(
        "div",
        { class: "output", "data-output": output.name },
        h("h3", {}, h("code", {}, output.name), ` ${output.datatype} [${output.shape.join(", ")}]`),
        h(
          "div",
          { class: "table-wrap", role: "region", tabindex: "0", "aria-label": `${output.name} values` },
          h(
            "table",
            { class: "numbers" },
            h("thead", {}, h("tr", {}, headers.map((t) => h("th", { scope: "col" }, t)))),
            h(
              "tbody",
              {},
              layout.rows.map((row) =>
                h(
                  "tr",
                  {},
                  h("th", { scope: "row" }, row.index),
                  row.values.map((v) =>
                    h("td", { "data-value": String(v) }, typeof v === "number" ? formatNumber(v, 6) : String(v)),
                  ),
                ),
              ),
            ),
          ),
        ),
        layout.shown < layout.total ? h("p", { class: "muted" }, `First ${layout.shown} of ${layout.total} rows shown; all of them are in the JSON below.`) : null,
      );
    }),
    h("details", {}, h("summary", {}, "The answer as JSON"), h("pre", { class: "code", "data-format": "response" }, JSON.stringify(result, null, 2))),
  );
}

async function send(name, body, headerLength, resultBox, signal) {
  const headers = {};
  if (headerLength !== null) {
    headers["Inference-Header-Content-Length"] = String(headerLength);
    headers["Content-Type"] = "application/octet-stream";
  } else {
    headers["Content-Type"] = "application/json";
  }
  replace(resultBox, h("p", { class: "muted", role: "status" }, "Sending…"));
  const started = performance.now();
  try {
    const response = await api(path`v2/models/${name}/infer`, { method: "POST", body, headers, raw: true, signal });
    const text = await response.text();
    const millis = performance.now() - started;
    showResult(resultBox, JSON.parse(text), millis, typeof body === "string" ? new TextEncoder().encode(body).length : body.length);
    announce(`Answer from ${name} in ${formatNumber(millis)} milliseconds`);
  } catch (error) {
    if (error.name === "AbortError") return;
    replace(resultBox, errorBox(error));
    announce(`The request to ${name} failed`);
  }
}

export async function tryPage(main, [initial], { signal }) {
  main.append(h("h1", { tabindex: "-1" }, "Try a model"));
  const picker = h("select", { id: "try-model" });
  const formBox = h("div", { "data-part": "try-form" });
  const resultBox = h("div", { "data-part": "try-result", "aria-live": "polite" }, h("p", { class: "muted" }, "Send a request to see the answer here."));
  main.append(h("div", { class: "toolbar" }, h("label", { for: "try-model" }, "Model"), picker), formBox);

  let index;
  try {
    index = await api("v2/repository/index", { body: { ready: true }, signal });
  } catch (error) {
    if (error.name === "AbortError") return;
    main.append(errorBox(error));
    return;
  }
  const names = [...new Set(index.map((e) => e.name))];
  if (!names.length) {
    replace(formBox, h("p", {}, "No model is ready. Load one on the ", h("a", { href: "#/models" }, "Models"), " page."));
    return;
  }
  const model = initial && names.includes(initial) ? initial : initial ? null : names[0];
  replace(picker, (model ? names : ["", ...names]).map((n) => h("option", { value: n }, n || "(choose)")));
  picker.value = model || "";
  picker.addEventListener("change", () => {
    window.location.hash = `#/try/${encodeURIComponent(picker.value)}`;
  });
  if (!model) {
    replace(formBox, errorBox({ message: `model '${initial}' is not ready; choose one of the ready models.` }));
    return;
  }

  let metadata;
  try {
    metadata = await api(path`v2/models/${model}`, { signal });
  } catch (error) {
    if (error.name === "AbortError") return;
    replace(formBox, errorBox(error));
    return;
  }
  formCount += 1;
  const fieldsets = metadata.inputs.map((tensor, i) => inputFieldset(tensor, i));
  const outputChecks = metadata.outputs.map((tensor) =>
    h("label", { class: "choice" }, h("input", { type: "checkbox", checked: true, value: tensor.name, "data-role": "output" }), h("code", {}, tensor.name), ` ${tensor.datatype} [${tensor.shape.join(", ")}]`),
  );
  const seedInput = h("input", { id: "try-seed", type: "number", value: "1", min: "0", class: "dim" });
  const preview = h("pre", { class: "code", "data-format": "request" });
  const formError = h("div", { "data-part": "form-error" });
  const form = h(
    "form",
    { class: "try", novalidate: true },
    fieldsets,
    h("fieldset", {}, h("legend", {}, "Outputs"), h("div", { class: "choices" }, outputChecks)),
    h("div", { class: "toolbar" }, h("label", { for: "try-seed" }, "Random seed"), seedInput, h("button", { type: "submit", class: "primary" }, "Send")),
    formError,
    h("details", {}, h("summary", {}, "The request sent"), preview),
  );
  const ownBody = h("textarea", { id: "own-body", rows: "8", spellcheck: "false", "aria-describedby": "own-hint" });
  const ownFile = h("input", { id: "own-file", type: "file", accept: ".json,application/json" });
  const ownError = h("div", { "data-part": "own-error" });
  const own = h(
    "form",
    { class: "try", novalidate: true },
    h("label", { for: "own-body" }, "Request body (JSON)"),
    ownBody,
    h("p", { id: "own-hint", class: "hint" }, "A v2 inference request: {\"inputs\": [{\"name\", \"shape\", \"datatype\", \"data\"}], \"outputs\": [...]}. The form's request is copied here when you send it."),
    h("label", { for: "own-file" }, "Or a file holding one"),
    ownFile,
    h("div", { class: "toolbar" }, h("button", { type: "submit", class: "primary" }, "Send this body")),
    ownError,
  );
  ownFile.addEventListener("change", async () => {
    if (ownFile.files[0]) ownBody.value = await ownFile.files[0].text();
  });
  replace(
    formBox,
    section(`Inputs of ${model}`, "try-inputs", form),
    section("Answer", "try-answer", resultBox),
    section("Or send your own request", "try-own", own),
  );

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    replace(formError);
    for (const box of form.querySelectorAll(".field-error")) box.hidden = true;
    const seed = Number(seedInput.value) || 0;
    const inputs = [];
    for (const [i, fieldset] of fieldsets.entries()) {
      try {
        inputs.push(await readInput(fieldset, seed + i));
      } catch (error) {
        const box = fieldset.querySelector(".field-error");
        box.textContent = error.message;
        box.hidden = false;
        fieldset.querySelector("input, textarea")?.focus();
        return;
      }
    }
    const outputs = outputChecks.map((label) => label.querySelector("input")).filter((c) => c.checked).map((c) => c.value);
    const request = buildRequest(inputs, outputs);
    const shown = JSON.stringify(request.header, null, 2);
    preview.textContent = request.headerLength === null ? shown : `${shown}\n(+ ${request.body.length - request.headerLength} bytes of binary tensor data)`;
    if (request.headerLength === null) ownBody.value = shown;
    await send(model, request.body, request.headerLength, resultBox, signal);
  });

  own.addEventListener("submit", async (event) => {
    event.preventDefault();
    replace(ownError);
    try {
      JSON.parse(ownBody.value);
    } catch (error) {
      replace(ownError, errorBox({ message: `The body is not valid JSON: ${error.message}` }));
      ownBody.focus();
      return;
    }
    await send(model, ownBody.value, null, resultBox, signal);
  });
}
