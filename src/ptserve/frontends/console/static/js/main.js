// The console's shell: routing between pages (#/server, #/models, #/models/NAME[/VERSION],
// #/charts[/NAME], #/try[/NAME]), the theme, the connection settings, and polling that stops
// when the page changes or is hidden. Nothing is kept on the server per viewer.

import { restrictedHeader, setRestrictedHeader } from "./api.js";
import { h, replace } from "./dom.js";
import { serverPage } from "./pages/server.js";
import { modelsPage } from "./pages/models.js";
import { modelPage } from "./pages/model.js";
import { chartsPage } from "./pages/charts.js";
import { tryPage } from "./pages/tryit.js";

const ROUTES = [
  [/^#\/server$/, "server", serverPage],
  [/^#\/models$/, "models", modelsPage],
  [/^#\/models\/([^/]+)(?:\/([^/]+))?$/, "models", modelPage],
  [/^#\/charts(?:\/([^/]+))?$/, "charts", chartsPage],
  [/^#\/try(?:\/([^/]+))?$/, "try", tryPage],
];

const THEME_KEY = "ptserve-console-theme";
const THEMES = ["system", "light", "dark"];

let current = null; // {controller}
let navigated = false; // the first page keeps the browser's focus (the skip link comes first)

/** Run ``task`` now and then every ``ms`` until ``signal`` aborts; skipped while hidden. */
export function every(ms, task, signal) {
  let timer = null;
  const tick = async () => {
    if (signal.aborted) return;
    if (!document.hidden) {
      try {
        await task();
      } catch (error) {
        if (error.name !== "AbortError") console.warn(error); // eslint-disable-line no-console
      }
    }
    if (!signal.aborted) timer = setTimeout(tick, ms);
  };
  signal.addEventListener("abort", () => clearTimeout(timer));
  tick();
}

/** Ask before doing something: a modal dialog; resolves true when confirmed. */
export function confirmAction(title, text, action) {
  const dialog = document.getElementById("confirm");
  replace(dialog.querySelector("h2"), title);
  replace(dialog.querySelector("p"), text);
  const ok = dialog.querySelector("[value=ok]");
  ok.textContent = action;
  dialog.returnValue = "";
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.showModal();
    dialog.querySelector("[value=cancel]").focus();
  });
}

function applyTheme(theme) {
  const root = document.documentElement;
  if (theme === "system") delete root.dataset.theme;
  else root.dataset.theme = theme;
  const button = document.getElementById("theme");
  button.textContent = `Theme: ${theme}`;
  button.setAttribute("aria-label", `Theme: ${theme}. Change theme`);
}

function setupTheme() {
  let theme = localStorage.getItem(THEME_KEY) || "system";
  if (!THEMES.includes(theme)) theme = "system";
  applyTheme(theme);
  document.getElementById("theme").addEventListener("click", () => {
    theme = THEMES[(THEMES.indexOf(theme) + 1) % THEMES.length];
    localStorage.setItem(THEME_KEY, theme);
    applyTheme(theme);
  });
}

function setupSettings() {
  const dialog = document.getElementById("settings");
  const name = dialog.querySelector("#header-name");
  const value = dialog.querySelector("#header-value");
  const status = document.getElementById("connection-status");
  const show = () => {
    const header = restrictedHeader();
    status.textContent = header ? `Sending ${header.name}` : "";
  };
  document.getElementById("settings-open").addEventListener("click", () => {
    const header = restrictedHeader();
    name.value = header ? header.name : "";
    value.value = header ? header.value : "";
    dialog.showModal();
    name.focus();
  });
  dialog.addEventListener("close", () => {
    if (dialog.returnValue === "save") {
      const header = name.value.trim();
      if (header && !/^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/.test(header)) {
        status.textContent = "Not saved: that is not a valid header name";
        return;
      }
      setRestrictedHeader(header, value.value);
      show();
      route();
    } else if (dialog.returnValue === "clear") {
      setRestrictedHeader("", "");
      show();
      route();
    }
  });
  show();
}

async function route() {
  const hash = window.location.hash || "#/server";
  if (!window.location.hash) {
    window.history.replaceState(null, "", "#/server");
  }
  if (current) current.controller.abort();
  const controller = new AbortController();
  current = { controller };
  const main = document.getElementById("main");
  let found = null;
  for (const [pattern, nav, page] of ROUTES) {
    const match = hash.match(pattern);
    if (match) {
      found = { nav, page, params: match.slice(1).map((p) => (p === undefined ? null : decodeURIComponent(p))) };
      break;
    }
  }
  for (const link of document.querySelectorAll("nav a[data-page]")) {
    if (found && link.dataset.page === found.nav) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  main.replaceChildren();
  main.setAttribute("aria-busy", "true");
  if (!found) {
    main.append(h("h1", { tabindex: "-1" }, "Not found"), h("p", {}, "No page is called ", h("code", {}, hash), ". ", h("a", { href: "#/server" }, "Go to the server page"), "."));
  } else {
    try {
      await found.page(main, found.params, { signal: controller.signal, every, confirmAction });
    } catch (error) {
      if (error.name !== "AbortError") {
        main.append(h("div", { class: "error", role: "alert" }, String(error.message || error)));
      }
    }
  }
  if (current && current.controller === controller) {
    main.removeAttribute("aria-busy");
    const heading = main.querySelector("h1");
    if (navigated && heading && document.activeElement === document.body) {
      heading.focus({ preventScroll: true });
    }
  }
}

function setupSkipLink() {
  document.querySelector(".skip").addEventListener("click", (event) => {
    event.preventDefault();
    const heading = document.querySelector("#main h1") || document.getElementById("main");
    heading.focus();
  });
}

setupTheme();
setupSettings();
setupSkipLink();
window.addEventListener("hashchange", () => {
  navigated = true;
  document.activeElement.blur?.();
  route();
});
route();
