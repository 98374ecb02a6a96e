// Building the page from data without ever parsing data as HTML: every text goes through
// document.createTextNode (or .textContent / .value), every attribute through setAttribute.

/** An element `tag` with attributes and children (strings become text nodes). */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") el.className = value;
    else if (name === "dataset") Object.assign(el.dataset, value);
    else if (name.startsWith("on") && typeof value === "function") {
      el.addEventListener(name.slice(2), value);
    } else if (name === "value") el.value = value;
    else if (name === "checked" || name === "selected" || name === "disabled") el[name] = true;
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  add(el, children);
  return el;
}

/** Append children (nested arrays, nodes, strings, numbers; null and false are skipped). */
export function add(el, children) {
  for (const child of [children].flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** Replace every child of `el` by `children`. */
export function fill(el, ...children) {
  el.replaceChildren();
  return add(el, children);
}

/** A link inside the inspector: `#/path` with an optional query (values are encoded). */
export function route(path, query = {}) {
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) {
    if (v !== undefined && v !== null && v !== "") params.set(k, String(v));
  }
  const text = params.toString();
  return "#" + path + (text ? "?" + text : "");
}

/** An <a> to an inspector route. */
export function link(text, path, query = {}, attrs = {}) {
  return h("a", { href: route(path, query), ...attrs }, text);
}

/** A <select> of [value, label] pairs (or plain values) with `current` selected. */
export function select(options, current, attrs = {}) {
  const el = h("select", attrs);
  for (const option of options) {
    const [value, label] = Array.isArray(option) ? option : [option, option];
    const opt = h("option", { value: String(value) }, label);
    if (String(value) === String(current ?? "")) opt.selected = true;
    el.append(opt);
  }
  return el;
}

/** A labelled form control. */
export function labelled(text, control, hint) {
  return h("label", { class: "field" }, h("span", { class: "label" }, text), control,
    hint ? h("span", { class: "hint" }, hint) : null);
}

/** A message box: kind is "error", "ok", "warn" or "info". */
export function notice(kind, ...children) {
  return h("div", { class: `notice ${kind}`, role: kind === "error" ? "alert" : "status" },
    ...children);
}

/** The message of an error for a person: the API's message, never a stack trace. */
export function errorText(err) {
  if (err && typeof err.message === "string" && err.message) return err.message;
  return String(err);
}

/** An error notice for `err` (an ApiError names its status and code). */
export function errorNotice(err) {
  const parts = [h("strong", {}, errorText(err))];
  if (err && err.status) {
    const field = err.details && err.details.field ? ` · field ${err.details.field}` : "";
    parts.push(h("span", { class: "code" }, ` ${err.status} ${err.code}${field}`));
  }
  return notice("error", ...parts);
}

/** "← Previous · page N · Next →"; `go(-1)` or `go(1)` when a button is clicked. */
export function pager(page, hasNext, go) {
  const prev = h("button", { type: "button", id: "prev-page", disabled: page === 0 },
    "← Previous");
  const next = h("button", { type: "button", id: "next-page", disabled: !hasNext }, "Next →");
  prev.addEventListener("click", () => go(-1));
  next.addEventListener("click", () => go(1));
  return h("div", { class: "pager" }, prev, h("span", { class: "muted" }, `page ${page + 1}`),
    next);
}

/** A data table: a header row of `columns` (strings) and the body `rows`. */
export function table(attrs, columns, rows) {
  return h("table", attrs,
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", {}, c)))),
    h("tbody", {}, rows));
}

/**
 * Pages of a list drawn into `el`: `load(cursor, page)` resolves to `{next_cursor, ...}` and
 * `draw(result, page, pagerElement)` fills `el`; Previous goes back through the cursors seen.
 * An error of `load` shows as a notice in `el`. Resolves once the first page is drawn.
 */
export function pagedList(el, ctx, load, draw) {
  const cursors = [null];
  let page = 0;
  async function show() {
    fill(el, h("p", { class: "muted" }, "Loading…"));
    try {
      const result = await load(cursors[page], page);
      if (!ctx.current()) return;
      cursors[page + 1] = result.next_cursor;
      draw(result, page, pager(page, result.next_cursor !== null && result.next_cursor !== undefined,
        (step) => { page += step; show(); }));
    } catch (err) {
      if (ctx.current()) fill(el, errorNotice(err));
    }
  }
  return show();
}

/** " · read at audit seq N" for a page read at a pinned seq (nothing when read live). */
export function seqNote(seq) {
  return seq === null || seq === undefined ? null
    : h("span", { class: "muted" }, ` · read at audit seq ${seq}`);
}

/** Fill `list` with `render(item)` for the first `size` items; returns a "Show more" button. */
export function inBatches(list, items, render, size = 50) {
  const more = h("button", { type: "button", class: "more" });
  let shown = 0;
  function next() {
    add(list, items.slice(shown, shown + size).map(render));
    shown = Math.min(items.length, shown + size);
    const left = items.length - shown;
    more.textContent = `Show ${Math.min(size, left)} more (${left} left)`;
    more.hidden = left <= 0;
  }
  more.addEventListener("click", next);
  next();
  return more;
}
