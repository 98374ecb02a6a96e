// How values, entities and changes look on the page.
import { h, link } from "./dom.js";

const ENTITY_ID = /^[A-Z][A-Za-z0-9]{0,63}_[0-9a-f]{20}$/;
const LABEL_FIELDS = ["name", "title", "text", "message"];

/** True when `value` looks like a content-derived entity ID (links to its page). */
export function isEntityId(value) {
  return typeof value === "string" && ENTITY_ID.test(value);
}

/** A link to an entity's page. */
export function entityLink(entityId, text) {
  return link(text ?? entityId, `/entity/${encodeURIComponent(entityId)}`, {},
    { class: text ? "" : "mono" });
}

/** A value as page content: null as a dash, lists as chips, IDs as links, objects as JSON. */
export function value(v) {
  if (v === null || v === undefined) return h("span", { class: "muted" }, "—");
  if (Array.isArray(v)) {
    if (!v.length) return h("span", { class: "muted" }, "[ ]");
    return h("span", { class: "chips" }, v.map((item) => h("span", { class: "chip" },
      typeof item === "object" && item !== null ? JSON.stringify(item) : value(item))));
  }
  if (typeof v === "object") return h("code", { class: "json" }, JSON.stringify(v));
  if (typeof v === "boolean") return h("span", { class: "bool" }, v ? "true" : "false");
  if (isEntityId(v)) return entityLink(v);
  return String(v);
}

/**
 * Who made a change: the principal (the API key that authenticated it) when there is one, and
 * an `X-Actor` that differs from it marked as claimed — a caller may write any label there.
 * Without keys (an open service, the embedded memory) the actor is all there is.
 */
export function author(event) {
  const principal = event.principal;
  const actor = event.actor;
  if (!principal) return actor ? h("span", { class: "author" }, actor) : h("span", { class: "muted" }, "—");
  return h("span", { class: "author", title: "authenticated API key" },
    h("span", { class: "principal" }, principal),
    actor && actor !== principal
      ? h("span", { class: "claimed", title: "X-Actor given by the caller, not verified" },
        " (claims ", actor, ")")
      : null);
}

function short(text) {
  return text.length > 80 ? text.slice(0, 79) + "…" : text;
}

/** A short human label of an entity: its name-like field, else its identity values, else its ID. */
export function entityLabel(entity, typedef) {
  const data = (entity && entity.data) || {};
  for (const name of LABEL_FIELDS) {
    const v = data[name];
    if (typeof v === "string" && v && !isEntityId(v)) return short(v);
  }
  const identity = ((typedef && typedef.identity) || []).map((f) => data[f])
    .filter((v) => v !== null && v !== undefined && v !== "" && !isEntityId(v));
  if (identity.length) return short(identity.join(" · "));
  return entity ? entity.id : "";
}

/** An ISO-8601 UTC time as "2025-05-01 09:07:00 UTC". */
export function time(iso) {
  if (!iso) return "—";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC").replace(/Z$/, " UTC");
}

/** A number with at most `digits` decimals. */
export function number(x, digits = 4) {
  if (typeof x !== "number") return String(x);
  return Number.isInteger(x) ? String(x) : x.toFixed(digits).replace(/0+$/, "").replace(/\.$/, "");
}

function same(a, b) {
  return JSON.stringify(a ?? null) === JSON.stringify(b ?? null);
}

/** An audit snapshot's fields (its data, and whether it is deleted) as one flat object. */
export function snapshotFields(snapshot) {
  if (!snapshot) return {};
  const fields = { ...(snapshot.data && typeof snapshot.data === "object" ? snapshot.data : {}) };
  if ("deleted_at" in snapshot) fields["(deleted at)"] = snapshot.deleted_at;
  return fields;
}

/** The fields an event changed: [{field, before, after, kind}] with kind added/removed/changed. */
export function diff(before, after) {
  const b = snapshotFields(before);
  const a = snapshotFields(after);
  const names = [...new Set([...Object.keys(b), ...Object.keys(a)])].sort();
  const rows = [];
  for (const name of names) {
    if (same(b[name], a[name])) continue;
    if (name === "(deleted at)" && !(name in b) && a[name] === null) continue;
    const kind = !(name in b) ? "added" : !(name in a) ? "removed" : "changed";
    rows.push({ field: name, before: b[name], after: a[name], kind });
  }
  return rows;
}

/** A table of the changes of one audit event (`self`: the entity whose page this is). */
export function diffTable(event, self) {
  if (event.redacted) return h("p", { class: "muted" }, "Content erased (snapshots redacted).");
  if (event.op === "link" || event.op === "unlink") {
    const l = event.meta || event.after || event.before || {};
    const verb = event.op === "link" ? "linked" : "unlinked";
    if (self && l.from === self) {
      return h("p", { class: "link-change" }, `${verb} `, h("span", { class: "rel" }, `${l.relation} →`),
        " ", value(l.to));
    }
    if (self && l.to === self) {
      return h("p", { class: "link-change" }, `${verb} from `, value(l.from), " ",
        h("span", { class: "rel" }, `${l.relation} →`));
    }
    return h("p", { class: "link-change" }, `${verb} `,
      value(l.from), h("span", { class: "rel" }, ` —${l.relation}→ `), value(l.to));
  }
  const rows = diff(event.before, event.after);
  if (!rows.length) return h("p", { class: "muted" }, "No field changed.");
  if (rows.every((r) => r.kind === "added")) { // a creation: the values it started with
    return h("table", { class: "diff" },
      h("thead", {}, h("tr", {}, h("th", {}, "field"), h("th", {}, "value"))),
      h("tbody", {}, rows.map((r) => h("tr", { class: r.kind },
        h("td", { class: "mono" }, r.field), h("td", { class: "after" }, value(r.after))))));
  }
  return h("table", { class: "diff" },
    h("thead", {}, h("tr", {}, h("th", {}, "field"), h("th", {}, "before"), h("th", {}, "after"))),
    h("tbody", {}, rows.map((r) => h("tr", { class: r.kind },
      h("td", { class: "mono" }, r.field),
      h("td", { class: "before" }, r.kind === "added" ? "" : value(r.before)),
      h("td", { class: "after" }, r.kind === "removed" ? "" : value(r.after))))));
}

/** A coloured badge for an audit operation. */
export function opBadge(op) {
  return h("span", { class: `op op-${String(op).replace(/[^a-z_]/g, "")}` }, op);
}
