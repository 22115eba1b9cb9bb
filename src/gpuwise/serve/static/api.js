// The page's only way to the numbers: GET /api/<command>?<params> (or POST with {"config": {...}} for a
// pasted config.json). Responses are the CLI's --json documents (docs/json-schema.md); a 400 carries the
// CLI's one-line error message, which the page shows as it is.

export class ApiError extends Error {
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

/** Drop empty values: an empty field means "the CLI's default", so the parameter is not sent at all. */
export function cleanParams(params) {
  const out = {};
  for (const [k, v] of Object.entries(params)) {
    if (v === null || v === undefined || v === "") continue;
    out[k] = String(v);
  }
  return out;
}

export function url(command, params) {
  const q = new URLSearchParams(cleanParams(params)).toString();
  return `/api/${command}${q ? `?${q}` : ""}`;
}

/** The JSON document of `gpuwise <command> ... --json`; ApiError with the CLI's message otherwise. */
export async function call(command, params, { config = null, signal = undefined } = {}) {
  const init = { signal, headers: { Accept: "application/json" } };
  if (config !== null) {
    init.method = "POST";
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify({ config });
  }
  let response;
  try {
    response = await fetch(url(command, params), init);
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError("the gpuwise server did not answer (is `gpuwise serve` still running?)", 0);
  }
  let doc = null;
  try {
    doc = await response.json();
  } catch {
    throw new ApiError(`the server answered ${response.status} without JSON`, response.status);
  }
  if (!response.ok) {
    throw new ApiError(doc && doc.error ? doc.error : `HTTP ${response.status}`, response.status);
  }
  return doc;
}
