// One entity: its data (now or as of an audit seq), relations, edits and version timeline.
import * as api from "../api.js";
import { add, errorNotice, fill, h, inBatches, labelled, link, notice, select } from "../dom.js";
import { author, diffTable, entityLabel, opBadge, time, value } from "../format.js";

const typeCache = new Map();

async function typedefOf(name) {
  if (!typeCache.has(name)) typeCache.set(name, api.type(name).then((t) => t.definition));
  try {
    return await typeCache.get(name);
  } catch (err) {
    typeCache.delete(name);
    throw err;
  }
}

function orNotFound(promise) {
  return promise.catch((err) => {
    if (err instanceof api.ApiError && err.status === 404) return null;
    throw err;
  });
}

/** #/entity/<id>[?as_of=seq]: the entity page. */
export async function entityPage(view, ctx) {
  const [entityId] = ctx.args;
  const asOf = ctx.params.get("as_of") || null;
  fill(view, h("p", { class: "muted" }, "Loading…"));
  const [entity, events] = await Promise.all([
    orNotFound(api.entity(entityId, asOf)), orNotFound(api.history(entityId))]);
  if (!ctx.current()) return;
  if (!entity && !(events && events.length)) {
    fill(view, h("h1", { class: "mono" }, entityId),
      notice("error", "No entity with this ID in tenant ", h("strong", {}, ctx.session.tenant),
        "."));
    return;
  }
  const lastEvent = events && events.length ? events[events.length - 1] : null;
  const typeName = entity ? entity.type : lastEvent.type;
  const def = await typedefOf(typeName);
  const relations = entity ? (await orNotFound(api.related(entityId, asOf))) || [] : [];
  const related = new Map(await Promise.all([...new Set(relations.map((r) => r.entity.type))]
    .map(async (name) => [name, await typedefOf(name)])));
  if (!ctx.current()) return;

  const shown = entity || snapshotOf(events, asOf);
  const title = shown ? entityLabel(shown, def) : entityId;
  const parts = [
    h("p", { class: "crumbs" }, link("Types", "/types"), " / ",
      link(typeName, `/types/${encodeURIComponent(typeName)}`), " / ",
      h("span", { class: "mono" }, entityId)),
    h("h1", { id: "entity-title" }, title),
    header(entity, shown, entityId, asOf, lastEvent),
  ];
  if (asOf) {
    parts.push(notice("info", `State as of audit seq ${asOf} (read-only). `,
      link("Show the current state", `/entity/${encodeURIComponent(entityId)}`)));
  }
  if (!entity) {
    parts.push(notice("warn", absentText(asOf, lastEvent)));
  }
  const columns = h("div", { class: "columns" });
  const left = h("div", { class: "col-main" });
  const right = h("div", { class: "col-side" });
  left.append(h("section", { class: "card" }, h("h2", {}, "Data"), dataTable(shown, def)));
  if (ctx.canWrite && !asOf) {
    if (entity) left.append(editCard(entity, def, ctx));
    else if (lastEvent && lastEvent.op === "delete") left.append(restoreCard(entityId, lastEvent, ctx));
  }
  if (entity) left.append(relationsCard(relations, related, asOf));
  right.append(timeline(events || [], entityId, asOf));
  columns.append(left, right);
  parts.push(columns);
  fill(view, ...parts);
}

function absentText(asOf, lastEvent) {
  if (asOf) return `The entity did not exist (or was deleted) as of seq ${asOf}.`;
  if (lastEvent && lastEvent.op === "delete") {
    return `Deleted at seq ${lastEvent.seq} (${time(lastEvent.ts)}) by ${lastEvent.actor || "—"}; ` +
      "shown as it was before.";
  }
  if (lastEvent && lastEvent.op === "erase") return "Erased: its content is gone.";
  return "Not readable now.";
}

function snapshotOf(events, asOf) {
  // the last snapshot the timeline holds up to as_of (for a deleted entity: before deletion)
  const upto = (events || []).filter((e) => !asOf || e.seq <= Number(asOf));
  for (let i = upto.length - 1; i >= 0; i -= 1) {
    const e = upto[i];
    if (e.op === "link" || e.op === "unlink") continue;
    const snap = e.op === "delete" ? e.before || e.after : e.after || e.before;
    if (snap) return { id: e.entity_id, type: e.type, version: e.version_after, data: snap.data || snap };
  }
  return null;
}

function header(entity, shown, entityId, asOf, lastEvent) {
  const items = [
    ["id", h("span", { class: "mono", id: "entity-id" }, entityId)],
    ["version", h("span", { id: "entity-version" }, shown ? shown.version : "—")],
  ];
  if (entity) {
    items.push(["created", time(entity.created_at)], ["updated", time(entity.updated_at)]);
  }
  if (!entity && lastEvent) items.push(["state", lastEvent.op === "delete" ? "deleted" : "absent"]);
  return h("dl", { class: "meta" }, items.map(([k, v]) => h("div", {}, h("dt", {}, k), h("dd", {}, v))));
}

function dataTable(shown, def) {
  if (!shown) return h("p", { class: "muted" }, "No data.");
  const data = shown.data || {};
  const identity = def.identity || [];
  const names = [...Object.keys(def.fields), ...Object.keys(data).filter((k) => !(k in def.fields))];
  return h("table", { class: "kv", id: "entity-data" }, h("tbody", {}, names.map((name) =>
    h("tr", { dataset: { field: name } },
      h("th", {}, name, identity.includes(name) ? h("span", { class: "tag" }, "identity") : null),
      h("td", {}, value(data[name]))))));
}

// ---------------------------------------------------------------- edits (writer keys)

function editorFor(name, spec, current) {
  const attrs = { name, id: `edit-${name}`, "data-kind": spec.type };
  if (spec.type === "enum") {
    const options = (spec.values || []).map((v) => [v, v]);
    if (spec.nullable !== false) options.unshift(["", "(null)"]);
    return select(options, current ?? "", attrs);
  }
  if (spec.type === "bool") {
    const options = [["true", "true"], ["false", "false"]];
    if (spec.nullable !== false) options.unshift(["", "(null)"]);
    return select(options, current === null || current === undefined ? "" : String(current), attrs);
  }
  if (spec.type === "list") {
    return h("input", { ...attrs, type: "text", class: "mono",
      value: JSON.stringify(current ?? []) });
  }
  if (spec.type === "int" || spec.type === "float") {
    return h("input", { ...attrs, type: "number", step: spec.type === "int" ? "1" : "any",
      value: current ?? "" });
  }
  if (spec.type === "date") return h("input", { ...attrs, type: "date", value: current ?? "" });
  if (spec.type === "json") {
    // edited as JSON text: objects, lists, numbers and booleans stay what they are
    const area = h("textarea", { ...attrs, rows: 4, class: "mono", spellcheck: "false" });
    area.value = current === undefined ? "null" : JSON.stringify(current, null, 2);
    return area;
  }
  const text = current === null || current === undefined ? "" : String(current);
  if (text.length > 60) {
    const area = h("textarea", { ...attrs, rows: 3 });
    area.value = text;
    return area;
  }
  return h("input", { ...attrs, type: "text", value: text });
}

function readEditor(el, spec) {
  const text = el.value;
  if (text === "") return null;
  if (spec.type === "int" || spec.type === "float") {
    const n = Number(text);
    return Number.isFinite(n) ? n : text;
  }
  if (spec.type === "bool") return text === "true";
  if (spec.type === "json") {
    try {
      return JSON.parse(text);
    } catch (err) {
      throw new EditError(spec.name, `not valid JSON: ${err.message}`);
    }
  }
  if (spec.type === "list") {
    try {
      return JSON.parse(text);
    } catch {
      return text; // the API names the field and the problem
    }
  }
  return text;
}

class EditError extends Error {
  constructor(field, message) {
    super(`${field}: ${message}`);
    this.field = field;
  }
}

// Only the fields the user touched are read and sent: a field that was not edited is never
// sent back, so it cannot be changed by how the page shows it.
function changedFields(form, entity, def, touched) {
  const changes = {};
  for (const [name, spec] of Object.entries(def.fields)) {
    const el = form.elements.namedItem(name);
    if (!el || !touched.has(name)) continue;
    const next = readEditor(el, { ...spec, name });
    if (JSON.stringify(next) !== JSON.stringify(entity.data[name] ?? null)) changes[name] = next;
  }
  return changes;
}

function editCard(entity, def, ctx) {
  const identity = def.identity || Object.keys(def.fields);
  const editable = Object.entries(def.fields).filter(([name]) => !identity.includes(name));
  const status = h("div", { id: "edit-status" });
  const reason = h("input", { type: "text", name: "x-reason", id: "edit-reason",
    placeholder: "why (recorded in the audit log)" });
  const form = h("form", { class: "edit", id: "edit-form" },
    editable.length ? editable.map(([name, spec]) =>
      labelled(name, editorFor(name, spec, entity.data[name]),
        spec.type === "list" ? "JSON list" : spec.type === "json" ? "JSON" : spec.type))
      : h("p", { class: "muted" }, "Every field is part of the identity."),
    labelled("reason", reason),
    h("div", { class: "actions" },
      h("button", { type: "submit", class: "primary", id: "save-edit" },
        `Save (If-Match: "${entity.version}")`),
      h("button", { type: "button", class: "danger", id: "delete-entity" }, "Delete…")),
    status);
  const touched = new Set();
  for (const kind of ["input", "change"]) {
    form.addEventListener(kind, (event) => {
      if (event.target && event.target.name) touched.add(event.target.name);
    });
  }
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    let changes;
    try {
      changes = changedFields(form, entity, def, touched);
    } catch (err) {
      if (!(err instanceof EditError)) throw err;
      fill(status, h("div", { class: "notice error", id: "edit-invalid", role: "alert" },
        err.message));
      return;
    }
    if (!Object.keys(changes).length) {
      fill(status, notice("info", "Nothing changed."));
      return;
    }
    fill(status, h("p", { class: "muted" }, "Saving…"));
    try {
      const saved = await api.update(entity.id, changes, entity.version, reason.value.trim());
      fill(status, notice("ok", `Saved: version ${saved.version}.`));
      ctx.rerender();
    } catch (err) {
      fill(status, ...(await conflictView(err, entity, changes, ctx)));
    }
  });
  form.querySelector("#delete-entity").addEventListener("click", () => {
    const yes = h("button", { type: "button", class: "danger", id: "confirm-delete" },
      "Delete (restorable)");
    const no = h("button", { type: "button", id: "cancel-delete" }, "Cancel");
    fill(status, notice("warn", `Soft-delete ${entity.id} at version ${entity.version}? `, yes, " ", no));
    no.addEventListener("click", () => fill(status));
    yes.addEventListener("click", async () => {
      try {
        await api.remove(entity.id, entity.version, reason.value.trim());
        ctx.rerender();
      } catch (err) {
        fill(status, ...(await conflictView(err, entity, null, ctx)));
      }
    });
  });
  return h("section", { class: "card" }, h("h2", {}, "Edit"),
    h("p", { class: "muted small" }, "Changes are sent with If-Match: a change made meanwhile ",
      "by someone else is refused, not overwritten. Identity fields cannot change."), form);
}

async function conflictView(err, entity, changes, ctx) {
  if (!(err instanceof api.ApiError) || err.status !== 412) return [errorNotice(err)];
  let current = null;
  try {
    current = await api.entity(entity.id);
  } catch {
    current = null;
  }
  const reload = h("button", { type: "button", id: "reload-current" }, "Load the current version");
  reload.addEventListener("click", () => ctx.rerender());
  const rows = changes ? Object.keys(changes).map((name) => h("tr", {},
    h("td", { class: "mono" }, name), h("td", {}, value(changes[name])),
    h("td", {}, current ? value(current.data[name]) : "?"))) : [];
  return [h("div", { class: "notice error conflict", id: "conflict", role: "alert" },
    h("strong", {}, "Not saved: the entity changed since you loaded it."),
    h("p", {}, err.message),
    h("p", {}, `You edited version ${entity.version}; the current version is `,
      h("strong", { id: "current-version" }, current ? current.version : err.details.current_version ?? "?"),
      "."),
    rows.length ? h("table", { class: "diff" },
      h("thead", {}, h("tr", {}, h("th", {}, "field"), h("th", {}, "your value"),
        h("th", {}, "current value"))), h("tbody", {}, rows)) : null,
    reload)];
}

function restoreCard(entityId, deleteEvent, ctx) {
  const status = h("div", { id: "restore-status" });
  const button = h("button", { type: "button", class: "primary", id: "restore-entity" },
    `Restore (If-Match: "${deleteEvent.version_after}")`);
  button.addEventListener("click", async () => {
    try {
      await api.restore(entityId, deleteEvent.version_after, "");
      ctx.rerender();
    } catch (err) {
      fill(status, errorNotice(err));
    }
  });
  return h("section", { class: "card" }, h("h2", {}, "Restore"),
    h("p", { class: "muted small" }, "A soft delete keeps the entity and its history; restoring ",
      "is another audited write."), button, status);
}

// ---------------------------------------------------------------- relations and timeline

function relationsCard(relations, typedefs, asOf) {
  const row = (r) => h("tr", {},
    h("td", { class: "dir" }, r.direction === "in" ? "←" : "→"),
    h("td", { class: "mono" }, r.relation),
    h("td", {}, h("span", { class: "tag" }, r.entity.type)),
    h("td", {}, link(entityLabel(r.entity, typedefs.get(r.entity.type)),
      `/entity/${encodeURIComponent(r.entity.id)}`, asOf ? { as_of: asOf } : {})));
  const card = h("section", { class: "card", id: "relations" }, h("h2", {}, "Relations ",
    h("span", { class: "muted small" }, `${relations.length}`)));
  if (!relations.length) return add(card, h("p", { class: "muted" }, "No relations."));
  const body = h("tbody");
  const more = inBatches(body, relations, row);
  return add(card, [h("table", { class: "grid compact" }, body), more]);
}

function eventItem(e, entityId, seq) {
  const versions = e.version_before || e.version_after
    ? `v${e.version_before ?? "∅"} → v${e.version_after ?? "∅"}` : "";
  const classes = ["event"];
  if (seq !== null && e.seq === seq) classes.push("current");
  if (seq !== null && e.seq > seq) classes.push("later");
  return h("li", { class: classes.join(" "), dataset: { seq: e.seq, op: e.op } },
    h("div", { class: "event-head" },
      h("span", { class: "seq" }, `#${e.seq}`), opBadge(e.op),
      h("span", { class: "versions" }, versions),
      h("span", { class: "when" }, time(e.ts))),
    h("div", { class: "event-meta" },
      h("span", { class: "event-author" }, h("span", { class: "muted" }, "by "), author(e)),
      e.reason ? h("span", {}, h("span", { class: "muted" }, "reason "), e.reason) : null,
      e.trace_id ? h("span", {}, h("span", { class: "muted" }, "trace "),
        h("span", { class: "mono" }, e.trace_id)) : null),
    diffTable(e, entityId),
    e.op === "link" || e.op === "unlink" ? null : link("state as of this event",
      `/entity/${encodeURIComponent(entityId)}`, { as_of: e.seq }, { class: "small as-of" }));
}

function timeline(events, entityId, asOf) {
  const seq = asOf ? Number(asOf) : null;
  const card = h("section", { class: "card", id: "timeline" }, h("h2", {}, "Timeline ",
    h("span", { class: "muted small" }, `${events.length} events, newest first`)));
  if (!events.length) return add(card, h("p", { class: "muted" }, "No events."));
  const list = h("ol", { class: "timeline" });
  const more = inBatches(list, [...events].reverse(), (e) => eventItem(e, entityId, seq));
  return add(card, [list, more]);
}
