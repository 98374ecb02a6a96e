// Typed filter inputs for a type's fields, compiled to the API's filter language.
// The URL keeps the inputs (f.<field>, f.<field>.op, f.<field>.min, f.<field>.max) and any
// extra filter as JSON (where), so a filtered list is a link.
import { h, labelled, select } from "./dom.js";

const RANGE_KINDS = new Set(["int", "float", "date", "datetime"]);
const TEXT_OPS = [["$eq", "="], ["$contains", "contains"], ["$ne", "≠"]];

function numberOr(text, kind) {
  if (kind !== "int" && kind !== "float") return text;
  const n = Number(text);
  return text.trim() !== "" && Number.isFinite(n) ? n : text; // the API names a bad value
}

function itemValue(text, spec) {
  const kind = spec.type === "list" ? spec.item || "str" : spec.type;
  if (kind === "bool") return text === "true" ? true : text === "false" ? false : text;
  return numberOr(text, kind);
}

/** The `where` object of the typed inputs and the JSON filter in `params`; throws on bad JSON. */
export function compileFilter(typedef, params) {
  const terms = [];
  for (const [name, spec] of Object.entries(typedef.fields)) {
    const key = `f.${name}`;
    if (RANGE_KINDS.has(spec.type)) {
      const range = {};
      const min = params.get(`${key}.min`);
      const max = params.get(`${key}.max`);
      if (min) range.$gte = numberOr(min, spec.type);
      if (max) range.$lte = numberOr(max, spec.type);
      if (Object.keys(range).length) terms.push({ [name]: range });
      continue;
    }
    const text = params.get(key);
    if (!text) continue;
    if (spec.type === "list") terms.push({ [name]: { $contains: itemValue(text, spec) } });
    else if (spec.type === "str") {
      const op = params.get(`${key}.op`) || "$eq";
      terms.push({ [name]: op === "$eq" ? text : { [op]: text } });
    } else terms.push({ [name]: itemValue(text, spec) });
  }
  const extra = params.get("where");
  if (extra) {
    let parsed;
    try {
      parsed = JSON.parse(extra);
    } catch (err) {
      throw new Error(`The JSON filter is not valid JSON: ${err.message}`);
    }
    terms.push(parsed);
  }
  if (!terms.length) return null;
  return terms.length === 1 ? terms[0] : { $and: terms };
}

function input(attrs, value) {
  return h("input", { ...attrs, value: value || "" });
}

function control(name, spec, params) {
  const key = `f.${name}`;
  const kind = spec.type;
  if (kind === "enum") {
    return select([["", "any"], ...(spec.values || []).map((v) => [v, v])], params.get(key),
      { name: key });
  }
  if (kind === "bool") {
    return select([["", "any"], ["true", "true"], ["false", "false"]], params.get(key),
      { name: key });
  }
  if (RANGE_KINDS.has(kind)) {
    const type = kind === "date" ? "date" : kind === "datetime" ? "datetime-local" : "number";
    const step = kind === "float" ? "any" : kind === "int" ? "1" : null;
    return h("span", { class: "range" },
      input({ type, step, name: `${key}.min`, placeholder: "from", "aria-label": `${name} from` },
        params.get(`${key}.min`)),
      h("span", { class: "muted" }, "–"),
      input({ type, step, name: `${key}.max`, placeholder: "to", "aria-label": `${name} to` },
        params.get(`${key}.max`)));
  }
  if (kind === "list") {
    return input({ type: "text", name: key, placeholder: `contains (${spec.item || "str"})` },
      params.get(key));
  }
  return h("span", { class: "text-op" },
    select(TEXT_OPS, params.get(`${key}.op`) || "$eq", { name: `${key}.op`,
      "aria-label": `${name} operator` }),
    input({ type: "text", name: key }, params.get(key)));
}

/** The filter form of `typedef`, filled from `params`; `onApply(params)` gets the new query. */
export function filterForm(typedef, params, onApply, extras = []) {
  const fields = Object.entries(typedef.fields).map(([name, spec]) =>
    labelled(name, control(name, spec, params), spec.type === "list" ? `list of ${spec.item || "str"}` : spec.type));
  const json = h("textarea", { name: "where", rows: 2, spellcheck: "false",
    placeholder: '{"$or": [{"city": "Shanghai"}, {"estimated_cost": {"$lt": 50}}]}' });
  json.value = params.get("where") || "";
  const form = h("form", { class: "filters", id: "filter-form" },
    h("div", { class: "filter-grid" }, fields),
    h("div", { class: "filter-row" }, labelled("more (JSON filter)", json,
      "combined with the fields above by $and; operators $eq $ne $gt $gte $lt $lte $in $nin $contains, $and, $or"),
    ...extras),
    h("div", { class: "actions" },
      h("button", { type: "submit", class: "primary", id: "apply-filter" }, "Apply"),
      h("button", { type: "button", id: "clear-filter", onclick: () => onApply(new URLSearchParams()) },
        "Clear")));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const next = new URLSearchParams();
    for (const [k, v] of new FormData(form).entries()) {
      const text = String(v).trim();
      if (!text) continue;
      if (k.endsWith(".op") && text === "$eq") continue;
      next.set(k, text);
    }
    // an operator without a value is noise in the link
    for (const k of [...next.keys()]) {
      if (k.endsWith(".op") && !next.get(k.slice(0, -3))) next.delete(k);
    }
    onApply(next);
  });
  return form;
}
