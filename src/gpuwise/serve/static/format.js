// Number formatting for the page: every number leaves here with its unit, and null/undefined becomes
// "unknown" (the JSON's null means "not known", never zero). Locale is fixed to en-US so the page reads the
// same everywhere and the end-to-end test can compare the text with the API's JSON.

export const UNKNOWN = "unknown";
const GIB = 2 ** 30;

/** A number the JSON knows: 0 is known (a real zero), null/undefined/NaN are not. */
export const known = (v) => v !== null && v !== undefined && !Number.isNaN(v);

/** `digits` decimals with thousands separators: 1234.5 -> "1,234.50". */
export function fixed(v, digits = 2) {
  if (!known(v)) return UNKNOWN;
  return v.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

/** Three significant digits, no exponent for everyday sizes: 0.0536 -> "0.0536", 91838.7 -> "91,839". */
export function sig(v, n = 3) {
  if (!known(v)) return UNKNOWN;
  if (v === 0) return "0";
  const a = Math.abs(v);
  if (a >= 10 ** n) return Math.round(v).toLocaleString("en-US");
  const decimals = Math.max(0, n - 1 - Math.floor(Math.log10(a)));
  return fixed(v, Math.min(decimals, 8));
}

/** Bytes as GiB with two decimals (the CLI's own rounding). */
export function gib(bytes) {
  return known(bytes) ? `${fixed(bytes / GIB, 2)} GiB` : UNKNOWN;
}

export function seconds(s) {
  if (!known(s)) return UNKNOWN;
  const a = Math.abs(s);
  if (a === 0) return "0 s";
  if (a < 1e-3) return `${sig(s * 1e6)} µs`;
  if (a < 1) return `${sig(s * 1e3)} ms`;
  if (a < 120) return `${sig(s)} s`;
  if (a < 7200) return `${sig(s / 60)} min`;
  if (a < 3 * 86400) return `${sig(s / 3600)} h`;
  return `${sig(s / 86400)} days`;
}

export function perSecond(v, what = "tokens") {
  return known(v) ? `${sig(v)} ${what}/s` : UNKNOWN;
}

export function percent(fraction, digits = 1) {
  return known(fraction) ? `${fixed(fraction * 100, digits)}%` : UNKNOWN;
}

export function usd(v) {
  if (!known(v)) return UNKNOWN;
  return v >= 100 ? `$${fixed(v, 0)}` : `$${sig(v)}`;
}

const SI = [[1e18, "E"], [1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];

/** 989.5e12 -> "989.5 T" (caller appends the unit: FLOP, FLOP/s, B/s). */
export function si(v) {
  if (!known(v)) return UNKNOWN;
  for (const [scale, prefix] of SI) {
    if (Math.abs(v) >= scale) return `${sig(v / scale, 4)} ${prefix}`;
  }
  return `${sig(v, 4)} `;
}

export function flops(v) {
  return known(v) ? `${si(v)}FLOP` : UNKNOWN;
}

export function flopsPerSecond(v) {
  return known(v) ? `${si(v)}FLOP/s` : UNKNOWN;
}

export function bytesPerSecond(v) {
  return known(v) ? `${si(v)}B/s` : UNKNOWN;
}

/** Bytes with an SI prefix: 1.5e9 -> "1.5 GB" (traffic, not capacity: capacities are GiB). */
export function bytes(v) {
  return known(v) ? `${si(v)}B` : UNKNOWN;
}

/** Arithmetic intensity: 3.98 -> "3.98 FLOP/B"; 0 stays "0 FLOP/B". */
export function intensity(v) {
  return known(v) ? `${sig(v)} FLOP/B` : UNKNOWN;
}

/** A part of a whole as a percentage with no decimals; unknown when either side is unknown or the whole is 0. */
export function share(part, whole) {
  return known(part) && known(whole) && whole > 0 ? `${fixed((100 * part) / whole, 0)}%` : UNKNOWN;
}

export function count(v, unit = "") {
  if (!known(v)) return UNKNOWN;
  const text = Number.isInteger(v) ? v.toLocaleString("en-US") : sig(v);
  return unit ? `${text} ${unit}` : text;
}

export function params(v) {
  if (!known(v)) return UNKNOWN;
  if (v >= 1e9) return `${fixed(v / 1e9, 2)}B parameters`;
  if (v >= 1e6) return `${fixed(v / 1e6, 1)}M parameters`;
  return `${count(v)} parameters`;
}

/** "+85%" / "-12%": a change relative to the original. */
export function change(fraction) {
  if (!known(fraction)) return UNKNOWN;
  const sign = fraction > 0 ? "+" : fraction < 0 ? "−" : "";
  return `${sign}${fixed(Math.abs(fraction) * 100, 0)}%`;
}
