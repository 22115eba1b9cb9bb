// The two drawings of the page, as inline SVG (no library): a stacked horizontal bar (memory per GPU against
// its capacity; the training step's time breakdown) and a log-log roofline. Both take the API's numbers as
// they are and draw them; the values themselves are shown as text next to them (legend, tables), so the
// drawing is never the only place a number lives.

import { s, h } from "./dom.js";
import { fixed, si, sig } from "./format.js";

// Colour-blind-safe categorical palette (Okabe & Ito), then two greys for the "everything else" parts.
export const PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#8C6BB1", "#F0E442",
  "#882255", "#8A8A8A", "#BDBDBD"];

function textColour(hex) {
  const n = parseInt(hex.slice(1), 16);
  const [r, g, b] = [(n >> 16) & 255, (n >> 8) & 255, n & 255];
  return 0.299 * r + 0.587 * g + 0.114 * b > 150 ? "#111" : "#fff";
}

// Text widths for laying out labels, measured with the page's own font (the SVGs are drawn at the
// container's width, so one SVG unit is one CSS pixel).
let measurer = null;
function textWidth(text, font = "600 12px") {
  if (!measurer) measurer = document.createElement("canvas").getContext("2d");
  const family = getComputedStyle(document.documentElement).fontFamily || "sans-serif";
  measurer.font = `${font} ${family}`;
  return measurer.measureText(text).width;
}

/**
 * Where a segment's text goes: the widest stretch of the segment that no reference line crosses, and the first
 * of `texts` (longest first) that fits there with some padding; null when none fits (the legend has the value).
 */
function segmentLabel(x0, x1, lineXs, texts, pad = 5, gap = 4) {
  let spans = [[x0 + pad, x1 - pad]];
  for (const lx of lineXs) {
    spans = spans.flatMap(([a, b]) => (lx + gap <= a || lx - gap >= b ? [[a, b]]
      : [[a, lx - gap], [lx + gap, b]].filter(([c, d]) => d > c)));
  }
  if (!spans.length) return null;
  const [a, b] = spans.reduce((best, sp) => (sp[1] - sp[0] > best[1] - best[0] ? sp : best));
  const text = texts.find((t) => textWidth(t) <= b - a);
  return text ? { text, x: (a + b) / 2 } : null;
}

function niceStep(raw) {
  const p = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

/**
 * A stacked horizontal bar with reference lines.
 * parts: [{key, label, value, colour}] (value >= 0, in the unit of `unit`); lines: [{value, label, dashed}];
 * unit: {scale (value per axis unit), name}, e.g. {scale: 2**30, name: "GiB"}.
 * Returns {svg, legend}: the legend is an HTML list with every value as text.
 */
export function stackedBar({ parts, lines = [], unit, ariaLabel, testid, valueText, width = 800 }) {
  // drawn at the container's own width, so its text stays at its CSS size in a narrow column
  const W = Math.max(320, Math.round(width)), H = 96, left = 4, right = 12, barY = 26, barH = 34;
  const total = parts.reduce((a, p) => a + Math.max(0, p.value || 0), 0);
  const max = Math.max(total, ...lines.map((l) => l.value || 0)) * 1.02 || 1;
  const x = (v) => left + (v / max) * (W - left - right);
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": ariaLabel, "data-testid": testid,
    preserveAspectRatio: "xMinYMin meet", class: "bar-svg" });
  svg.append(s("title", {}, ariaLabel));

  // axis ticks under the bar, in the display unit
  const maxUnits = max / unit.scale;
  const step = niceStep(maxUnits / Math.max(2, Math.floor(W / 130)));
  for (let t = 0; t <= maxUnits + 1e-9; t += step) {
    const tx = x(t * unit.scale);
    svg.append(s("line", { x1: tx, x2: tx, y1: barY + barH, y2: barY + barH + 5, class: "tick" }));
    svg.append(s("text", { x: tx, y: barY + barH + 17, class: "tick-label", "text-anchor": t === 0 ? "start" : "middle" },
      `${Number(t.toFixed(6)).toLocaleString("en-US")} ${unit.name}`));
  }

  // the reference lines cross the bar: a segment's text keeps clear of them (and of the segment's edges)
  const refs = lines.filter((l) => l.value).map((l, i) => ({ ...l, x: x(l.value), above: i % 2 === 0 }));
  let at = 0;
  for (const p of parts) {
    const v = Math.max(0, p.value || 0);
    if (v <= 0) continue;
    const x0 = x(at), x1 = x(at + v);
    const g = s("g", { "data-part": p.key });
    g.append(s("rect", { x: x0, y: barY, width: Math.max(0.5, x1 - x0), height: barH, fill: p.colour },
      s("title", {}, `${p.label}: ${valueText(v)}`)));
    const place = segmentLabel(x0, x1, refs.map((r) => r.x), [`${p.label} ${valueText(v)}`, valueText(v)]);
    if (place) {
      g.append(s("text", { x: place.x, y: barY + barH / 2 + 4, "text-anchor": "middle", class: "seg-label",
        fill: textColour(p.colour) }, place.text));
    }
    svg.append(g);
    at += v;
  }

  for (const r of refs) {
    svg.append(s("line", { x1: r.x, x2: r.x, y1: r.above ? 6 : barY, y2: r.above ? barY + barH : barY + barH + 4,
      class: r.dashed ? "ref-line dashed" : "ref-line" }));
    const anchor = r.x > W * 0.6 ? "end" : "start";
    const dx = anchor === "end" ? -4 : 4;
    svg.append(s("text", { x: r.x + dx, y: r.above ? 16 : H - 2, "text-anchor": anchor, class: "ref-label" },
      `${r.label} ${valueText(r.value)}`));
  }

  const legend = parts.map((p) => h("li", { "data-part": p.key, "data-value": p.value },
    h("span", { class: "swatch", style: `background:${p.colour}`, "aria-hidden": "true" }),
    h("span", { class: "legend-name" }, p.label),
    h("span", { class: "legend-value" }, p.value === null || p.value === undefined ? "unknown" : valueText(p.value)),
    total > 0 && p.value ? h("span", { class: "legend-share" }, `${fixed((100 * p.value) / total, 0)}%`) : null));
  return { svg, legend };
}

function decadeLabel(k) {
  const v = 10 ** k;
  if (k < 0) return String(Number(v.toPrecision(1)));
  return si(v).replace(/\.0+ /, " ").replace(/ $/, "").trim();
}

/** Log-log roofline of a `gpuwise roofline --json` document: roofs, the ridge, one point per operation. */
export function roofline(doc, width = 640) {
  const W = Math.max(320, Math.round(width)), H = Math.round(Math.min(340, Math.max(240, W * 0.6)));
  const m = { l: 62, r: 16, t: 16, b: 46 };
  const pw = W - m.l - m.r, ph = H - m.t - m.b;
  // attained FLOP/s: 0 FLOPs (norms, residual adds) is a known zero, not an unknown; a log axis cannot place
  // it, so such an operation is listed but not plotted
  const ops = doc.ops.map((o, i) => {
    const achieved = o.flops === 0 ? 0 : o.time_s > 0 && o.flops > 0 ? o.flops / o.time_s : null;
    return { ...o, n: i + 1, achieved, plotted: o.intensity_flops_per_byte > 0 && achieved > 0 };
  });
  const plotted = ops.filter((o) => o.plotted);
  const peak = doc.peak_flops, bw = doc.bandwidth_bytes_per_s, ridge = doc.ridge_flops_per_byte;
  const xs = [ridge, doc.achievable_ridge_flops_per_byte, ...plotted.map((o) => o.intensity_flops_per_byte)]
    .filter((v) => v > 0);
  const x0 = Math.floor(Math.log10(Math.min(...xs) / 2));
  const x1 = Math.max(Math.ceil(Math.log10(Math.max(...xs) * 3)), x0 + 3);
  const ys = [peak, bw * 10 ** x0, ...plotted.map((o) => o.achieved)].filter((v) => v > 0);
  const y1 = Math.ceil(Math.log10(peak * 2));
  const y0 = Math.min(Math.floor(Math.log10(Math.min(...ys))), y1 - 2);
  const X = (v) => m.l + ((Math.log10(v) - x0) / (x1 - x0)) * pw;
  const Y = (v) => m.t + ph - ((Math.log10(v) - y0) / (y1 - y0)) * ph;

  const label = `Roofline of ${doc.model.id} on ${doc.gpu.name}, ${doc.phase}: peak ${si(peak)}FLOP/s, ` +
    `memory ${si(bw)}B/s, ridge ${sig(ridge)} FLOP/byte`;
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": label, class: "roofline-svg",
    "data-testid": "roofline-svg" });
  svg.append(s("title", {}, label));
  const clipId = "roof-clip";
  svg.append(s("defs", {}, s("clipPath", { id: clipId }, s("rect", { x: m.l, y: m.t, width: pw, height: ph }))));

  for (let k = x0; k <= x1; k++) {
    svg.append(s("line", { x1: X(10 ** k), x2: X(10 ** k), y1: m.t, y2: m.t + ph, class: "grid" }));
    svg.append(s("text", { x: X(10 ** k), y: m.t + ph + 16, "text-anchor": "middle", class: "tick-label" }, decadeLabel(k)));
  }
  for (let k = y0; k <= y1; k++) {
    svg.append(s("line", { x1: m.l, x2: m.l + pw, y1: Y(10 ** k), y2: Y(10 ** k), class: "grid" }));
    svg.append(s("text", { x: m.l - 6, y: Y(10 ** k) + 4, "text-anchor": "end", class: "tick-label" }, decadeLabel(k)));
  }
  svg.append(s("text", { x: m.l + pw / 2, y: H - 8, "text-anchor": "middle", class: "axis-title" },
    "arithmetic intensity (FLOP/byte)"));
  svg.append(s("text", { x: 14, y: m.t + ph / 2, "text-anchor": "middle", class: "axis-title",
    transform: `rotate(-90 14 ${m.t + ph / 2})` }, "attainable FLOP/s"));

  const roof = (p, b, cls) => {
    const r = p / b, xa = 10 ** x0, xb = 10 ** x1;
    return s("polyline", { points: `${X(xa)},${Y(b * xa)} ${X(r)},${Y(p)} ${X(xb)},${Y(p)}`, class: cls,
      "clip-path": `url(#${clipId})` });
  };
  svg.append(roof(peak, bw, "roof"));
  if (doc.achievable_flops && doc.achievable_bandwidth_bytes_per_s) {
    svg.append(roof(doc.achievable_flops, doc.achievable_bandwidth_bytes_per_s, "roof achievable"));
  }
  svg.append(s("line", { x1: X(ridge), x2: X(ridge), y1: Y(peak), y2: m.t + ph, class: "ridge" }));
  const ridgeRight = X(ridge) > m.l + pw * 0.65;
  svg.append(s("text", { x: X(ridge) + (ridgeRight ? -4 : 4), y: m.t + ph - 6, class: "ridge-label",
    "text-anchor": ridgeRight ? "end" : "start" }, `ridge ${sig(ridge)} FLOP/byte`));
  // one numbered point per operation; a number that would cover another moves right until it does not
  const labels = [], boxes = [];
  const marks = plotted.map((o) => {
    const px = X(o.intensity_flops_per_byte), py = Y(o.achieved);
    const w = 7 * String(o.n).length + 3;
    let lx = px + 7;
    while (labels.some(([a, b, y]) => Math.abs(y - py) < 12 && lx < b && lx + w > a)) lx += 4;
    labels.push([lx, lx + w, py]);
    boxes.push([px - 6, px + 6, py - 6, py + 6], [lx - 1, lx + w, py - 18, py - 4]);
    return { o, px, py, lx };
  });
  const covers = (x, y) => boxes.some(([a, b, c, d]) => x >= a && x <= b && y >= c && y <= d);
  // a horizontal label (baseline y, from xa to xb) clear of every point and number
  const clearH = (xa, xb, y) => !boxes.some(([a, b, c, d]) => xa < b && xb > a && y - 10 < d && y + 3 > c);

  // the peak's label: above the flat roof left of the ridge when it fits there, else where no point is
  const peakText = `peak ${si(peak)}FLOP/s (${doc.dtype}, dense)`;
  const pw0 = textWidth(peakText, "11px");
  const peakSpots = [[X(ridge) - 6, Y(peak) - 6], [m.l + pw - 4, Y(peak) - 6], [m.l + pw - 4, Y(peak) + 15],
    [m.l + pw - 4, Y(peak) - 20]].filter(([xe, y]) => xe - pw0 >= m.l + 2 && y - 10 >= 0);
  const [peakX, peakY] = peakSpots.find(([xe, y]) => clearH(xe - pw0, xe, y)) || [m.l + pw - 4, Y(peak) - 6];
  svg.append(s("text", { x: peakX, y: peakY, "text-anchor": "end", class: "roof-label" }, peakText));

  // the bandwidth's label runs along the memory roof, just above it, where no point or number is
  const bwText = `${si(bw)}B/s`;
  const bwW = textWidth(bwText, "11px");
  const angle = (Math.atan((ph / (y1 - y0)) / (pw / (x1 - x0))) * 180) / Math.PI;
  const rad = (angle * Math.PI) / 180;
  const along = (t) => [X(10 ** (x0 + t)), Y(bw * 10 ** (x0 + t)) - 6];
  const bwClear = ([bx, by]) => {
    for (let u = 0; u <= bwW; u += 3) {
      for (const v of [-10, -5, 0, 2]) {
        if (covers(bx + u * Math.cos(rad) + v * Math.sin(rad), by - u * Math.sin(rad) + v * Math.cos(rad))) return false;
      }
    }
    return true;
  };
  const bwSpots = [0.35, 0.2, 0.55, 0.1, 0.8, 1.1, 1.5].map(along)
    .filter(([bx]) => bx >= m.l + 2 && bx + bwW * Math.cos(rad) <= X(ridge) - 4);
  const [bx, by] = bwSpots.find(bwClear) || along(0.35);
  svg.append(s("text", { x: bx, y: by, class: "roof-label", transform: `rotate(${-angle} ${bx} ${by})` }, bwText));

  for (const { o, px, py, lx } of marks) {
    svg.append(s("g", { class: `op ${o.bound}`, "data-op": o.name },
      s("circle", { cx: px, cy: py, r: 5 },
        s("title", {}, `${o.n}. ${o.name}: ${sig(o.intensity_flops_per_byte)} FLOP/byte, ${si(o.achieved)}FLOP/s, ${o.bound}-bound`)),
      s("text", { x: lx, y: py - 7, class: "op-label" }, String(o.n))));
  }
  return { svg, ops };
}
