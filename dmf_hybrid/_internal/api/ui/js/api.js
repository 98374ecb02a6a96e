// The HTTP API, as the inspector uses it: the same routes and keys as any other client.

const KEY_STORAGE = "dmf.apiKey";

/** An error answer of the API: `{error: code, message, details}` and its HTTP status. */
export class ApiError extends Error {
  constructor(status, code, message, details = {}) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

/** The API key of this browser session ("" when none was entered). */
export function apiKey() {
  return sessionStorage.getItem(KEY_STORAGE) || "";
}

/** Keep `key` for this browser session (empty: forget it). */
export function setApiKey(key) {
  if (key) sessionStorage.setItem(KEY_STORAGE, key);
  else sessionStorage.removeItem(KEY_STORAGE);
}

function percent(text) {
  return encodeURIComponent(text);
}

/** One API call; resolves to {data, headers, status}, rejects with an ApiError. */
export async function call(method, path, { body, query, headers = {} } = {}) {
  const url = new URL(path, window.location.origin);
  for (const [k, v] of Object.entries(query || {})) {
    if (v !== undefined && v !== null && v !== "") url.searchParams.set(k, String(v));
  }
  const sent = { Accept: "application/json", ...headers };
  const key = apiKey();
  if (key) sent.Authorization = `Bearer ${key}`;
  const init = { method, headers: sent, cache: "no-store", credentials: "omit" };
  if (body !== undefined) {
    sent["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(url, init);
  } catch (err) {
    throw new ApiError(0, "network", `cannot reach the service (${err.message})`);
  }
  const text = await response.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = null;
    }
  }
  if (!response.ok) {
    if (data && typeof data === "object" && typeof data.message === "string") {
      throw new ApiError(response.status, String(data.error || `http_${response.status}`),
        data.message, data.details && typeof data.details === "object" ? data.details : {});
    }
    throw new ApiError(response.status, `http_${response.status}`,
      `HTTP ${response.status} ${response.statusText}`.trim());
  }
  return { data, headers: response.headers, status: response.status };
}

async function get(path, query) {
  return (await call("GET", path, { query })).data;
}

async function post(path, body) {
  return (await call("POST", path, { body })).data;
}

const id = (entityId) => encodeURIComponent(entityId);

export const whoami = () => get("/whoami");
export const types = () => get("/types");
export const type = (name) => get(`/types/${encodeURIComponent(name)}`);
export const rules = () => get("/rules");
export const count = (typeName, where) =>
  post(`/entities/${encodeURIComponent(typeName)}/count`, { where: where || null });
export const query = (typeName, body) =>
  post(`/entities/${encodeURIComponent(typeName)}/query`, body);
export const entity = (entityId, asOf) => get(`/entities/${id(entityId)}`, { as_of: asOf });
export const related = (entityId, asOf) =>
  get(`/entities/${id(entityId)}/related`, { direction: "both", as_of: asOf });
export const history = (entityId) => get(`/entities/${id(entityId)}/history`);
export const events = (sinceSeq, untilSeq, limit) =>
  get("/audit/events", { since_seq: sinceSeq, until_seq: untilSeq, limit });
export const verify = () => get("/audit/verify");
export const head = () => get("/audit/head");
export const search = (body) => post("/search", body);
export const constraints = (params) => get("/constraints", params);

function writeHeaders(version, reason) {
  const headers = {};
  if (version !== undefined && version !== null) headers["If-Match"] = `"${version}"`;
  if (reason) headers["X-Reason"] = percent(reason);
  return headers;
}

/** PATCH the fields `data` of an entity, guarded by If-Match: "<version>". */
export async function update(entityId, data, version, reason) {
  return (await call("PATCH", `/entities/${id(entityId)}`,
    { body: { data }, headers: writeHeaders(version, reason) })).data;
}

/** Soft-delete an entity (If-Match guarded). */
export async function remove(entityId, version, reason) {
  return (await call("DELETE", `/entities/${id(entityId)}`,
    { headers: writeHeaders(version, reason) })).data;
}

/** Undo a soft delete (If-Match guarded). */
export async function restore(entityId, version, reason) {
  return (await call("POST", `/entities/${id(entityId)}/restore`,
    { headers: writeHeaders(version, reason) })).data;
}
