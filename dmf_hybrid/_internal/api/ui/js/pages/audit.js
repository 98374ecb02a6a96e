// The audit log: the hash chain's status, filtered events (paged), details and time travel.
import * as api from "../api.js";
import { errorNotice, fill, h, labelled, notice, pagedList, route, select, table } from "../dom.js";
import { author, diffTable, entityLink, opBadge, time } from "../format.js";

const OPS = ["create", "update", "append", "delete", "restore", "erase", "link", "unlink",
  "define", "define_rule", "rule", "archive", "reindex"];
const BATCH = 500; // events per API call while scanning for matches
const MAX_BATCHES = 20; // per page: past this the page says how far it scanned
const FILTERS = ["op", "type", "entity", "actor", "since", "until", "from_seq", "to_seq"];

function matcher(params) {
  const op = params.get("op");
  const type = params.get("type");
  const entity = params.get("entity");
  const actor = params.get("actor");
  const since = params.get("since") ? Date.parse(params.get("since") + "Z") : null;
  const until = params.get("until") ? Date.parse(params.get("until") + "Z") : null;
  return (e) => {
    if (op && e.op !== op) return false;
    if (type && e.type !== type) return false;
    if (entity && e.entity_id !== entity) return false;
    if (actor && !(e.actor || "").includes(actor)) return false;
    const ts = Date.parse(e.ts);
    if (since !== null && ts < since) return false;
    if (until !== null && ts > until) return false;
    return true;
  };
}

async function verifyBanner(el) {
  try {
    const report = await api.verify();
    if (report.ok) {
      fill(el, notice("ok", h("strong", {}, "Hash chain verified"),
        ` · ${report.events_checked} events checked · head seq ${report.last_seq}`,
        report.last_hash ? h("span", { class: "mono small" }, ` · ${report.last_hash.slice(0, 16)}…`) : null));
    } else {
      fill(el, notice("error", h("strong", {}, `Hash chain broken at seq ${report.first_bad_seq}`),
        ` · ${report.problem || "the log was changed"} · ${report.events_checked} events checked`,
        " · ", h("a", { href: route("/audit", { from_seq: report.first_bad_seq, to_seq: report.first_bad_seq }) },
          "show that event")));
    }
  } catch (err) {
    fill(el, errorNotice(err));
  }
}

/** #/audit: verification status, filters (type, entity, actor, op, time, seq range), events. */
export async function auditPage(view, ctx) {
  const params = ctx.params;
  const types = await api.types().catch(() => []);
  if (!ctx.current()) return;
  const banner = h("div", { id: "verify-status" }, h("p", { class: "muted" }, "Verifying the chain…"));
  const inputs = {
    op: select([["", "any"], ...OPS.map((o) => [o, o])], params.get("op"), { name: "op" }),
    type: select([["", "any"], ...types.map((t) => [t.name, t.name])], params.get("type"),
      { name: "type" }),
    entity: h("input", { type: "text", name: "entity", class: "mono", value: params.get("entity") || "",
      placeholder: "entity ID" }),
    actor: h("input", { type: "text", name: "actor", value: params.get("actor") || "",
      placeholder: "contains" }),
    since: h("input", { type: "datetime-local", step: "1", name: "since", value: params.get("since") || "" }),
    until: h("input", { type: "datetime-local", step: "1", name: "until", value: params.get("until") || "" }),
    from_seq: h("input", { type: "number", min: "1", name: "from_seq", value: params.get("from_seq") || "" }),
    to_seq: h("input", { type: "number", min: "1", name: "to_seq", value: params.get("to_seq") || "" }),
  };
  const form = h("form", { class: "filters", id: "audit-filters" },
    h("div", { class: "filter-grid" },
      labelled("operation", inputs.op), labelled("type", inputs.type),
      labelled("entity", inputs.entity), labelled("actor", inputs.actor),
      labelled("from time (UTC)", inputs.since), labelled("to time (UTC)", inputs.until),
      labelled("from seq", inputs.from_seq), labelled("to seq", inputs.to_seq)),
    h("div", { class: "actions" },
      h("button", { type: "submit", class: "primary", id: "apply-audit" }, "Apply"),
      h("button", { type: "button", id: "clear-audit",
        onclick: () => { window.location.hash = route("/audit"); } }, "Clear")));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const query = {};
    for (const name of FILTERS) query[name] = String(inputs[name].value).trim();
    window.location.hash = route("/audit", query);
  });
  const list = h("div", { id: "audit-list" });
  fill(view, h("h1", {}, "Audit log"),
    h("p", { class: "muted" }, "Every change, oldest first, with its actor, reason and trace id. ",
      "Each event is hash-chained to the one before it."),
    banner, form, list);
  verifyBanner(banner);

  const match = matcher(params);
  const fromSeq = Number(params.get("from_seq") || 0);
  const toSeq = params.get("to_seq") ? Number(params.get("to_seq")) : null;
  const entity = params.get("entity");
  const pageSize = 50;
  const start = Math.max(0, fromSeq - 1); // since_seq of the first page

  async function entityEvents() {
    const all = await api.history(entity);
    return all.filter((e) => e.seq >= fromSeq && (toSeq === null || e.seq <= toSeq));
  }

  async function scan(since) {
    // events after `since` that match, up to a page; and where the next page starts
    const found = [];
    let cursor = since;
    let end = false;
    if (entity) {
      const all = (await entityEvents()).filter((e) => e.seq > since && match(e));
      return { found: all.slice(0, pageSize), next: all.length > pageSize ? all[pageSize - 1].seq : null, scannedTo: null };
    }
    for (let i = 0; i < MAX_BATCHES && found.length < pageSize && !end; i += 1) {
      const batch = await api.events(cursor, toSeq, BATCH);
      for (const e of batch) {
        cursor = e.seq;
        if (match(e)) found.push(e);
        if (found.length === pageSize) break;
      }
      if (batch.length < BATCH && found.length < pageSize) end = true;
    }
    return { found, next: end ? null : cursor, scannedTo: cursor };
  }

  await pagedList(list, ctx, async (cursor) => {
    const { found, next, scannedTo } = await scan(cursor ?? start);
    return { found, next_cursor: next, scannedTo };
  }, ({ found, next_cursor: next, scannedTo }, page, pages) => fill(list,
    h("p", { class: "summary", id: "audit-summary" }, h("strong", {}, String(found.length)),
      " matching events on this page",
      found.length < pageSize && next !== null && scannedTo !== null
        ? h("span", { class: "muted" }, ` · scanned up to seq ${scannedTo}; Next scans on`) : null),
    found.length ? table({ class: "grid audit" }, ["seq", "time", "op", "type", "entity",
      "actor", "reason", "trace", "version", ""], found.map(eventRows))
      : h("p", { class: "muted empty" }, "No event matches."),
    pages));
}

function eventRows(e) {
  const detail = h("tr", { class: "detail", hidden: true }, h("td", { colspan: 10 }, diffTable(e)));
  const toggle = h("button", { type: "button", class: "link-button small toggle" }, "changes");
  toggle.addEventListener("click", () => { detail.hidden = !detail.hidden; });
  const asOf = e.entity_id && e.op !== "link" && e.op !== "unlink"
    ? h("a", { class: "small as-of", href: route(`/entity/${encodeURIComponent(e.entity_id)}`, { as_of: e.seq }) },
      "state as of this event") : null;
  const versions = e.version_before || e.version_after
    ? `${e.version_before ?? "∅"} → ${e.version_after ?? "∅"}` : "";
  return [h("tr", { dataset: { seq: e.seq } },
    h("td", { class: "num" }, e.seq),
    h("td", { class: "small nowrap" }, time(e.ts)),
    h("td", {}, opBadge(e.op)),
    h("td", {}, e.type || ""),
    h("td", {}, e.entity_id ? entityLink(e.entity_id) : ""),
    // the authenticated key; a different X-Actor is shown as claimed
    h("td", { class: "actor" }, author(e)),
    h("td", { class: "cell" }, e.reason || ""),
    h("td", { class: "mono small" }, e.trace_id || ""),
    h("td", { class: "nowrap" }, versions),
    h("td", { class: "nowrap" }, toggle, " ", asOf)), detail];
}
