"""`gpuwise serve`: a local web page and HTTP API over the same engine and JSON as the CLI.

    api.py      the CLI commands as HTTP endpoints: query parameters -> the CLI's argv -> `cli.run` -> its JSON,
                byte for byte; the OpenAPI description is generated from the same argparse options
    docs.py     /docs: the API's reference as one static HTML page (no CDN, works offline)
    server.py   the HTTP server (stdlib `http.server`, threads): /api/*, /openapi.json, /docs, the page
    static/     the page: plain HTML, CSS and JavaScript, no framework, no external URL

The page is a presenter like the CLI's text output: every number on it comes from an /api/ call.
"""
