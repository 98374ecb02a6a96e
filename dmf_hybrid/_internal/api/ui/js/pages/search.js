// The search playground: hits with per-leg rank and score, the receipt, and an as_of replay.
import * as api from "../api.js";
import { errorNotice, fill, h, labelled, notice, route, select, table } from "../dom.js";
import { entityLabel, entityLink, number } from "../format.js";

const MODES = ["hybrid", "vector", "keyword"];

function body(params) {
  const request = { type: params.get("type"), text: params.get("text") || null,
    mode: params.get("mode") || "hybrid", k: Number(params.get("k") || 10) };
  if (params.get("as_of")) request.as_of = Number(params.get("as_of"));
  const where = params.get("where");
  if (where) {
    try {
      request.where = JSON.parse(where);
    } catch (err) {
      throw new Error(`The filter is not valid JSON: ${err.message}`);
    }
  }
  return request;
}

/** #/search: the form; with ?type=… it runs the search and shows hits, receipt and replay. */
export async function searchPage(view, ctx) {
  const params = ctx.params;
  const types = await api.types();
  if (!ctx.current()) return;
  const searchable = types.filter((t) => t.definition.embed);
  const typeName = params.get("type") || (searchable[0] || types[0] || {}).name || "";
  const inputs = {
    type: select((searchable.length ? searchable : types).map((t) => t.name), typeName,
      { name: "type", id: "search-type" }),
    text: h("input", { type: "search", name: "text", id: "search-text", value: params.get("text") || "",
      placeholder: "what to look for, e.g. 小笼包 or soup dumplings" }),
    where: h("textarea", { name: "where", id: "search-where", rows: 2, spellcheck: "false",
      placeholder: '{"city": "Shanghai"}' }),
    mode: select(MODES, params.get("mode") || "hybrid", { name: "mode", id: "search-mode" }),
    k: h("input", { type: "number", name: "k", id: "search-k", min: "1", max: "1000",
      value: params.get("k") || "10" }),
    as_of: h("input", { type: "number", name: "as_of", id: "search-as-of", min: "0",
      value: params.get("as_of") || "", placeholder: "now" }),
  };
  inputs.where.value = params.get("where") || "";
  const form = h("form", { class: "filters search-form", id: "search-form" },
    h("div", { class: "search-grid" },
      labelled("type", inputs.type), labelled("text", inputs.text),
      labelled("mode", inputs.mode), labelled("k", inputs.k), labelled("as of seq", inputs.as_of)),
    labelled("filter (JSON, applied exactly in DuckDB)", inputs.where),
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary", id: "run-search" },
      "Search")));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const query = {};
    for (const [name, el] of Object.entries(inputs)) query[name] = String(el.value).trim();
    const next = route("/search", query);
    if (window.location.hash === next) ctx.rerender();
    else window.location.hash = next;
  });
  const results = h("div", { id: "search-results" });
  fill(view, h("h1", {}, "Search playground"),
    h("p", { class: "muted" }, "Fuzzy legs only propose IDs; every hit is resolved from DuckDB. ",
      "The receipt names the audit seq the answer was resolved at: replaying with as_of at that ",
      "seq must give the same hits, whatever changed since."),
    form, results);
  if (!params.get("type")) return;

  let request;
  try {
    request = body(params);
  } catch (err) {
    fill(results, errorNotice(err));
    return;
  }
  fill(results, h("p", { class: "muted" }, "Searching…"));
  let first;
  try {
    first = await api.search(request);
  } catch (err) {
    if (ctx.current()) fill(results, errorNotice(err));
    return;
  }
  if (!ctx.current()) return;
  const typedef = (types.find((t) => t.name === request.type) || {}).definition || null;
  const replayStatus = h("div", { id: "replay-status" });
  const replay = h("button", { type: "button", id: "replay", class: "primary" },
    `Replay with as_of = ${first.receipt.resolved_at_seq}`);
  replay.addEventListener("click", async () => {
    fill(replayStatus, h("p", { class: "muted" }, "Replaying…"));
    try {
      const [again, headNow] = await Promise.all([
        api.search({ ...request, as_of: first.receipt.resolved_at_seq }), api.head()]);
      fill(replayStatus, compare(first, again, headNow.last_seq));
    } catch (err) {
      fill(replayStatus, errorNotice(err));
    }
  });
  fill(results,
    h("div", { class: "columns" },
      h("div", { class: "col-main" }, h("section", { class: "card" },
        h("h2", {}, `${first.hits.length} hits`),
        hitsTable(first.hits, typedef))),
      h("div", { class: "col-side" },
        h("section", { class: "card" }, h("h2", {}, "Replay"),
          h("p", { class: "small muted" }, "Runs the same search as of the receipt's seq."),
          replay, replayStatus),
        receiptCard(first.receipt))));
}

function legs(hit) {
  const names = Object.keys(hit.legs || {}).sort();
  if (!names.length) return h("span", { class: "muted" }, "—");
  return h("span", { class: "legs" }, names.map((name) => h("span", { class: "leg", dataset: { leg: name } },
    h("span", { class: "leg-name" }, name),
    ` #${hit.legs[name].rank} `, h("span", { class: "muted" }, number(hit.legs[name].score)))));
}

function hitsTable(hits, typedef) {
  if (!hits.length) return h("p", { class: "muted empty" }, "No hit.");
  return table({ class: "grid hits", id: "hits" }, ["#", "entity", "score", "legs (rank, score)"],
    hits.map((hit, i) => h("tr", { dataset: { id: hit.entity.id } },
      h("td", { class: "num" }, i + 1),
      h("td", {}, h("div", {}, entityLink(hit.entity.id, entityLabel(hit.entity, typedef))),
        h("div", { class: "mono small muted" }, hit.entity.id)),
      h("td", { class: "num" }, number(hit.score, 6)),
      h("td", {}, legs(hit)))));
}

function receiptCard(receipt) {
  const rows = [
    ["resolved at seq", receipt.resolved_at_seq], ["mode", receipt.mode], ["plan", receipt.plan],
    ["candidates", receipt.candidates], ["k", receipt.k], ["rrf k", receipt.rrf_k ?? "—"],
    ["dropped (fail closed)", receipt.dropped], ["model", receipt.model_id],
  ];
  const timings = Object.entries(receipt.timings_ms || {}).sort(([a], [b]) => a.localeCompare(b))
    .map(([k, v]) => `${k.replace(/_ms$/, "")} ${number(v, 1)}`);
  return h("section", { class: "card", id: "receipt" }, h("h2", {}, "Receipt"),
    h("dl", { class: "receipt" },
      rows.map(([k, v]) => h("div", { dataset: { key: k } }, h("dt", {}, k), h("dd", {}, String(v))))),
    timings.length ? h("p", { class: "small muted timings" }, "timings (ms): ", timings.join(" · ")) : null);
}

/** Whether a replay gave the same hits (IDs, order, scores, legs) as the first answer. */
function compare(first, again, headSeq) {
  const problems = [];
  if (first.hits.length !== again.hits.length) {
    problems.push(`${first.hits.length} hits first, ${again.hits.length} on replay`);
  }
  const n = Math.min(first.hits.length, again.hits.length);
  for (let i = 0; i < n; i += 1) {
    const a = first.hits[i];
    const b = again.hits[i];
    if (a.entity.id !== b.entity.id) problems.push(`#${i + 1}: ${a.entity.id} first, ${b.entity.id} on replay`);
    else if (a.score !== b.score || JSON.stringify(a.legs) !== JSON.stringify(b.legs)) {
      problems.push(`#${i + 1} ${a.entity.id}: score ${a.score} first, ${b.score} on replay`);
    }
  }
  const moved = headSeq > first.receipt.resolved_at_seq
    ? ` The log has moved on since (head seq ${headSeq}).` : "";
  if (!problems.length) {
    return notice("ok", h("strong", { id: "replay-verdict" }, "Identical"),
      ` — ${n} hits in the same order with the same scores at seq ${again.receipt.resolved_at_seq}.${moved}`);
  }
  return notice("error", h("strong", { id: "replay-verdict" }, "Different"),
    ` at seq ${again.receipt.resolved_at_seq}.${moved}`,
    h("ul", {}, problems.map((p) => h("li", {}, p))));
}
