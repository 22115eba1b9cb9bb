"""/docs: the API reference as one static HTML page, rendered from the OpenAPI description (works offline)."""

from __future__ import annotations

from html import escape

from .api import openapi


def docs_html() -> str:
    spec = openapi()
    parts = [f"<h1>{escape(spec['info']['title'])} API {escape(spec['info']['version'])}</h1>",
             f"<p>{escape(spec['info']['description'])} Machine-readable: <a href='/openapi.json'>/openapi.json</a>"
             " (OpenAPI 3.1). The page: <a href='/'>/</a>.</p>",
             "<p>Errors are <code>400 {\"error\": \"...\"}</code> with the CLI's message. Example: "
             "<a href='/api/fit?model=llama-3.1-8b&amp;gpu=rtx-4090'>/api/fit?model=llama-3.1-8b&amp;gpu=rtx-4090"
             "</a></p>"]
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            parts.append(f"<h2 id='{escape(op['operationId'])}'><code>{method.upper()} {escape(path)}</code></h2>")
            parts.append(f"<p>{escape(op['summary'])}</p>")
            rows = []
            for p in op.get("parameters", []):
                s = p["schema"]
                values = " | ".join(map(str, s["enum"])) if "enum" in s else s["type"]
                default = escape(str(s["default"])) if "default" in s else ""
                rows.append(f"<tr><td><code>{escape(p['name'])}</code>{' *' if p['required'] else ''}</td>"
                            f"<td>{escape(values)}</td><td>{default}</td>"
                            f"<td>{escape(p.get('description', ''))}</td></tr>")
            if rows:
                parts.append("<table><tr><th>parameter</th><th>values</th><th>default</th><th>meaning</th></tr>"
                             + "".join(rows) + "</table>")
            if "requestBody" in op:
                parts.append("<p>Body: <code>{\"config\": { ... config.json ... }}</code></p>")
    style = ("body{font:15px/1.45 system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#1a1a1a}"
             "table{border-collapse:collapse;width:100%;margin-bottom:1.5em}td,th{border:1px solid #ccc;"
             "padding:4px 8px;text-align:left;vertical-align:top}th{background:#f3f3f3}code{font-size:13px}"
             "h2{margin-top:2em;font-size:17px}")
    return ("<!doctype html><html lang='en'><head><meta charset='utf-8'><title>gpuwise API</title>"
            f"<style>{style}</style></head><body>{''.join(parts)}</body></html>")
