// Every model and version of the repository index with its state and reason; a filter; load,
// reload and unload in explicit mode (after confirmation), disabled with the reason otherwise.

import { api, path } from "../api.js";
import { h, replace, errorBox, announce } from "../dom.js";

const REFRESH_MS = 5000; // the index scans the repositories: not every second

function groupByModel(index) {
  const models = new Map();
  for (const entry of index) {
    if (!models.has(entry.name)) models.set(entry.name, []);
    if (entry.version !== undefined || entry.state !== undefined) models.get(entry.name).push(entry);
  }
  return models;
}

function stateBadge(state) {
  const kind = state === "READY" ? "ok" : state === "UNAVAILABLE" ? "bad" : "busy";
  return h("span", { class: `badge ${kind}`, "data-state": state }, state);
}

export async function modelsPage(main, params, { signal, every, confirmAction }) {
  const heading = h("h1", { tabindex: "-1" }, "Models");
  const filter = h("input", {
    id: "model-filter",
    type: "search",
    placeholder: "name, state or reason",
    autocomplete: "off",
    "aria-describedby": "filter-count",
  });
  const count = h("p", { id: "filter-count", class: "muted", "aria-live": "polite" });
  const controlNote = h("p", { id: "control-note", class: "note", hidden: true });
  const list = h("div", { class: "model-list", "data-part": "models" }, h("p", { class: "muted" }, "Loading…"));
  main.append(
    heading,
    h("div", { class: "toolbar" }, h("label", { for: "model-filter" }, "Filter"), filter),
    count,
    controlNote,
    list,
  );

  let info = null;
  let index = null;
  let busy = new Set(); // models with an action under way
  const messages = new Map(); // model → node shown in its card (outcome of the last action)
  let changes = 0; // counts updates of ``messages``

  try {
    info = await api("v2/server/info", { signal });
  } catch (error) {
    if (error.name === "AbortError") return;
    // Without it the buttons cannot know the control mode: they stay enabled, and the
    // server's answer says why when an action is refused.
    controlNote.hidden = false;
    replace(controlNote, errorBox(error));
  }
  const allowed = info ? info.load_unload : true;
  if (info && !allowed) {
    controlNote.hidden = false;
    replace(controlNote, `Load and unload are off: ${info.load_unload_reason}.`);
  }

  async function act(name, action) {
    const verbs = { load: "Load", reload: "Reload", unload: "Unload" };
    const texts = {
      load: `Load model '${name}' from the repository?`,
      reload: `Reload model '${name}'? Its new versions load while the old ones keep serving; then the old ones retire.`,
      unload: `Unload model '${name}'? Requests in flight finish; new requests for it fail until it is loaded again.`,
    };
    const ok = await confirmAction(`${verbs[action]} ${name}`, texts[action], verbs[action]);
    if (!ok) return;
    busy.add(name);
    changes += 1;
    messages.set(name, h("p", { class: "muted", role: "status" }, `${{ load: "Loading", reload: "Reloading", unload: "Unloading" }[action]}…`));
    render();
    const endpoint = action === "unload" ? "unload" : "load";
    try {
      await api(path`v2/repository/models/${name}/${endpoint}`, { body: {}, signal });
      const done = action === "unload" ? "unloaded" : "loaded";
      changes += 1;
      messages.set(name, h("p", { class: "success", role: "status" }, `${name} ${done}.`));
      announce(`${name} ${done}`);
    } catch (error) {
      if (error.name === "AbortError") return;
      changes += 1;
      messages.set(name, errorBox(error));
      announce(`${verbs[action]} ${name} failed`);
    } finally {
      busy.delete(name);
    }
    await refresh();
  }

  function actions(name, entries) {
    // Serving (or on its way): reload and unload. Unloaded, failed or never loaded: load; a
    // failed model may also be unloaded, which forgets it.
    const serving = entries.some((e) => ["READY", "LOADING", "UNLOADING"].includes(e.state));
    const unloaded = entries.length === 0 || entries.every((e) => e.reason === "unloaded");
    const reason = allowed ? null : info.load_unload_reason;
    const button = (action, label) =>
      h(
        "button",
        {
          type: "button",
          "data-action": action,
          "data-model": name,
          disabled: !allowed || busy.has(name),
          "aria-describedby": allowed ? null : "control-note",
          title: reason,
          onclick: () => act(name, action),
        },
        label,
      );
    return h(
      "div",
      { class: "actions" },
      serving ? button("reload", "Reload") : button("load", "Load"),
      unloaded ? null : button("unload", "Unload"),
    );
  }

  let shown = "";

  function render(force = true) {
    if (!index) return;
    // Redrawn only when something changed, and the focused button keeps the focus.
    const signature = JSON.stringify([index, filter.value, [...busy], changes]);
    if (!force && signature === shown) return;
    shown = signature;
    const focused = document.activeElement;
    const focusKey = focused && focused.dataset && focused.dataset.action ? [focused.dataset.action, focused.dataset.model] : null;
    const needle = filter.value.trim().toLowerCase();
    const models = groupByModel(index);
    const cards = [];
    for (const [name, entries] of models) {
      const text = [name, ...entries.flatMap((e) => [e.state, e.reason])].join(" ").toLowerCase();
      if (needle && !text.includes(needle)) continue;
      const id = `model-${cards.length}`;
      const rows = entries.length
        ? entries.map((e) =>
            h(
              "tr",
              { "data-version": e.version || "" },
              h("td", {}, e.version ? h("a", { href: `#/models/${encodeURIComponent(name)}/${encodeURIComponent(e.version)}` }, e.version) : "–"),
              h("td", {}, stateBadge(e.state)),
              h("td", { class: "reason" }, e.reason || ""),
            ),
          )
        : [h("tr", {}, h("td", { colspan: "3", class: "muted" }, "Not loaded (explicit mode loads it on request)."))];
      cards.push(
        h(
          "article",
          { class: "card model", "aria-labelledby": id, "data-model": name },
          h(
            "div",
            { class: "card-head" },
            h("h2", { id }, h("a", { href: `#/models/${encodeURIComponent(name)}` }, name)),
            actions(name, entries),
          ),
          h(
            "div",
            { class: "table-wrap", role: "region", tabindex: "0", "aria-label": `${name} versions` },
            h(
              "table",
              {},
              h("thead", {}, h("tr", {}, ["Version", "State", "Reason"].map((t) => h("th", { scope: "col" }, t)))),
              h("tbody", {}, rows),
            ),
          ),
          messages.get(name) || null,
        ),
      );
    }
    replace(list, cards.length ? cards : h("p", { class: "muted" }, needle ? "No model matches the filter." : "The repository index is empty."));
    count.textContent = `${cards.length} of ${models.size} models shown`;
    if (focusKey) {
      const again = [...list.querySelectorAll("button[data-action]")].find(
        (b) => b.dataset.action === focusKey[0] && b.dataset.model === focusKey[1],
      );
      if (again && !again.disabled) again.focus();
      else if (again) list.querySelector(`[data-model="${CSS.escape(focusKey[1])}"] h2 a`)?.focus();
    }
  }

  async function refresh() {
    try {
      index = await api("v2/repository/index", { body: {}, signal });
      render(false);
    } catch (error) {
      if (error.name === "AbortError") return;
      replace(list, errorBox(error));
    }
  }

  filter.addEventListener("input", () => render());
  every(REFRESH_MS, refresh, signal);
}
