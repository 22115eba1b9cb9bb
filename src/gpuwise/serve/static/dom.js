// Tiny DOM helpers: build elements from data, never from HTML strings (no innerHTML: messages and names
// from the API are text, so nothing in them can become markup).

const SVG_NS = "http://www.w3.org/2000/svg";

function build(el, attrs, children) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.setAttribute("class", v);
    else if (k === "text") el.textContent = v;
    else if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

/** h("td", {class: "num"}, "1.00 GiB") */
export function h(tag, attrs = {}, ...children) {
  return build(document.createElement(tag), attrs, children);
}

/** s("rect", {x: 0, y: 0, width: 10, height: 10}) */
export function s(tag, attrs = {}, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attrs, children);
}

export function clear(el) {
  el.replaceChildren();
  return el;
}

/** A table from column specs [{label, cell(row) -> text|Node, num?}] and rows. */
export function table(columns, rows, { caption = null, rowAttrs = () => ({}), testid = null } = {}) {
  return h("div", { class: "table-wrap" },
    h("table", { "data-testid": testid },
      caption ? h("caption", {}, caption) : null,
      h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col", class: c.num ? "num" : null }, c.label)))),
      h("tbody", {}, rows.map((r, i) => h("tr", rowAttrs(r, i),
        columns.map((c) => h("td", { class: c.num ? "num" : null }, c.cell(r, i))))))));
}

/** A definition list of [term, value, {testid, title}] for the headline numbers of a section. */
export function facts(items) {
  return h("dl", { class: "facts" }, items.filter(Boolean).map(([term, value, opts = {}]) =>
    h("div", { class: "fact" },
      h("dt", {}, term),
      h("dd", { "data-testid": opts.testid || null, title: opts.title || null }, value),
      opts.note ? h("dd", { class: "note" }, opts.note) : null)));
}
