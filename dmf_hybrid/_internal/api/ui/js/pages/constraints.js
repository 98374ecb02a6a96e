// The open constraint queue: the rule that raised each, its observed value and threshold,
// and the suggestions that address it.
import * as api from "../api.js";
import { fill, h, labelled, pagedList, route, select, seqNote, table } from "../dom.js";
import { entityLabel, entityLink, number, time, value } from "../format.js";

const PAGE_SIZE = 25;

async function suggestionsFor(ids, types) {
  if (!ids.length || !types.some((t) => t.name === "Suggestion")) return new Map();
  const page = await api.query("Suggestion", { where: { constraint: { $in: ids } }, limit: 1000 });
  const byConstraint = new Map();
  for (const s of page.items) {
    const key = s.data.constraint;
    if (!byConstraint.has(key)) byConstraint.set(key, []);
    byConstraint.get(key).push(s);
  }
  return byConstraint;
}

/** #/constraints: open constraints, filterable by kind, rule and subject, paged. */
export async function constraintsPage(view, ctx) {
  const params = ctx.params;
  const [types, rules] = await Promise.all([api.types(), api.rules().catch(() => [])]);
  if (!ctx.current()) return;
  const constraintType = types.find((t) => t.name === "Constraint");
  const kinds = constraintType && constraintType.definition.fields.kind
    ? constraintType.definition.fields.kind.values || [] : [];
  const ruleByName = new Map(rules.map((r) => [r.name, r]));
  const inputs = {
    kind: select([["", "any"], ...kinds.map((k) => [k, k])], params.get("kind"), { name: "kind" }),
    rule: h("input", { type: "text", name: "rule", class: "mono", value: params.get("rule") || "",
      list: "rule-names", placeholder: "rule name" }),
    subject: h("input", { type: "text", name: "subject", class: "mono",
      value: params.get("subject") || "", placeholder: "entity ID" }),
  };
  const form = h("form", { class: "filters", id: "constraint-filters" },
    h("datalist", { id: "rule-names" }, rules.map((r) => h("option", { value: r.name }))),
    h("div", { class: "filter-grid" }, labelled("kind", inputs.kind), labelled("rule", inputs.rule),
      labelled("subject", inputs.subject)),
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Apply"),
      h("button", { type: "button", onclick: () => { window.location.hash = route("/constraints"); } },
        "Clear")));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const query = {};
    for (const [name, el] of Object.entries(inputs)) query[name] = String(el.value).trim();
    window.location.hash = route("/constraints", query);
  });
  const list = h("div", { id: "constraint-list" });
  fill(view, h("h1", {}, "Constraints"),
    h("p", { class: "muted" }, "The open constraints: problems a plan must solve, raised by rules ",
      "inside the writing transaction or recorded by hand."),
    rulesCard(rules), form, list);

  await pagedList(list, ctx, async (cursor) => {
    const result = await api.constraints({ kind: params.get("kind"), rule: params.get("rule"),
      subject: params.get("subject"), limit: PAGE_SIZE, cursor });
    const [suggestions, subjects] = await Promise.all([
      suggestionsFor(result.items.map((c) => c.id), types), subjectsOf(result.items, types)]);
    return { ...result, suggestions, subjects };
  }, (result, page, pages) => fill(list,
    h("p", { class: "summary" }, h("strong", {}, String(result.items.length)),
      " open constraints on this page", seqNote(result.as_of_seq)),
    result.items.length ? table({ class: "grid constraints", id: "constraints" },
      ["kind", "rule", "subject", "message", "observed", "threshold", "raised", "suggestions"],
      result.items.map((c) => row(c, ruleByName, result.suggestions.get(c.id) || [],
        result.subjects)))
      : h("p", { class: "muted empty" }, "No open constraint."),
    pages));
}

function rulesCard(rules) {
  if (!rules.length) return null;
  return h("details", { class: "card rules" }, h("summary", {}, `${rules.length} active rules`),
    h("table", { class: "grid compact" }, h("tbody", {}, rules.map((r) => h("tr", {},
      h("td", { class: "mono" }, `${r.name} v${r.version}`),
      h("td", {}, r.description || ""),
      h("td", { class: "mono small" }, r.condition || ""))))));
}

async function subjectsOf(items, types) {
  // labels of the constrained entities (a missing or deleted one shows its ID)
  const defs = new Map(types.map((t) => [t.name, t.definition]));
  const ids = [...new Set(items.map((c) => c.data.subject).filter((s) => typeof s === "string"))];
  const found = await Promise.all(ids.map((sid) => api.entity(sid).catch(() => null)));
  const labels = new Map();
  ids.forEach((sid, i) => {
    const e = found[i];
    if (e) labels.set(sid, `${e.type}: ${entityLabel(e, defs.get(e.type))}`);
  });
  return labels;
}

function row(c, ruleByName, suggestions, subjects) {
  const d = c.data;
  const rule = ruleByName.get(d.rule);
  return h("tr", { dataset: { id: c.id } },
    h("td", {}, h("span", { class: `tag kind-${String(d.kind).replace(/[^a-z]/g, "")}` }, d.kind)),
    h("td", {}, h("div", { class: "mono" }, d.rule, d.rule_version ? ` v${d.rule_version}` : ""),
      rule ? h("div", { class: "small muted" }, rule.description || rule.condition) :
        h("div", { class: "small muted" }, "recorded by hand")),
    h("td", {}, subjects.has(d.subject)
      ? [h("div", {}, entityLink(d.subject, subjects.get(d.subject))),
        h("div", { class: "mono small muted" }, d.subject)]
      : value(d.subject)),
    h("td", {}, entityLink(c.id, d.message || c.id)),
    h("td", { class: "num" }, d.observed === null || d.observed === undefined ? "—" : number(d.observed, 2)),
    h("td", { class: "num" }, d.threshold === null || d.threshold === undefined ? "—" : number(d.threshold, 2)),
    h("td", { class: "small nowrap" }, time(c.created_at)),
    h("td", {}, suggestions.length ? h("ul", { class: "suggestions" }, suggestions.map((s) =>
      h("li", {}, h("span", { class: `tag status-${String(s.data.status).replace(/[^a-z]/g, "")}` },
        s.data.status), " ", entityLink(s.id, s.data.text)))) : h("span", { class: "muted" }, "none")));
}
