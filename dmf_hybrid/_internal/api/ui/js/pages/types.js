// Types and their entities: a list of types with counts; per type a filtered, paged table.
import * as api from "../api.js";
import { errorNotice, fill, h, labelled, link, pagedList, route, select, seqNote } from "../dom.js";
import { compileFilter, filterForm } from "../filters.js";
import { entityLink, time, value } from "../format.js";

const PAGE_SIZES = [10, 25, 50, 100];
const MAX_COLUMNS = 6;

/** #/types: every type, its description, fields, relations and number of live entities. */
export async function typesPage(view, ctx) {
  fill(view, h("h1", {}, "Types & entities"), h("p", { class: "muted" }, "Loading types…"));
  const types = await api.types();
  const counts = await Promise.all(types.map((t) => api.count(t.name).then(
    (r) => r.count, (err) => err)));
  if (!ctx.current()) return;
  const rows = types.map((t, i) => {
    const def = t.definition;
    const n = counts[i];
    return h("tr", { dataset: { type: t.name } },
      h("td", {}, link(t.name, `/types/${encodeURIComponent(t.name)}`, {}, { class: "strong" })),
      h("td", {}, def.description || h("span", { class: "muted" }, "—")),
      h("td", { class: "mono small" }, Object.keys(def.fields).join(", ")),
      h("td", { class: "mono small" }, (def.identity || []).join(", ") || "all fields"),
      h("td", { class: "mono small" }, Object.keys(def.relations || {}).join(", ") || "—"),
      h("td", { class: "num count" }, typeof n === "number" ? n : h("span", { class: "error-text" }, n.message)));
  });
  fill(view,
    h("h1", {}, "Types & entities"),
    h("p", { class: "muted" }, `${types.length} types in tenant ${ctx.session.tenant}. `,
      "Counts are live (not deleted) entities."),
    h("table", { class: "grid", id: "types-table" },
      h("thead", {}, h("tr", {}, ["type", "description", "fields", "identity", "relations",
        "entities"].map((c) => h("th", { class: c === "entities" ? "num" : "" }, c)))),
      h("tbody", {}, rows)));
}

function columnsOf(def, items) {
  // identity fields first, then the fields this page has values for
  const identity = def.identity || [];
  const filled = (f) => items.some((e) => e.data[f] !== null && e.data[f] !== undefined &&
    !(Array.isArray(e.data[f]) && !e.data[f].length));
  const rest = Object.keys(def.fields).filter((f) => !identity.includes(f) && filled(f));
  return [...identity, ...rest].slice(0, MAX_COLUMNS);
}

function orderOptions(def) {
  const options = [["", "ID (default)"]];
  for (const name of ["updated_at", "created_at", ...Object.keys(def.fields)]) {
    const spec = def.fields[name];
    if (spec && spec.type === "list") continue;
    options.push([name, `${name} ↑`], [`-${name}`, `${name} ↓`]);
  }
  return options;
}

/** #/types/<Type>: typed filter inputs, counts, a page of entities, next/previous. */
export async function typePage(view, ctx) {
  const [name] = ctx.args;
  const t = await api.type(name);
  if (!ctx.current()) return;
  const def = t.definition;
  const params = ctx.params;
  const go = (next) => {
    window.location.hash = route(`/types/${encodeURIComponent(name)}`,
      Object.fromEntries(next.entries()));
  };
  const order = select(orderOptions(def), params.get("order") || "", { name: "order" });
  const size = select(PAGE_SIZES, params.get("limit") || "25", { name: "limit" });
  const form = filterForm(def, params, go,
    [labelled("order by", order), labelled("page size", size)]);
  const summary = h("p", { class: "summary", id: "match-summary" });
  const table = h("div", { id: "entity-list" });
  fill(view,
    h("p", { class: "crumbs" }, link("Types", "/types"), " / ", name),
    h("h1", {}, name, h("span", { class: "muted small" }, ` v${t.version}`)),
    def.description ? h("p", {}, def.description) : null,
    h("p", { class: "muted small" }, "identity: ",
      h("span", { class: "mono" }, (def.identity || []).join(", ") || "all fields"),
      def.embed ? [" · embedded text: ", h("span", { class: "mono" }, def.embed)] : null),
    form, summary, table);

  let where;
  try {
    where = compileFilter(def, params);
  } catch (err) {
    fill(table, errorNotice(err));
    return;
  }
  const limit = Number(params.get("limit") || 25);
  const orderBy = params.get("order") || null;
  await pagedList(table, ctx, async (cursor) => {
    const [matching, total, result] = await Promise.all([
      api.count(name, where), api.count(name, null),
      api.query(name, { where, order_by: orderBy, limit, cursor })]);
    return { ...result, matching: matching.count, total: total.count };
  }, (result, page, pages) => {
    const first = result.items.length ? page * limit + 1 : 0;
    const last = page * limit + result.items.length;
    fill(summary, h("strong", {}, `${result.matching}`),
      where ? ` of ${result.total} ${name} entities match` : ` ${name} entities`,
      result.items.length ? ` · showing ${first}–${last}` : "", seqNote(result.as_of_seq));
    const cols = columnsOf(def, result.items);
    fill(table,
      result.items.length ? h("div", { class: "table-wrap" }, h("table", { class: "grid entities" },
        h("thead", {}, h("tr", {}, h("th", {}, "id"), cols.map((c) => h("th", {}, c)),
          h("th", { class: "num" }, "version"), h("th", {}, "updated"))),
        h("tbody", {}, result.items.map((e) => h("tr", { dataset: { id: e.id } },
          h("td", { class: "id-cell" }, entityLink(e.id)),
          cols.map((c) => h("td", { class: "cell", title: cellTitle(e.data[c]) },
            value(e.data[c]))),
          h("td", { class: "num" }, e.version),
          h("td", { class: "small nowrap" }, time(e.updated_at)))))))
        : h("p", { class: "muted empty" }, "No entity matches."),
      pages);
  });
}

function cellTitle(v) {
  if (v === null || v === undefined) return null;
  const text = typeof v === "string" ? v : JSON.stringify(v);
  return text.length > 40 ? text : null;
}
