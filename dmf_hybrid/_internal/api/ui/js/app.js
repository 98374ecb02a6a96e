// The inspector's shell: the API key, the header, and a hash router over the pages.
import * as api from "./api.js";
import { errorNotice, fill, h, labelled, notice } from "./dom.js";
import { auditPage } from "./pages/audit.js";
import { constraintsPage } from "./pages/constraints.js";
import { entityPage } from "./pages/entity.js";
import { searchPage } from "./pages/search.js";
import { typePage, typesPage } from "./pages/types.js";

const ROUTES = [
  [/^\/types$/, "types", typesPage],
  [/^\/types\/([^/]+)$/, "types", typePage],
  [/^\/entity\/([^/]+)$/, "types", entityPage],
  [/^\/audit$/, "audit", auditPage],
  [/^\/search$/, "search", searchPage],
  [/^\/constraints$/, "constraints", constraintsPage],
];

const main = document.getElementById("main");
const nav = document.getElementById("nav");
const who = document.getElementById("who");
let session = null; // {tenant, role, key_label, open} of the current key
let renderCount = 0;

function parseHash() {
  const raw = window.location.hash.replace(/^#/, "") || "/types";
  const at = raw.indexOf("?");
  const path = at < 0 ? raw : raw.slice(0, at);
  const params = new URLSearchParams(at < 0 ? "" : raw.slice(at + 1));
  return { path, params };
}

function showKeyForm(message) {
  session = null;
  nav.hidden = true;
  fill(who);
  const input = h("input", { type: "password", name: "api-key", autocomplete: "off",
    required: true, placeholder: "API key", id: "api-key" });
  const form = h("form", { class: "card key-form", id: "key-form" },
    h("h1", {}, "Sign in with an API key"),
    h("p", {}, "The inspector uses the same API keys as the HTTP API. A reader key can look; ",
      "a writer key can also edit. The key is kept in this browser tab only (sessionStorage)."),
    message ? errorNotice(message) : null,
    labelled("API key", input),
    h("button", { type: "submit", class: "primary" }, "Use this key"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    api.setApiKey(input.value.trim());
    start();
  });
  fill(main, form);
  input.focus();
}

function showSession() {
  nav.hidden = false;
  const role = session.open ? "open service" : `${session.role} key`;
  const label = session.key_label ? ` · ${session.key_label}` : "";
  const out = h("button", { type: "button", class: "link-button", id: "sign-out" },
    session.open ? "" : "Change key");
  out.addEventListener("click", () => {
    api.setApiKey("");
    showKeyForm();
  });
  fill(who, h("span", { class: "tenant", id: "session" },
    h("span", { class: "muted" }, "tenant "), h("strong", {}, session.tenant),
    ` · ${role}${label}`), session.open ? null : out);
}

function highlight(section) {
  for (const a of nav.querySelectorAll("a")) {
    a.classList.toggle("active", a.dataset.section === section);
  }
}

async function render() {
  if (!session) return;
  const mine = ++renderCount;
  const { path, params } = parseHash();
  const found = ROUTES.map(([re, section, page]) => [path.match(re), section, page])
    .find(([m]) => m);
  const view = h("div", { class: "view" });
  fill(main, view);
  if (!found) {
    highlight("");
    fill(view, notice("error", `No page at ${path}.`));
    return;
  }
  const [match, section, page] = found;
  highlight(section);
  const ctx = {
    params,
    args: [],
    session,
    canWrite: session.role === "writer" || session.role === "admin",
    current: () => mine === renderCount,
    rerender: render,
  };
  try {
    ctx.args = match.slice(1).map(decodeURIComponent); // URIError for a malformed link
    await page(view, ctx);
  } catch (err) {
    if (!ctx.current()) return;
    if (err instanceof api.ApiError && err.status === 401) {
      showKeyForm(err);
      return;
    }
    view.append(errorNotice(err));
  }
}

async function start() {
  try {
    session = await api.whoami();
  } catch (err) {
    if (err instanceof api.ApiError && err.status === 401) {
      const hadKey = Boolean(api.apiKey());
      api.setApiKey("");
      showKeyForm(hadKey ? err : null);
      return;
    }
    fill(main, errorNotice(err));
    return;
  }
  showSession();
  await render();
}

window.addEventListener("hashchange", render);
start();
